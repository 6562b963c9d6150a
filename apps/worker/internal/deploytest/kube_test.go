package deploytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/open-bot/computer/apps/worker/internal/kubetest"
	"github.com/open-bot/computer/apps/worker/internal/testenv"
)

// readManifest decodes every object of a multi-document YAML file.
func readManifest(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// typed converts an object of the manifest to its Go type.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

// checkWorkerManifest checks what deploy/kubernetes/worker.yaml says about
// itself, on the objects as given (from the file, or as the API server
// answered them): a worker group (several replicas on one Postgres, the
// group token from a root-only Secret file, the group listener's address
// the pod's own IP, the shared secret.key from a Secret, a shared S3 home
// store, no claim shared between pods), the label the computers'
// NetworkPolicy admits, worker-rbac.yaml's ServiceAccount, tokens from a
// root-only Secret file, a public Service with the API port alone, and a
// NetworkPolicy that admits only the worker pods to the group port.
func checkWorkerManifest(t *testing.T, objs []*unstructured.Unstructured, rbacSA string) {
	t.Helper()
	du := find(objs, "Deployment", "open-bot-worker")
	su := find(objs, "Service", "open-bot-worker")
	if du == nil || su == nil {
		t.Fatalf("worker.yaml: want the Deployment and the Service open-bot-worker")
	}
	d := typed[appsv1.Deployment](t, du)
	svc := typed[corev1.Service](t, su)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		n := "unset"
		if d.Spec.Replicas != nil {
			n = itoa(*d.Spec.Replicas)
		}
		t.Errorf("replicas %s, want a worker group (2 or more)", n)
	}
	if got := d.Spec.Template.Labels["app.kubernetes.io/name"]; got != "open-bot-worker" {
		t.Errorf("pod label app.kubernetes.io/name=%q: the computers' NetworkPolicy admits open-bot-worker", got)
	}
	if d.Spec.Template.Spec.ServiceAccountName != rbacSA {
		t.Errorf("serviceAccountName %q, want worker-rbac.yaml's %q", d.Spec.Template.Spec.ServiceAccountName, rbacSA)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "open-bot/worker:dev" || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %s pull %s, want open-bot/worker:dev, Never (no registry)", c.Image, c.ImagePullPolicy)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container securityContext %+v: want no capability, no privilege escalation, a read-only root", sc)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for _, e := range c.Env {
		// A variable only for another's $(NAME) (POD_IP in
		// WORKER_GROUP_ADDR) is Kubernetes', not the worker's.
		if !workerReads(t, e.Name) && !referenced(c.Env, e.Name) {
			t.Errorf("env %s: the worker reads no such variable, and no other variable uses it", e.Name)
		}
	}
	for _, want := range []string{"WORKER_LISTEN", "WORKER_TOKEN_FILE", "WORKER_DATABASE_URL", "WORKER_PROVIDER", "KUBERNETES_NAMESPACE",
		"WORKER_GROUP_TOKEN_FILE", "WORKER_GROUP_LISTEN", "WORKER_GROUP_ADDR", "WORKER_HOMES_S3_ENDPOINT"} {
		if _, ok := env[want]; !ok {
			t.Errorf("env %s missing", want)
		}
	}
	if e := env["WORKER_DATABASE_URL"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("WORKER_DATABASE_URL must come from a Secret, not the manifest")
	}
	if env["WORKER_PROVIDER"].Value != "kubernetes" {
		t.Errorf("WORKER_PROVIDER=%q, want kubernetes", env["WORKER_PROVIDER"].Value)
	}
	for _, k := range []string{"WORKER_TOKEN", "WORKER_OPERATOR_TOKEN", "WORKER_GROUP_TOKEN"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s set by value: tokens come from the Secret's files", k)
		}
	}
	// secretVolume is the Secret volume mounted at or above path, root-only.
	secretVolume := func(p string) bool {
		for _, m := range c.VolumeMounts {
			if p != m.MountPath && !strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
				continue
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.DefaultMode != nil && *v.Secret.DefaultMode&0o077 == 0 {
					return true
				}
			}
		}
		return false
	}
	// The token files are on a Secret volume, root-only.
	for _, k := range []string{"WORKER_TOKEN_FILE", "WORKER_OPERATOR_TOKEN_FILE", "WORKER_GROUP_TOKEN_FILE"} {
		if p := env[k].Value; p != "" && !secretVolume(p) {
			t.Errorf("%s=%s is not on a Secret volume of mode 0400/0600", k, p)
		}
	}
	// Every member opens every computer's sealed token: DATA_DIR/secret.key
	// is the one key, from a Secret.
	if dd := env["DATA_DIR"].Value; dd == "" || !secretVolume(strings.TrimSuffix(dd, "/")+"/secret.key") {
		t.Errorf("DATA_DIR/secret.key (DATA_DIR=%q) is not the group's shared key from a Secret volume of mode 0400/0600", dd)
	}
	// Several pods: no claim they would all mount (DATA_DIR is each pod's
	// own; the home store is S3, which every member reaches).
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			t.Errorf("volume %s is the claim %s, which every replica would share: DATA_DIR must be each pod's own", v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	if e := env["WORKER_HOMES_S3_ENDPOINT"]; e.Value == "" && e.ValueFrom == nil {
		t.Errorf("WORKER_HOMES_S3_ENDPOINT unset: a group's checkpoints must be in a home store every member reaches")
	}
	for _, k := range []string{"WORKER_HOMES_S3_ACCESS_KEY_FILE", "WORKER_HOMES_S3_SECRET_KEY_FILE"} {
		if p := env[k].Value; p == "" || !secretVolume(p) {
			t.Errorf("%s=%q is not on a Secret volume of mode 0400/0600", k, p)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["api"] == 0 || !strings.HasSuffix(env["WORKER_LISTEN"].Value, ":"+itoa(ports["api"])) {
		t.Errorf("container port api %d is not WORKER_LISTEN's (%s)", ports["api"], env["WORKER_LISTEN"].Value)
	}
	if ml := env["WORKER_METRICS_LISTEN"].Value; ml != "" && !strings.HasSuffix(ml, ":"+itoa(ports["metrics"])) {
		t.Errorf("container port metrics %d is not WORKER_METRICS_LISTEN's (%s)", ports["metrics"], ml)
	}
	// The group listener: its port is the container's group port, and the
	// address the peers dial is this pod's IP on that port.
	if ports["group"] == 0 || !strings.HasSuffix(env["WORKER_GROUP_LISTEN"].Value, ":"+itoa(ports["group"])) {
		t.Errorf("container port group %d is not WORKER_GROUP_LISTEN's (%s)", ports["group"], env["WORKER_GROUP_LISTEN"].Value)
	}
	if ga := env["WORKER_GROUP_ADDR"].Value; ga != "http://$(POD_IP):"+itoa(ports["group"]) {
		t.Errorf("WORKER_GROUP_ADDR=%q, want http://$(POD_IP):%d (the pod's own IP)", ga, ports["group"])
	}
	if e := env["POD_IP"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("POD_IP must come from the downward API (status.podIP)")
	}
	for i, e := range c.Env {
		if e.Name == "POD_IP" {
			for _, before := range c.Env[:i] {
				if before.Name == "WORKER_GROUP_ADDR" {
					t.Errorf("POD_IP comes after WORKER_GROUP_ADDR: $(POD_IP) expands only a variable defined before it")
				}
			}
		}
	}
	// The public Service: exactly the API port.
	if svc.Spec.Selector["app.kubernetes.io/name"] != "open-bot-worker" {
		t.Errorf("the Service selects %v, not the worker's pods", svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Errorf("the public Service has %d ports, want the API's alone: %+v", len(svc.Spec.Ports), svc.Spec.Ports)
	}
	for _, p := range svc.Spec.Ports {
		tp := p.TargetPort.String()
		if !(tp == "api" || tp == itoa(ports["api"])) {
			t.Errorf("the public Service's port %q targets %s: only the API port (%d) may be public", p.Name, tp, ports["api"])
		}
	}
	// No other Service exposes the worker's other ports.
	for _, o := range objs {
		if o.GetKind() == "Service" && o.GetName() != "open-bot-worker" {
			t.Errorf("worker.yaml has another Service, %s", o.GetName())
		}
	}
	checkGroupPolicy(t, objs, d.Spec.Template.Labels, ports)
}

// checkGroupPolicy: a NetworkPolicy selects the worker's pods, admits the
// API port, and admits the group port from the worker's pods alone (in
// their own namespace; no namespace selector, no IP block, no open rule).
func checkGroupPolicy(t *testing.T, objs []*unstructured.Unstructured, podLabels map[string]string, ports map[string]int32) {
	t.Helper()
	pu := find(objs, "NetworkPolicy", "open-bot-worker")
	if pu == nil {
		t.Errorf("worker.yaml: want the NetworkPolicy open-bot-worker (the group port for the worker pods alone)")
		return
	}
	np := typed[networkingv1.NetworkPolicy](t, pu)
	const name = "app.kubernetes.io/name"
	if np.Spec.PodSelector.MatchLabels[name] != podLabels[name] || len(np.Spec.PodSelector.MatchExpressions) != 0 {
		t.Errorf("the NetworkPolicy selects %+v, not the worker's pods (%s=%s)", np.Spec.PodSelector, name, podLabels[name])
	}
	ingress := false
	for _, pt := range np.Spec.PolicyTypes {
		ingress = ingress || pt == networkingv1.PolicyTypeIngress
	}
	if !ingress {
		t.Errorf("the NetworkPolicy's policyTypes %v leave ingress open", np.Spec.PolicyTypes)
	}
	is := func(p *networkingv1.NetworkPolicyPort, port string) bool {
		return p.Port == nil || p.Port.String() == port || p.Port.String() == itoa(ports[port]) ||
			(p.EndPort != nil && p.Port.IntValue() <= int(ports[port]) && int(ports[port]) <= int(*p.EndPort))
	}
	api, group := false, false
	for _, r := range np.Spec.Ingress {
		onGroup, onAPI := len(r.Ports) == 0, len(r.Ports) == 0
		for i := range r.Ports {
			onGroup = onGroup || is(&r.Ports[i], "group")
			onAPI = onAPI || is(&r.Ports[i], "api")
		}
		api = api || (onAPI && len(r.From) == 0)
		if !onGroup {
			continue
		}
		group = true
		if len(r.From) == 0 {
			t.Errorf("a NetworkPolicy rule with no from admits anyone to the group port")
		}
		for _, f := range r.From {
			if f.IPBlock != nil || f.NamespaceSelector != nil || f.PodSelector == nil ||
				f.PodSelector.MatchLabels[name] != podLabels[name] || len(f.PodSelector.MatchExpressions) != 0 {
				t.Errorf("a NetworkPolicy rule admits %+v to the group port: only the worker's pods may reach it", f)
			}
		}
	}
	if !group {
		t.Errorf("the NetworkPolicy admits no one to the group port: the members could not relay to each other")
	}
	if !api {
		t.Errorf("the NetworkPolicy does not admit everyone to the API port")
	}
}

// referenced reports whether another variable of env uses $(name).
func referenced(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name != name && strings.Contains(e.Value, "$("+name+")") {
			return true
		}
	}
	return false
}

func itoa(n int32) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestWorkerManifestKubernetes: deploy/kubernetes/worker.yaml says what it
// claims (checked on the file), and a real API server (the test cluster,
// KUBE_TEST_KUBECONFIG) accepts it with strict field validation, in a
// namespace of the test's own beside worker-rbac.yaml applied for real: the
// manifest's objects are server-side applied as a dry run (no worker pod
// is started: the worker image is not on the test cluster's node, whose
// pods cannot reach its API server either), and the objects the server
// answers are checked again.
func TestWorkerManifestKubernetes(t *testing.T) {
	root := testenv.RepoRoot(t)
	worker := readManifest(t, filepath.Join(root, "deploy", "kubernetes", "worker.yaml"))
	rbac := readManifest(t, filepath.Join(root, "deploy", "kubernetes", "worker-rbac.yaml"))
	sa := find(rbac, "ServiceAccount", "")
	if sa == nil {
		t.Fatal("worker-rbac.yaml has no ServiceAccount")
	}
	t.Run("file", func(t *testing.T) { checkWorkerManifest(t, worker, sa.GetName()) })

	kc := os.Getenv("KUBE_TEST_KUBECONFIG")
	if kc == "" {
		testenv.Unavailable(t, "KUBE_TEST_KUBECONFIG is not set (scripts/kube.sh start makes the cluster and prints its kubeconfig)")
	}
	kubetest.Shared(t, kc)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		testenv.Unavailable(t, "the cluster of %s does not answer: %v", kc, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := "obtest-deploy-" + randHex(3)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	// The files name the namespace open-bot; here it is the test's.
	move := func(o *unstructured.Unstructured) {
		o.SetNamespace(ns)
		if subj, ok, _ := unstructured.NestedSlice(o.Object, "subjects"); ok {
			for _, s := range subj {
				if m, ok := s.(map[string]any); ok && m["namespace"] == "open-bot" {
					m["namespace"] = ns
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, subj, "subjects")
		}
	}
	force := true
	apply := func(o *unstructured.Unstructured, dryRun bool) *unstructured.Unstructured {
		t.Helper()
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		body, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		opts := metav1.PatchOptions{FieldManager: "open-bot-deploytest", Force: &force, FieldValidation: "Strict"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		got, err := dyn.Resource(m.Resource).Namespace(ns).Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts)
		if err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		return got
	}
	for _, o := range rbac {
		move(o)
		apply(o, false)
	}
	var answered []*unstructured.Unstructured
	for _, o := range worker {
		move(o)
		answered = append(answered, apply(o, true))
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, sa.GetName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("worker-rbac.yaml's ServiceAccount: %v", err)
	}
	t.Run("server", func(t *testing.T) { checkWorkerManifest(t, answered, sa.GetName()) })
}

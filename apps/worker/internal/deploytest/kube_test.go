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
// answered them): one worker, the label the computers' NetworkPolicy
// admits, worker-rbac.yaml's ServiceAccount, tokens from a root-only Secret
// file, and a public Service with the API port alone.
func checkWorkerManifest(t *testing.T, objs []*unstructured.Unstructured, rbacSA string) {
	t.Helper()
	du := find(objs, "Deployment", "open-bot-worker")
	su := find(objs, "Service", "open-bot-worker")
	if du == nil || su == nil {
		t.Fatalf("worker.yaml: want the Deployment and the Service open-bot-worker")
	}
	d := typed[appsv1.Deployment](t, du)
	svc := typed[corev1.Service](t, su)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		n := "unset"
		if d.Spec.Replicas != nil {
			n = itoa(*d.Spec.Replicas)
		}
		t.Errorf("replicas %s, want 1: one worker per database until the worker group exists", n)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q: a rolling update runs two workers on one database", d.Spec.Strategy.Type)
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
		if !workerReads(t, e.Name) {
			t.Errorf("env %s: the worker reads no such variable", e.Name)
		}
	}
	for _, want := range []string{"WORKER_LISTEN", "WORKER_TOKEN_FILE", "WORKER_DATABASE_URL", "WORKER_PROVIDER", "KUBERNETES_NAMESPACE"} {
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
	for _, k := range []string{"WORKER_TOKEN", "WORKER_OPERATOR_TOKEN"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s set by value: tokens come from the Secret's files", k)
		}
	}
	// The token files are on a Secret volume, root-only.
	for _, k := range []string{"WORKER_TOKEN_FILE", "WORKER_OPERATOR_TOKEN_FILE"} {
		p := env[k].Value
		if p == "" {
			continue
		}
		ok := false
		for _, m := range c.VolumeMounts {
			if !strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
				continue
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.DefaultMode != nil && *v.Secret.DefaultMode&0o077 == 0 {
					ok = true
				}
			}
		}
		if !ok {
			t.Errorf("%s=%s is not on a Secret volume of mode 0400/0600", k, p)
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

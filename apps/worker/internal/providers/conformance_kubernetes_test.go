package providers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/open-bot/computer/apps/worker/internal/kubetest"
	"github.com/open-bot/computer/apps/worker/internal/providers/agentsandbox"
	"github.com/open-bot/computer/pkg/shared/client"
)

// testKubernetes is a kubernetes provider on the cluster scripts/kube.sh
// runs (KUBE_TEST_KUBECONFIG, its admin kubeconfig: `make test` starts the
// cluster and sets it), in a namespace of its own that the test deletes.
func testKubernetes(t *testing.T) (*Kubernetes, kubernetes.Interface) {
	k, cs, _ := testKubernetesWith(t, func(*KubernetesOptions) {})
	return k, cs
}

// testKubernetesWith is testKubernetes with its options changed by opt; it
// also returns the admin configuration.
func testKubernetesWith(t *testing.T, opt func(*KubernetesOptions)) (*Kubernetes, kubernetes.Interface, *rest.Config) {
	t.Helper()
	return testKubernetesHeld(t, kubetest.Shared, opt)
}

// testKubernetesHeld is testKubernetesWith holding the cluster with hold
// (kubetest.Exclusive for a test that disrupts it for everyone).
func testKubernetesHeld(t *testing.T, hold func(testing.TB, string), opt func(*KubernetesOptions)) (*Kubernetes, kubernetes.Interface, *rest.Config) {
	t.Helper()
	kc := os.Getenv("KUBE_TEST_KUBECONFIG")
	if kc == "" {
		unavailable(t, "KUBE_TEST_KUBECONFIG is not set (scripts/kube.sh start makes the cluster and prints its kubeconfig)")
	}
	hold(t, kc)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := testCtx(t, time.Minute)
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		unavailable(t, "the cluster of %s does not answer: %v", kc, err)
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	ns := "obtest-" + hex.EncodeToString(b[:])
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	// The worker acts as a ServiceAccount bound to deploy/'s Role, not as
	// the cluster's admin: a grant the provider needs and the Role lacks
	// fails this test.
	wcfg := workerIdentity(t, ctx, cfg, cs, ns)
	img := os.Getenv("WORKER_IMAGE")
	if img == "" {
		img = DefaultImage
	}
	o := KubernetesOptions{Config: wcfg, Namespace: ns, Image: img, PullPolicy: corev1.PullNever,
		HomeSize: resource.MustParse("1Gi"), ReadyTimeout: 5 * time.Minute,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
		}}
	opt(&o)
	k, err := NewKubernetes(o)
	require.NoError(t, err)
	t.Cleanup(k.Close)
	return k, cs, cfg
}

// TestConformanceKubernetes: the conformance table on a real cluster (pods
// on containerd, the home a bound claim); destroy leaves none of the
// computer's resources.
func TestConformanceKubernetes(t *testing.T) {
	k, cs := testKubernetes(t)
	conform(t, backend{
		kind: KindKubernetes, p: k, multiScreen: true,
		reopen: func(st *testing.T) Provider {
			// A restarted worker: a new client over the same cluster. It
			// lives as long as the test (its machine is used after this step).
			k2, err := NewKubernetes(k.o)
			require.NoError(st, err)
			t.Cleanup(k2.Close)
			return k2
		},
		beforeDestroy: func(t *testing.T, ref string) {
			ctx := testCtx(t, 30*time.Second)
			_, err := cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Get(ctx, homeClaim(ref), metav1.GetOptions{})
			require.NoError(t, err, "the live computer has its home claim")
			_, err = cs.CoreV1().Secrets(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
			require.NoError(t, err, "the live computer has its secret")
		},
		gone: func(t *testing.T, ref string) {
			ctx := testCtx(t, 30*time.Second)
			for what, get := range map[string]func() error{
				"pod": func() error { _, err := cs.CoreV1().Pods(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{}); return err },
				"service": func() error {
					_, err := cs.CoreV1().Services(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
					return err
				},
				"secret": func() error {
					_, err := cs.CoreV1().Secrets(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
					return err
				},
				"claim": func() error {
					c, err := cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Get(ctx, homeClaim(ref), metav1.GetOptions{})
					if err == nil && c.DeletionTimestamp != nil {
						return apierrors.NewNotFound(corev1.Resource("persistentvolumeclaims"), c.Name) // deleted, its finalizer pending
					}
					return err
				},
			} {
				require.True(t, apierrors.IsNotFound(get()), "destroy removes the computer's %s", what)
			}
			ls, err := k.List(ctx)
			require.NoError(t, err)
			for _, l := range ls {
				require.NotEqual(t, ref, l.Ref, "a destroyed computer is not listed")
			}
		},
	})
}

// workerIdentity applies deploy/kubernetes/worker-rbac.yaml in namespace ns
// and returns a configuration that authenticates as its ServiceAccount
// (a token from the TokenRequest API) and nothing else.
func workerIdentity(t *testing.T, ctx context.Context, admin *rest.Config, cs kubernetes.Interface, ns string) *rest.Config {
	t.Helper()
	raw, err := os.ReadFile("../../../../deploy/kubernetes/worker-rbac.yaml")
	require.NoError(t, err)
	var sa string
	dec := scheme.Codecs.UniversalDeserializer()
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		require.NoError(t, err)
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace, sa = ns, o.Name
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = ns
			_, err = cs.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("worker-rbac.yaml: unexpected %T", obj)
		}
		require.NoError(t, err)
	}
	require.NotEmpty(t, sa, "worker-rbac.yaml has the worker's ServiceAccount")
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// installAgentSandboxCRDs installs agent-sandbox's published CRDs (as
// embedded) in the cluster and waits until they are served.
func installAgentSandboxCRDs(t *testing.T, ctx context.Context, admin *rest.Config) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(admin)
	require.NoError(t, err)
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	docs, err := agentsandbox.CRDs()
	require.NoError(t, err)
	var names []string
	for file, y := range docs {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal(y, &obj), file)
		// The published CRDs convert between their versions with a webhook
		// that runs beside agent-sandbox's controller; with none here the
		// API server retries it forever. The provider reads and writes only
		// the storage version, so no conversion is needed.
		require.NoError(t, unstructured.SetNestedField(obj, map[string]any{"strategy": "None"}, "spec", "conversion"))
		u := &unstructured.Unstructured{Object: obj}
		names = append(names, u.GetName())
		_, err := dyn.Resource(crds).Create(ctx, u, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, file)
		}
	}
	for _, n := range names {
		require.Eventually(t, func() bool {
			u, err := dyn.Resource(crds).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true
				}
			}
			return false
		}, time.Minute, 200*time.Millisecond, "CRD %s established", n)
	}
}

// TestKubernetesAgentSandboxMode: with agent-sandbox's CRDs installed in a
// real API server (its controller cannot be built here, and no stand-in
// runs), the provider's SandboxTemplate and Sandbox are accepted and
// stored as sent, as its ServiceAccount with deploy/'s Role; Reconnect
// with no status says no controller wrote one; the status a controller
// writes (Ready with a selector and serviceFQDN, then Suspended) is what
// Reconnect and Stop read; Destroy deletes the Sandbox and the Secret.
func TestKubernetesAgentSandboxMode(t *testing.T) {
	k, cs, admin := testKubernetesWith(t, func(o *KubernetesOptions) {
		o.SandboxAPI = KubeSandboxAPIAgentSandbox
		o.ReadyTimeout = 3 * time.Second
	})
	ctx := testCtx(t, 5*time.Minute)
	installAgentSandboxCRDs(t, ctx, admin)
	dyn, err := dynamic.NewForConfig(admin)
	require.NoError(t, err)
	ns := k.o.Namespace
	spec := Spec{ComputerID: "sandboxed_1", BotdToken: testToken()}
	ref, err := k.Provision(ctx, spec)
	require.NoError(t, err)

	// Stored as sent: the template, and the Sandbox with its pod, home
	// claim template and mode.
	tpl, err := dyn.Resource(agentsandbox.SandboxTemplates).Namespace(ns).Get(ctx, DefaultSandboxTemplate, metav1.GetOptions{})
	require.NoError(t, err, "the provider made its SandboxTemplate")
	require.Equal(t, kubeManagedByValue, tpl.GetLabels()[kubeManagedBy])
	sb, err := dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Get(ctx, ref, metav1.GetOptions{})
	require.NoError(t, err)
	mode, _, _ := unstructured.NestedString(sb.Object, "spec", "operatingMode")
	require.Equal(t, "Running", mode)
	vct, _, _ := unstructured.NestedSlice(sb.Object, "spec", "volumeClaimTemplates")
	require.Len(t, vct, 1)
	containers, _, _ := unstructured.NestedSlice(sb.Object, "spec", "podTemplate", "spec", "containers")
	require.Len(t, containers, 1)
	require.Equal(t, k.o.Image, containers[0].(map[string]any)["image"])
	raw, err := json.Marshal(sb.Object)
	require.NoError(t, err)
	require.NotContains(t, string(raw), spec.BotdToken, "the token is only in the Secret")
	require.Equal(t, "sandboxed_1", sb.GetAnnotations()[kubeAnnotComputer])

	// No controller: Reconnect says so, clearly.
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorContains(t, err, "no controller has written its status")

	// The status a controller writes is what Reconnect reads: Ready with
	// a selector no pod matches (none runs: no controller made one).
	writeStatus := sandboxStatusWriter(t, ctx, dyn, ns, ref)
	now := metav1.Now().UTC().Format(time.RFC3339)
	writeStatus(map[string]any{
		"conditions":  []any{map[string]any{"type": "Ready", "status": "False", "reason": "DependenciesNotReady", "message": "pod is pending", "lastTransitionTime": now}},
		"selector":    kubeLabelMachine + "=" + ref,
		"serviceFQDN": ref + "." + ns + ".svc.cluster.local",
	})
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorContains(t, err, "Ready=False (DependenciesNotReady: pod is pending)")
	writeStatus(map[string]any{
		"conditions":  []any{map[string]any{"type": "Ready", "status": "True", "reason": "DependenciesReady", "message": "", "lastTransitionTime": now}},
		"selector":    kubeLabelMachine + "=" + ref,
		"serviceFQDN": ref + "." + ns + ".svc.cluster.local",
	})
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorContains(t, err, "no running pod matches \""+kubeLabelMachine+"="+ref+"\"")

	// Stop sets Suspended and returns once the controller says so.
	requireStopSuspends(t, ctx, k, dyn, ns, ref, ref)
	// Resume sets Running again (and waits for Ready, which nothing writes).
	_, err = k.Reconnect(ctx, ref, spec)
	require.Error(t, err)
	cur, err := dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Get(ctx, ref, metav1.GetOptions{})
	require.NoError(t, err)
	mode, _, _ = unstructured.NestedString(cur.Object, "spec", "operatingMode")
	require.Equal(t, "Running", mode, "resume sets operatingMode Running")

	ls, err := k.List(ctx)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, Listed{Ref: ref, ComputerID: "sandboxed_1"}, ls[0])
	require.NoError(t, k.Destroy(ctx, ref))
	_, err = dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Get(ctx, ref, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "destroy deletes the Sandbox: %v", err)
	_, err = cs.CoreV1().Secrets(ns).Get(ctx, ref, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "destroy deletes the Secret: %v", err)
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorIs(t, err, ErrGone)
}

// TestKubernetesFaults: a pod deleted behind the worker's back comes back
// at the next reconnect on the same claim (the home's files are there); a
// home claim that cannot bind (a storage class no one provisions) fails
// the start with the scheduler's reason, once, and nothing is retried or
// destroyed behind the caller's back.
func TestKubernetesFaults(t *testing.T) {
	k, cs := testKubernetes(t)
	ctx := testCtx(t, 10*time.Minute)
	spec := Spec{ComputerID: "faults", BotdToken: testToken()}
	ref, err := k.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.Destroy(context.Background(), ref) })
	m, err := k.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	require.NoError(t, m.WriteFile(ctx, "kept.txt", []byte("still here\n")))
	h, err := m.Health(ctx)
	require.NoError(t, err)
	first := h.BootedAt

	zero := int64(0)
	require.NoError(t, cs.CoreV1().Pods(k.o.Namespace).Delete(ctx, ref, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	// At once unhealthy, though its botd may still answer for a moment
	// through a connection made before.
	_, err = m.Health(ctx)
	require.ErrorContains(t, err, "pod "+ref, "a machine whose pod was deleted is not healthy")
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().Pods(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 100*time.Millisecond)
	m, err = k.Reconnect(ctx, ref, spec)
	require.NoError(t, err, "a lost pod is made again")
	h, err = m.Health(ctx)
	require.NoError(t, err)
	require.False(t, h.BootedAt.Equal(first), "a new botd")
	got, err := m.ReadFile(ctx, "kept.txt", 100)
	require.NoError(t, err)
	require.Equal(t, "still here\n", string(got), "on the same home")

	// A claim that cannot bind.
	k2, err := NewKubernetes(func() KubernetesOptions {
		o := k.o
		o.StorageClass = "no-such-class"
		o.ReadyTimeout = 8 * time.Second
		return o
	}())
	require.NoError(t, err)
	t.Cleanup(k2.Close)
	spec2 := Spec{ComputerID: "unbound", BotdToken: testToken()}
	ref2, err := k2.Provision(ctx, spec2)
	require.NoError(t, err)
	t.Cleanup(func() { _ = k2.Destroy(context.Background(), ref2) })
	start := time.Now()
	_, err = k2.Reconnect(ctx, ref2, spec2)
	require.Error(t, err)
	require.Less(t, time.Since(start), time.Minute, "one bounded wait, not a retry storm")
	require.Contains(t, err.Error(), "unbound immediate PersistentVolumeClaims", "the scheduler's reason reaches the caller")
	_, err = cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Get(ctx, homeClaim(ref2), metav1.GetOptions{})
	require.NoError(t, err, "nothing is destroyed behind the caller's back")
}

// TestKubernetesKubeletRestart: the node's kubelet restarted under a
// running computer (scripts/kube.sh restart kubelet: stopped with its
// grace, started, the node Ready again). Its pod and botd live on
// (containerd keeps the containers), a call while the kubelet is down
// fails with an error instead of hanging, calls work again after, and
// nothing was made again or destroyed. It holds the cluster alone: every
// port-forward of other tests would break meanwhile.
func TestKubernetesKubeletRestart(t *testing.T) {
	k, cs, _ := testKubernetesHeld(t, kubetest.Exclusive, func(*KubernetesOptions) {})
	script := kubetest.Script(t)
	ctx := testCtx(t, 10*time.Minute)
	spec := Spec{ComputerID: "kubelet", BotdToken: testToken()}
	ref, err := k.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.Destroy(context.Background(), ref) })
	m, err := k.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	require.NoError(t, m.WriteFile(ctx, "kept.txt", []byte("through a kubelet restart\n")))
	h, err := m.Health(ctx)
	require.NoError(t, err)
	booted := h.BootedAt
	pod, err := cs.CoreV1().Pods(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
	require.NoError(t, err)

	// Stopped: a call fails, bounded (the port-forward's dial).
	out, err := exec.Command("bash", script, "stop-component", "kubelet").CombinedOutput()
	require.NoError(t, err, "kube.sh stop-component kubelet: %s", out)
	restarted := false
	defer func() {
		if !restarted {
			_ = exec.Command("bash", script, "start-component", "kubelet").Run()
		}
	}()
	// What a tool call does first: the machine's health, through the
	// port-forward the kubelet serves.
	start := time.Now()
	_, err = m.Health(ctx)
	require.Error(t, err, "botd answered with the node's kubelet down")
	t.Logf("with the kubelet down, after %s: %v", time.Since(start).Round(time.Millisecond), err)
	require.Less(t, time.Since(start), time.Minute, "bounded by the port-forward's dial")
	out, err = exec.Command("bash", script, "start-component", "kubelet").CombinedOutput()
	require.NoError(t, err, "kube.sh start-component kubelet: %s", out)
	restarted = true

	// Back: the machine the worker holds answers again by itself (each
	// connection is a new port-forward); the same pod, botd and home.
	start = time.Now()
	require.Eventually(t, func() bool {
		h, err = m.Health(ctx)
		return err == nil
	}, 3*time.Minute, time.Second, "botd after the kubelet's restart: %v", err)
	t.Logf("botd answered %s after the kubelet was started", time.Since(start).Round(time.Millisecond))
	m2, err := k.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	require.True(t, h.BootedAt.Equal(booted), "the same botd (booted %s, now %s)", booted, h.BootedAt)
	got, err := m2.ReadFile(ctx, "kept.txt", 100)
	require.NoError(t, err)
	require.Equal(t, "through a kubelet restart\n", string(got))
	now, err := cs.CoreV1().Pods(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, pod.UID, now.UID, "the same pod")
}

// TestKubernetesRedTeamPodIsolation (red team, on the real cluster):
// another team's pod is unreachable from a bot's shell. Each computer
// gets a NetworkPolicy that admits only the worker's pods to port 7000
// (stored as sent, for a network plugin that enforces it); the test
// cluster's bridge drops pod-to-pod traffic in its stead (scripts/kube.sh).
// Control: the other pod's botd answers at that address from the node, so
// the refusal is the isolation, not a wrong address.
func TestKubernetesRedTeamPodIsolation(t *testing.T) {
	k, cs := testKubernetes(t)
	ctx := testCtx(t, 10*time.Minute)
	up := func(id string) (string, Machine) {
		spec := Spec{ComputerID: id, BotdToken: testToken()}
		ref, err := k.Provision(ctx, spec)
		require.NoError(t, err)
		t.Cleanup(func() { _ = k.Destroy(context.Background(), ref) })
		m, err := k.Reconnect(ctx, ref, spec)
		require.NoError(t, err)
		return ref, m
	}
	_, a := up("team-a")
	refB, _ := up("team-b")

	np, err := cs.NetworkingV1().NetworkPolicies(k.o.Namespace).Get(ctx, refB, metav1.GetOptions{})
	require.NoError(t, err, "each computer has its NetworkPolicy")
	require.Equal(t, map[string]string{kubeLabelMachine: refB}, np.Spec.PodSelector.MatchLabels)
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
	require.Len(t, np.Spec.Ingress, 1)
	require.Len(t, np.Spec.Ingress[0].From, 1)
	require.Equal(t, k.o.WorkerSelector, np.Spec.Ingress[0].From[0].PodSelector.MatchLabels, "only the worker's pods")
	require.Equal(t, int32(containerAPIPort), np.Spec.Ingress[0].Ports[0].Port.IntVal)

	pb, err := cs.CoreV1().Pods(k.o.Namespace).Get(ctx, refB, metav1.GetOptions{})
	require.NoError(t, err)
	ipB := pb.Status.PodIP
	require.NotEmpty(t, ipB)
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ipB, "7000"), 5*time.Second)
	require.NoError(t, err, "control: team b's botd listens at %s:7000 (reached from the node)", ipB)
	c.Close()

	r, err := a.Exec(ctx, client.ExecRequest{Argv: []string{"bash", "-c",
		"if timeout 5 bash -c 'exec 3<>/dev/tcp/" + ipB + "/7000' 2>/dev/null; then echo REACHED; else echo UNREACHABLE; fi"}})
	require.NoError(t, err)
	require.Equal(t, "UNREACHABLE\n", r.Stdout, "team a's shell reached team b's botd at %s:7000: %s", ipB, r.Stderr)
}

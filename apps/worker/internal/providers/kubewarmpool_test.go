package providers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/open-bot/computer/apps/worker/internal/providers/agentsandbox"
	"github.com/open-bot/computer/apps/worker/internal/testbotd"
	"github.com/open-bot/computer/pkg/shared/client"
)

// TestKubernetesAgentSandboxWarmPool: with KUBERNETES_SANDBOX_WARM_POOL
// and agent-sandbox's CRDs in a real API server (no controller: none can
// be built here, and no stand-in runs), as its ServiceAccount with
// deploy/'s Role: the pool's Secret, SandboxTemplate (the pool's Secret
// mounted root-only, no token in it) and SandboxWarmPool are stored as
// sent; a computer is a SandboxClaim with nothing but its pool (no env, no
// volumes: a warm start); Reconnect says no controller bound the claim;
// the claim's status a controller writes is followed to its Sandbox (gone:
// ErrGone; ready with a selector no pod matches: that error); Stop
// suspends the bound Sandbox; a second worker's provider resizes the pool;
// Destroy deletes the claim, the bound Sandbox and the Secret, and keeps
// the pool.
func TestKubernetesAgentSandboxWarmPool(t *testing.T) {
	k, cs, admin := testKubernetesWith(t, func(o *KubernetesOptions) {
		o.SandboxAPI = KubeSandboxAPIAgentSandbox
		o.SandboxWarmPool = 2
		o.ReadyTimeout = 3 * time.Second
	})
	ctx := testCtx(t, 5*time.Minute)
	installAgentSandboxCRDs(t, ctx, admin)
	dyn, err := dynamic.NewForConfig(admin)
	require.NoError(t, err)
	ns := k.o.Namespace
	pool := DefaultSandboxTemplate + "-pool"
	spec := Spec{ComputerID: "pooled_1", BotdToken: testToken()}
	ref, err := k.Provision(ctx, spec)
	require.NoError(t, err)

	// The pool's Secret: its own token, never the computer's.
	ps, err := cs.CoreV1().Secrets(ns).Get(ctx, pool, metav1.GetOptions{})
	require.NoError(t, err, "the pool's secret")
	poolToken := string(ps.Data["botd_token"])
	require.Len(t, poolToken, 64)
	require.NotEqual(t, spec.BotdToken, poolToken)
	require.True(t, ps.Immutable != nil && *ps.Immutable)

	// The pool's template: the pool's Secret mounted root-only, the home
	// as a volumeClaimTemplate, no token anywhere in it.
	tpl, err := dyn.Resource(agentsandbox.SandboxTemplates).Namespace(ns).Get(ctx, pool, metav1.GetOptions{})
	require.NoError(t, err, "the pool's SandboxTemplate")
	raw, err := json.Marshal(tpl.Object)
	require.NoError(t, err)
	require.NotContains(t, string(raw), poolToken)
	require.NotContains(t, string(raw), spec.BotdToken)
	ptRaw, ok, _ := unstructured.NestedMap(tpl.Object, "spec", "podTemplate")
	require.True(t, ok)
	var pt corev1.PodTemplateSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(ptRaw, &pt))
	var secretVol *corev1.SecretVolumeSource
	for _, v := range pt.Spec.Volumes {
		if v.Secret != nil {
			secretVol = v.Secret
		}
	}
	require.NotNil(t, secretVol, "the pool's pods mount its secret")
	require.Equal(t, pool, secretVol.SecretName)
	require.Equal(t, int32(0o400), *secretVol.DefaultMode, "root-only")
	c := pt.Spec.Containers[0]
	require.Equal(t, k.o.Image, c.Image)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	require.Equal(t, containerTokenPath, env["BOTD_TOKEN_FILE"])
	require.NotContains(t, env, "BOTD_TOKEN")
	vct, _, _ := unstructured.NestedSlice(tpl.Object, "spec", "volumeClaimTemplates")
	require.Len(t, vct, 1, "the home")

	// The warm pool.
	wp, err := dyn.Resource(agentsandbox.SandboxWarmPools).Namespace(ns).Get(ctx, pool, metav1.GetOptions{})
	require.NoError(t, err, "the SandboxWarmPool")
	n, _, _ := unstructured.NestedInt64(wp.Object, "spec", "replicas")
	require.Equal(t, int64(2), n)
	tref, _, _ := unstructured.NestedString(wp.Object, "spec", "sandboxTemplateRef", "name")
	require.Equal(t, pool, tref)

	// The computer: a claim on the pool and nothing else.
	claim, err := dyn.Resource(agentsandbox.SandboxClaims).Namespace(ns).Get(ctx, ref, metav1.GetOptions{})
	require.NoError(t, err, "the SandboxClaim")
	require.Equal(t, map[string]any{"warmPoolRef": map[string]any{"name": pool}}, claim.Object["spec"], "a claim adds nothing to the pod (a warm start)")
	require.Equal(t, "pooled_1", claim.GetAnnotations()[kubeAnnotComputer])
	_, err = dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Get(ctx, ref, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "no Sandbox of its own: %v", err)

	// No controller: Reconnect says so.
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorContains(t, err, "has not bound sandbox claim "+ref)

	// The controller binds a Sandbox: its name in the claim's status.
	bound := pool + "-x7k2p"
	cur, err := dyn.Resource(agentsandbox.SandboxClaims).Namespace(ns).Get(ctx, ref, metav1.GetOptions{})
	require.NoError(t, err)
	cur.Object["status"] = map[string]any{"sandbox": map[string]any{"name": bound}}
	_, err = dyn.Resource(agentsandbox.SandboxClaims).Namespace(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)
	// Named but not there: the machine is gone.
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorIs(t, err, ErrGone)
	// The pool's Sandbox as its controller made it (from the template),
	// ready, with a selector no pod matches (no controller made one).
	sb := map[string]any{"apiVersion": agentsandbox.APIVersionAgents, "kind": "Sandbox",
		"metadata": map[string]any{"name": bound, "namespace": ns},
		"spec":     map[string]any{"podTemplate": ptRaw, "volumeClaimTemplates": vct, "operatingMode": "Running"}}
	require.NoError(t, agentsandbox.Validate(sb))
	created, err := dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: sb}, metav1.CreateOptions{})
	require.NoError(t, err)
	now := metav1.Now().UTC().Format(time.RFC3339)
	writeStatus := sandboxStatusWriter(t, ctx, dyn, ns, bound)
	selector := "agents.x-k8s.io/sandbox-name-hash=" + string(created.GetUID())[:8]
	writeStatus(map[string]any{
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "DependenciesReady", "message": "", "lastTransitionTime": now}},
		"selector":   selector,
	})
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorContains(t, err, "sandbox "+bound+" is ready but no running pod matches \""+selector+"\"")

	// Stop suspends the bound Sandbox.
	requireStopSuspends(t, ctx, k, dyn, ns, ref, bound)

	// Another worker's provider with another size resizes the pool.
	k2, err := NewKubernetes(func() KubernetesOptions { o := k.o; o.SandboxWarmPool = 3; return o }())
	require.NoError(t, err)
	t.Cleanup(k2.Close)
	ref2, err := k2.Provision(ctx, Spec{ComputerID: "pooled_2", BotdToken: testToken()})
	require.NoError(t, err)
	wp, err = dyn.Resource(agentsandbox.SandboxWarmPools).Namespace(ns).Get(ctx, pool, metav1.GetOptions{})
	require.NoError(t, err)
	n, _, _ = unstructured.NestedInt64(wp.Object, "spec", "replicas")
	require.Equal(t, int64(3), n, "resized")
	ps2, err := cs.CoreV1().Secrets(ns).Get(ctx, pool, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, ps.UID, ps2.UID, "one pool secret")

	ls, err := k.List(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []Listed{{Ref: ref, ComputerID: "pooled_1"}, {Ref: ref2, ComputerID: "pooled_2"}}, ls, "the pool is no computer")

	require.NoError(t, k.Destroy(ctx, ref))
	_, err = dyn.Resource(agentsandbox.SandboxClaims).Namespace(ns).Get(ctx, ref, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "destroy deletes the claim: %v", err)
	_, err = dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Get(ctx, bound, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "destroy deletes the bound Sandbox: %v", err)
	_, err = cs.CoreV1().Secrets(ns).Get(ctx, ref, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "destroy deletes the Secret: %v", err)
	_, err = k.Reconnect(ctx, ref, spec)
	require.ErrorIs(t, err, ErrGone)
	_, err = dyn.Resource(agentsandbox.SandboxWarmPools).Namespace(ns).Get(ctx, pool, metav1.GetOptions{})
	require.NoError(t, err, "the pool outlives its computers")
	require.NoError(t, k2.Destroy(ctx, ref2))

	// Plain mode has no sandbox warm pool.
	_, err = NewKubernetes(func() KubernetesOptions { o := k.o; o.SandboxAPI = ""; return o }())
	require.ErrorContains(t, err, "needs KUBERNETES_SANDBOX_API=agent-sandbox")
}

// TestAdoptTokenRealBotd: a real botd started on a pool's token (as every
// pod of a SandboxWarmPool is) takes the computer's token the first time
// the provider reaches it; afterwards the pool's token is refused and the
// computer's opens it with nothing rotated; a botd that restarted (back on
// the pool's token) is adopted again; a botd that knows neither token is
// refused at once, as is a pool token that does not open it.
func TestAdoptTokenRealBotd(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	b := testbotd.Start(t, testbotd.Options{DisplayBase: 850, PortBase: 25600})
	poolToken := b.Token
	mine := testToken()
	c := client.New(b.URL, mine, nil)

	_, err := c.Health(ctx)
	require.Equal(t, http.StatusUnauthorized, botdStatus(err), "before the claim botd knows only the pool's token: %v", err)
	adopted, err := adoptToken(ctx, c, poolToken, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	require.True(t, adopted, "botd took the computer's token")
	h, err := c.Health(ctx)
	require.NoError(t, err)
	require.True(t, h.OK)
	_, err = client.New(b.URL, poolToken, nil).Health(ctx)
	require.Equal(t, http.StatusUnauthorized, botdStatus(err), "the pool's token no longer opens it: %v", err)

	// Reached again: nothing to adopt.
	adopted, err = adoptToken(ctx, c, poolToken, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	require.False(t, adopted)

	// A restarted botd is back on the pool's token: adopted again.
	b.Stop()
	b2 := testbotd.Start(t, testbotd.Options{DisplayBase: 854, PortBase: 25700})
	c2 := client.New(b2.URL, mine, nil)
	adopted, err = adoptToken(ctx, c2, poolToken, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	require.True(t, adopted)
	_, err = c2.Health(ctx)
	require.NoError(t, err)

	// Neither token: refused at once (retried to the deadline, the error
	// would say botd did not take the token).
	_, err = adoptToken(ctx, client.New(b2.URL, testToken(), nil), testToken(), time.Now().Add(time.Minute))
	require.ErrorContains(t, err, "refuses both")
	_, err = adoptToken(ctx, client.New(b2.URL, testToken(), nil), "", time.Now().Add(time.Minute))
	require.ErrorContains(t, err, "refuses the computer's token")
	require.False(t, strings.Contains(err.Error(), mine) || strings.Contains(err.Error(), poolToken), "no token in the error")
}

// sandboxStatusWriter writes a Sandbox's status through the status
// subresource, as agent-sandbox's controller would.
func sandboxStatusWriter(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns, name string) func(map[string]any) {
	return func(status map[string]any) {
		t.Helper()
		cur, err := dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		cur.Object["status"] = status
		_, err = dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
}

// requireStopSuspends: Stop of ref sets Sandbox name Suspended and returns
// once the status (written here, as the controller would) says so.
func requireStopSuspends(t *testing.T, ctx context.Context, k *Kubernetes, dyn dynamic.Interface, ns, ref, name string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- k.Stop(ctx, ref) }()
	require.Eventually(t, func() bool {
		cur, err := dyn.Resource(agentsandbox.Sandboxes).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		m, _, _ := unstructured.NestedString(cur.Object, "spec", "operatingMode")
		return err == nil && m == "Suspended"
	}, 10*time.Second, 50*time.Millisecond, "Stop sets operatingMode Suspended")
	now := metav1.Now().UTC().Format(time.RFC3339)
	sandboxStatusWriter(t, ctx, dyn, ns, name)(map[string]any{"conditions": []any{
		map[string]any{"type": "Ready", "status": "False", "reason": "Suspended", "message": "", "lastTransitionTime": now},
		map[string]any{"type": "Suspended", "status": "True", "reason": "Suspended", "message": "", "lastTransitionTime": now},
	}})
	require.NoError(t, <-done)
}

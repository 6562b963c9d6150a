package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
)

// TestKubernetesAPIServerUnreachable: the worker's route to the API server
// is lost for 30 s (a loopback relay held: open connections dropped, new
// ones never answered) (the cluster itself runs on: other tests share it).
// Meanwhile a tool call and a recover fail with an error that says so,
// within bounds, and nothing is destroyed or made again; after, the same
// computer works through the same pod without anyone's help.
func TestKubernetesAPIServerUnreachable(t *testing.T) {
	kc, cs, ns := kubeTest(t)
	// The worker's kubeconfig: the admin's, its server behind the proxy
	// (the same address family, so the serving certificate still fits).
	cfg, err := clientcmd.LoadFromFile(kc)
	require.NoError(t, err)
	var proxy *storetest.CutProxy
	for _, cl := range cfg.Clusters {
		proxy = storetest.StartCutProxy(t, "127.0.0.1:0", strings.TrimPrefix(cl.Server, "https://"))
		cl.Server = "https://" + proxy.Addr()
	}
	require.NotNil(t, proxy)
	dir := openDir(t, "wire-kube-cut-")
	wkc := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, wkc))
	env := kubeWorkerEnv(wkc, ns)
	const bot = "alice"
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	ctx := t.Context()
	code, text := toolCall(t, e, bot, "file_write", map[string]any{"path": "bots/alice/kept.txt", "content": "through an outage\n"})
	require.Equal(t, http.StatusOK, code, text)
	before, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, before.ProviderRef, metav1.GetOptions{})
	require.NoError(t, err)

	proxy.Hold()
	cutAt := time.Now()
	start := time.Now()
	code, text = toolCall(t, e, bot, "file_read", map[string]any{"path": "bots/alice/kept.txt"})
	took := time.Since(start)
	t.Logf("a tool call with the API server unreachable: %d after %s: %s", code, took.Round(time.Millisecond), text)
	require.NotEqual(t, http.StatusOK, code, "a tool call answered without the API server: %s", text)
	require.Less(t, took, 30*time.Second, "the call failed within its bound")
	require.NotContains(t, text, "through an outage")
	start = time.Now()
	var rec struct {
		Computer struct{ State, LastError string } `json:"computer"`
	}
	code = e.do(t, "POST", "/recover", nil, &rec)
	t.Logf("recover with the API server unreachable: %d after %s: state %s: %s", code, time.Since(start).Round(time.Millisecond), rec.Computer.State, rec.Computer.LastError)
	mid, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.Equal(t, before.ProviderRef, mid.ProviderRef, "nothing replaced while the API server was unreachable")
	if rec.Computer.LastError != "" {
		require.Contains(t, strings.ToLower(rec.Computer.LastError), "kubernetes", "the error says where it failed: %s", rec.Computer.LastError)
	}

	// 30 s after the cut, the route is back.
	time.Sleep(time.Until(cutAt.Add(30 * time.Second)))
	proxy.Mend()
	mended := time.Now()
	waitFor(t, "the computer to work again", 3*time.Minute, func() bool {
		code, text = toolCall(t, e, bot, "file_read", map[string]any{"path": "bots/alice/kept.txt"})
		return code == http.StatusOK
	})
	t.Logf("working again %s after the route came back", time.Since(mended).Round(time.Millisecond))
	require.Contains(t, text, "through an outage")
	after, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.Equal(t, before.ProviderRef, after.ProviderRef, "the same computer")
	now, err := cs.CoreV1().Pods(ns).Get(ctx, after.ProviderRef, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, pod.UID, now.UID, "the same pod: nothing was made again")
	require.Nil(t, now.DeletionTimestamp)
	_, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, after.ProviderRef+"-home", metav1.GetOptions{})
	require.NoError(t, err, "the home claim is kept")
}

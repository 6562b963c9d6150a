package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// cutProxy is the network between the worker and the API server: a TCP
// relay on loopback that a test can cut (every open connection dropped,
// new ones accepted and left unanswered, as a lost route does) and mend.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	go p.serve()
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = true
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue // held open, never answered: closed when mended
		}
		go func() {
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				p.drop(c)
				return
			}
			p.mu.Lock()
			p.conns[up] = true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); p.drop(up) }()
			_, _ = io.Copy(c, up)
			p.drop(c)
		}()
	}
}

func (p *cutProxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// setCut cuts (true) or mends (false) the network; either way every
// connection open now is dropped.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.mu.Unlock()
	p.closeAll()
}

// TestKubernetesAPIServerUnreachable: the worker's route to the API server
// is lost for 30 s (the cluster itself runs on: other tests share it).
// Meanwhile a tool call and a recover fail with an error that says so,
// within bounds, and nothing is destroyed or made again; after, the same
// computer works through the same pod without anyone's help.
func TestKubernetesAPIServerUnreachable(t *testing.T) {
	kc := os.Getenv("KUBE_TEST_KUBECONFIG")
	if kc == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but KUBE_TEST_KUBECONFIG is not set (make test starts scripts/kube.sh)")
		}
		t.Skip("KUBE_TEST_KUBECONFIG is not set (scripts/kube.sh start)")
	}
	cs := kubeClient(t, kc)
	ns := kubeNamespace(t, cs)
	image := envMap(nil)("WORKER_IMAGE")
	if image == "" {
		image = providers.DefaultImage
	}
	// The worker's kubeconfig: the admin's, its server behind the proxy
	// (the same address family, so the serving certificate still fits).
	cfg, err := clientcmd.LoadFromFile(kc)
	require.NoError(t, err)
	var proxy *cutProxy
	for _, cl := range cfg.Clusters {
		host := strings.TrimPrefix(cl.Server, "https://")
		proxy = newCutProxy(t, host)
		cl.Server = "https://" + proxy.ln.Addr().String()
	}
	require.NotNil(t, proxy)
	dir := openDir(t, "wire-kube-cut-")
	wkc := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, wkc))
	env := map[string]string{"WORKER_PROVIDER": providers.KindKubernetes, "WORKER_IMAGE": image,
		"KUBECONFIG": wkc, "KUBERNETES_NAMESPACE": ns, "KUBERNETES_IMAGE_PULL_POLICY": "Never", "KUBERNETES_HOME_SIZE": "1Gi",
		"KUBERNETES_CPU_REQUEST": "100m", "KUBERNETES_MEMORY_REQUEST": "256Mi"}
	const bot = "alice"
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	ctx := t.Context()
	code, text := toolCall(t, e, bot, "file_write", map[string]any{"path": "bots/alice/kept.txt", "content": "through an outage\n"})
	require.Equal(t, http.StatusOK, code, text)
	before, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, before.ProviderRef, metav1.GetOptions{})
	require.NoError(t, err)

	proxy.setCut(true)
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
	proxy.setCut(false)
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

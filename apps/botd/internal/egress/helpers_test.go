package egress

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/api"
	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/worker/egressagent"
	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

const testToken = "test-token-0123456789abcdef"

// syncBuf is a log sink tests can read while the proxy writes.
type syncBuf struct {
	// mu guards b.
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newProxy starts a proxy on a free loopback port; Close runs at cleanup.
func newProxy(t testing.TB, o Options) *Proxy {
	t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Allow == nil {
		// The tests' targets are local servers: allowed explicitly, the way
		// an operator would (policy_test.go covers the default).
		o.Allow = egresspolicy.MustParse("127.0.0.0/8,::1/128")
	}
	if o.Resolve == nil {
		o.Resolve = testNames
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// botdServer serves the real API middleware (bearer auth) with /egress.
func botdServer(t testing.TB, p *Proxy, hub *health.Hub, model *health.Model) *httptest.Server {
	t.Helper()
	if hub == nil {
		hub = health.NewHub()
	}
	if model == nil {
		model = health.NewModel(hub, time.Now())
	}
	srv := api.New(api.Options{Token: testToken, Hub: hub, Health: model})
	p.Register(srv.Mux())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// agentHandle runs an in-process egress agent and can cut its connection
// to botd the way a killed process would (the kernel closes the socket).
type agentHandle struct {
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards conns.
	mu    sync.Mutex
	conns []net.Conn
}

// sever closes every socket the agent has to botd, without a goodbye.
func (a *agentHandle) sever() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	a.conns = nil
}

func (a *agentHandle) stop() {
	a.cancel()
	<-a.done
}

// onlyAgentDial is the agent's own resolver in tests: the name
// only-agent.test exists on the agent's side only.
func onlyAgentDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	switch host {
	case "only-agent.test", "localhost":
		host = "127.0.0.1"
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(host, port))
}

// testNames resolves the tests' made-up names to loopback (no DNS packet
// leaves the machine); anything else does not exist. agentNames is the
// agent's side, where only-agent.test exists too.
var (
	testNames = stubNames{
		"no-such-name.invalid": {netip.MustParseAddr("127.0.0.1")},
		"localhost":            {netip.MustParseAddr("127.0.0.1")},
	}
	agentNames = stubNames{
		"only-agent.test": {netip.MustParseAddr("127.0.0.1")},
		"localhost":       {netip.MustParseAddr("127.0.0.1")},
	}
)

// startAgent runs the real agent package against botd at url.
func startAgent(t testing.TB, url, token string, tweak func(*egressagent.Options)) *agentHandle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &agentHandle{cancel: cancel, done: make(chan struct{})}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
		}
		return c, err
	}}
	o := egressagent.Options{
		BotdURL:       url,
		Token:         token,
		HTTPClient:    &http.Client{Transport: tr},
		Dial:          onlyAgentDial,
		Resolve:       agentNames,
		AllowLoopback: true,
		MinBackoff:    20 * time.Millisecond,
		MaxBackoff:    200 * time.Millisecond,
		DialTimeout:   5 * time.Second,
	}
	if tweak != nil {
		tweak(&o)
	}
	go func() {
		defer close(a.done)
		_ = egressagent.Run(ctx, o)
		tr.CloseIdleConnections()
	}()
	t.Cleanup(a.stop)
	return a
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tunnelSetup is a tunnel-mode proxy, its botd API and a connected agent.
type tunnelSetup struct {
	p     *Proxy
	ts    *httptest.Server
	agent *agentHandle
	hub   *health.Hub
	model *health.Model
	logs  *syncBuf
}

func newTunnelSetup(t testing.TB, o Options, tweak func(*egressagent.Options)) *tunnelSetup {
	t.Helper()
	s := &tunnelSetup{logs: &syncBuf{}, hub: health.NewHub()}
	s.model = health.NewModel(s.hub, time.Now())
	o.Mode = ModeTunnel
	o.Log = zerolog.New(s.logs)
	o.Hub, o.Model = s.hub, s.model
	if o.Dial == nil {
		o.Dial = func(context.Context, string, string) (net.Conn, error) {
			t.Error("tunnel mode dialled directly")
			return nil, errors.New("direct dial in tunnel mode")
		}
	}
	s.p = newProxy(t, o)
	s.model.SetSources(health.Sources{Egress: s.p.Health})
	s.ts = botdServer(t, s.p, s.hub, s.model)
	s.agent = startAgent(t, s.ts.URL, testToken, tweak)
	waitFor(t, 5*time.Second, "agent online", func() bool { return s.p.Health().AgentOnline })
	return s
}

// socksConnect dials the proxy and asks for host:port, returning the conn
// after a success reply or the reply code as an error.
func socksConnect(proxy, host string, port int) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	var rep [12]byte // method reply (2) + connect reply with an IPv4 address (10)
	if _, err := io.ReadFull(c, rep[:4]); err != nil {
		c.Close()
		return nil, fmt.Errorf("read reply: %w", err)
	}
	if rep[2] != 5 || rep[3] != 0 {
		c.Close()
		return nil, &socksError{code: rep[3]}
	}
	if _, err := io.ReadFull(c, rep[4:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("read reply: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

type socksError struct{ code byte }

func (e *socksError) Error() string { return fmt.Sprintf("socks reply %d", e.code) }

func splitPort(t testing.TB, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// echoServer echoes every connection until EOF, then half-closes.
func echoServer(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln
}

// leakCheck records goroutines and open fds now and, at the end of the
// test, waits for both to come back to that baseline.
func leakCheck(t *testing.T) {
	t.Helper()
	g0, f0 := runtime.NumGoroutine(), openFDs()
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			// GC drops sync.Pool'd splice pipes (io.Copy between TCP conns
			// keeps a few): pooled, not leaked.
			runtime.GC()
			g, f := runtime.NumGoroutine(), openFDs()
			if g <= g0 && f <= f0 {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("leak: goroutines %d → %d, fds %d → %d %v\n%s", g0, g, f0, f, fdList(), buf[:n])
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

func fdList() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"="+l)
	}
	return out
}

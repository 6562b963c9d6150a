package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/apps/worker/egressagent"
	"github.com/open-bot/computer/pkg/shared"
)

// helloServer answers every request with "hello from <host>".
func helloServer(t testing.TB) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// curlSocks fetches url through the proxy with curl --socks5-hostname, so
// curl resolves nothing itself.
func curlSocks(t *testing.T, proxy, url string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "curl", "-sS", "--max-time", "15", "--noproxy", "", "--socks5-hostname", proxy, url).CombinedOutput()
	return string(out), err
}

func TestDirectCurl(t *testing.T) {
	testenv.RequireTools(t, "curl")
	p := newProxy(t, Options{})
	ts := helloServer(t)
	_, port := splitPort(t, ts.URL)
	// "localhost" goes to the proxy unresolved and resolves here.
	url := fmt.Sprintf("http://localhost:%d/", port)
	out, err := curlSocks(t, p.Addr().String(), url)
	if err != nil || out != fmt.Sprintf("hello from localhost:%d", port) {
		t.Fatalf("curl: %v: %q", err, out)
	}
	if h := p.Health(); h != (shared.EgressHealth{Mode: ModeDirect}) {
		t.Fatalf("health %+v", h)
	}
}

// Direct mode resolves a name on the computer, checks the address against
// the policy, and dials exactly the address it checked (no second lookup
// between the check and the dial).
func TestDirectNamesResolvedAndCheckedBeforeTheDial(t *testing.T) {
	echo := echoServer(t)
	var got []string
	var mu sync.Mutex
	p := newProxy(t, Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		got = append(got, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, echo.Addr().String())
	}})
	c, err := socksConnect(p.Addr().String(), "no-such-name.invalid", 443)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "127.0.0.1:443" {
		t.Fatalf("dialer saw %q, want the checked address 127.0.0.1:443", got)
	}
}

func TestTunnelCurl(t *testing.T) {
	testenv.RequireTools(t, "curl")
	s := newTunnelSetup(t, Options{}, nil)
	ts := helloServer(t)
	_, port := splitPort(t, ts.URL)
	for _, host := range []string{"127.0.0.1", "only-agent.test"} {
		url := fmt.Sprintf("http://%s:%d/", host, port)
		out, err := curlSocks(t, s.p.Addr().String(), url)
		if err != nil || out != fmt.Sprintf("hello from %s:%d", host, port) {
			t.Fatalf("curl %s: %v: %q", url, err, out)
		}
	}
	if h := s.p.Health(); h != (shared.EgressHealth{Mode: ModeTunnel, AgentOnline: true, TunnelConnected: true}) {
		t.Fatalf("health %+v", h)
	}
	if got := s.model.Snapshot().Egress; got != s.p.Health() {
		t.Fatalf("model egress %+v", got)
	}
}

// The agent-only name must fail in direct mode: proof that tunnel mode's
// success came from the agent's resolver, not from the computer's.
func TestAgentOnlyNameFailsDirect(t *testing.T) {
	p := newProxy(t, Options{DialTimeout: 3 * time.Second})
	_, err := socksConnect(p.Addr().String(), "only-agent.test", 80)
	var se *socksError
	if !errors.As(err, &se) {
		t.Fatalf("want a SOCKS failure reply, got %v", err)
	}
}

func TestTunnelWithoutAgentRefuses(t *testing.T) {
	leakCheck(t)
	logs := &syncBuf{}
	p := newProxy(t, Options{Mode: ModeTunnel, Log: zerolog.New(logs), Dial: func(context.Context, string, string) (net.Conn, error) {
		t.Error("fell back to a direct dial")
		return nil, errors.New("no")
	}})
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())
	for i := 0; i < 3; i++ {
		_, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
		var se *socksError
		if !errors.As(err, &se) || se.code != 3 {
			t.Fatalf("want SOCKS reply 3 (network unreachable), got %v", err)
		}
	}
	if !strings.Contains(logs.String(), "no egress agent connected") {
		t.Fatalf("no log line about the refusal: %s", logs)
	}
	if h := p.Health(); h != (shared.EgressHealth{Mode: ModeTunnel}) {
		t.Fatalf("health %+v", h)
	}
}

func TestTunnelRouteNeedsTokenAndTunnelMode(t *testing.T) {
	direct := newProxy(t, Options{})
	ts := botdServer(t, direct, nil, nil)
	for _, tc := range []struct {
		name, token string
		status      int
		code        shared.Code
	}{
		{"no token", "", http.StatusUnauthorized, shared.CodeUnauthorized},
		{"wrong token", "wrong-token-0123456789", http.StatusUnauthorized, shared.CodeUnauthorized},
		{"direct mode", testToken, http.StatusConflict, shared.CodeConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", ts.URL+"/egress", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var env shared.ErrorEnvelope
			_ = json.NewDecoder(resp.Body).Decode(&env)
			if resp.StatusCode != tc.status || env.Error.Code != tc.code {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, env.Error.Code, tc.status, tc.code)
			}
		})
	}
}

func TestAgentWithWrongTokenStaysOut(t *testing.T) {
	p := newProxy(t, Options{Mode: ModeTunnel})
	ts := botdServer(t, p, nil, nil)
	logs := &syncBuf{}
	startAgent(t, ts.URL, "wrong-token-0123456789", func(o *egressagent.Options) { o.Log = zerolog.New(logs) })
	waitFor(t, 5*time.Second, "the agent to log the refusal", func() bool { return strings.Contains(logs.String(), "401") })
	if p.Health().TunnelConnected {
		t.Fatal("tunnel up with a wrong token")
	}
	if strings.Contains(logs.String(), "wrong-token") {
		t.Fatal("agent logged its token")
	}
}

func TestHealthEventsFollowTheAgent(t *testing.T) {
	hub := health.NewHub()
	events, cancel := hub.Subscribe()
	defer cancel()
	model := health.NewModel(hub, time.Now())
	p := newProxy(t, Options{Mode: ModeTunnel, Hub: hub, Model: model})
	model.SetSources(health.Sources{Egress: p.Health})
	ts := botdServer(t, p, hub, model)

	// seen is every event read so far, in order; at(i) reads up to event i.
	var seen []shared.Event
	at := func(i int) shared.Event {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for len(seen) <= i {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the hub dropped us; events so far %v", seen)
				}
				seen = append(seen, ev)
			case <-timeout:
				t.Fatalf("no event %d; events so far %v", i, seen)
			}
		}
		return seen[i]
	}
	// next returns the next egress event.
	ei := 0
	next := func() shared.EgressHealth {
		t.Helper()
		for ; ; ei++ {
			if ev := at(ei); ev.Type == shared.EventEgress {
				ei++
				return ev.Data.(shared.EgressHealth)
			}
		}
	}
	// healthShows waits for a health event from index from on whose egress
	// part is want: a change /health would show is also pushed as health.
	// (The model reads the proxy's state when told, so that event may come
	// just before the egress event of the same change.)
	healthShows := func(from int, want shared.EgressHealth) {
		t.Helper()
		for i := from; ; i++ {
			if ev := at(i); ev.Type == shared.EventHealth && ev.Data.(shared.ComputerHealth).Egress == want {
				return
			}
		}
	}
	a := startAgent(t, ts.URL, testToken, nil)
	on := shared.EgressHealth{Mode: ModeTunnel, TunnelConnected: true, AgentOnline: true}
	if h := next(); h != (shared.EgressHealth{Mode: ModeTunnel, TunnelConnected: true}) {
		t.Fatalf("first event %+v", h)
	}
	if h := next(); h != on {
		t.Fatalf("second event %+v", h)
	}
	healthShows(0, on)
	if got := model.Snapshot().Egress; got != on {
		t.Fatalf("model %+v", got)
	}
	stopped := ei
	a.stop()
	off := shared.EgressHealth{Mode: ModeTunnel}
	if h := next(); h != off {
		t.Fatalf("after the agent left %+v", h)
	}
	healthShows(stopped, off)
	if got := model.Snapshot().Egress; got.TunnelConnected || got.AgentOnline {
		t.Fatalf("model %+v", got)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/capability"
)

// protocolsDisplayBase keeps the benchmark's displays apart.
const protocolsDisplayBase = 330

// cdpConn is a bare DevTools client for the benchmark: one command at a
// time, events skipped.
type cdpConn struct {
	ws   *websocket.Conn
	next int64
}

func dialDevTools(ctx context.Context, url string, hdr http.Header) (*cdpConn, error) {
	// Its own transport: the API tests' checked DefaultClient reads whole
	// answers, which an upgrade never ends.
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	return &cdpConn{ws: ws}, nil
}

func (c *cdpConn) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	c.next++
	msg := map[string]any{"id": c.next, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	b, _ := json.Marshal(msg)
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, err
	}
	for {
		_, data, err := c.ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		var m struct {
			ID     int64           `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &m) != nil || m.ID != c.next {
			continue
		}
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		return m.Result, nil
	}
}

// firstNavigate connects, attaches to the first page and navigates it to
// url: connect → first Page.navigate answered, as a client meets it.
func firstNavigate(ctx context.Context, wsURL string, hdr http.Header, url string) (time.Duration, *cdpConn, string, error) {
	start := time.Now()
	c, err := dialDevTools(ctx, wsURL, hdr)
	if err != nil {
		return 0, nil, "", err
	}
	raw, err := c.call(ctx, "", "Target.getTargets", map[string]any{})
	if err != nil {
		return 0, c, "", err
	}
	var ts struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	_ = json.Unmarshal(raw, &ts)
	target := ""
	for _, t := range ts.TargetInfos {
		if t.Type == "page" {
			target = t.TargetID
			break
		}
	}
	if target == "" {
		return 0, c, "", fmt.Errorf("no page target")
	}
	raw, err = c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true})
	if err != nil {
		return 0, c, "", err
	}
	var at struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(raw, &at)
	if _, err := c.call(ctx, at.SessionID, "Page.navigate", map[string]any{"url": url}); err != nil {
		return 0, c, "", err
	}
	return time.Since(start), c, at.SessionID, nil
}

func p50(ds []time.Duration) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// bareChromium starts a Chromium of its own (headless, its own profile)
// with its DevTools websocket on loopback, and returns that URL.
func bareChromium(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	bin := "chromium"
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--remote-debugging-port=0", "--user-data-dir="+dir,
		"--no-first-run", "--no-default-browser-check", "about:blank")
	stderr, _ := cmd.StderrPipe()
	require.NoError(b, cmd.Start())
	b.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "DevTools listening on "); ok {
				found <- strings.TrimSpace(u)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(30 * time.Second):
		b.Fatal("the bare Chromium did not open its DevTools port")
	}
	return ""
}

// BenchmarkAgentProtocols (issue 34): CDP through the worker (worker →
// botd → the screen's Chromium over its pipe) against a bare Chromium's own
// DevTools websocket on the same machine: connect → first Page.navigate
// answered (p50 of 5) and a Runtime.evaluate round trip (p50 of 50), with
// the ratios; and OSWorld's guest screenshot and accessibility tree
// through the worker (p50 of 20 each).
func BenchmarkAgentProtocols(b *testing.B) {
	requireIntegration(b, "chromium", "python3")
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>bench</title><button>Go</button><a href="/x">x</a><input name=q>`)
	}))
	b.Cleanup(page.Close)
	model := httptest.NewServer(http.NotFoundHandler())
	b.Cleanup(model.Close)
	c := startComputer(b, model.URL, protocolsDisplayBase, "EGRESS_ALLOW=127.0.0.1/32")
	e := &workerEnv{token: "worker-token-0123456789", dataDir: b.TempDir()}
	e.serve(b, "scripted-model")
	var created struct {
		Computer struct {
			ID string `json:"id"`
		} `json:"computer"`
		Capability string `json:"capability"`
	}
	require.Equal(b, http.StatusCreated, post(b, e.url+"/v1/computers", e.op, map[string]any{
		"scope": map[string]any{"session": "bench"}, "provider": "attach", "evaluation": true,
		"attach": map[string]string{"url": c.url, "token": c.token}}, &created))
	o := *e
	o.computer, o.capa = created.Computer.ID, created.Capability
	require.Equal(b, http.StatusCreated, o.do(b, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	hdr := http.Header{"Authorization": {"Bearer " + e.token}, capability.Header: {o.capa}}
	base := e.url + "/v1/computers/" + o.computer + "/bots/alice"
	// The screen and its browser up first (not part of the figures).
	st, body := raw(b, "POST", base+"/osworld/setup/open_file", e.token, o.capa, map[string]string{"path": page.URL + "/"})
	require.Equal(b, http.StatusOK, st, body)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	measure := func(name, wsURL string, h http.Header) (float64, float64) {
		var navs, evals []time.Duration
		for range 5 {
			d, conn, _, err := firstNavigate(ctx, wsURL, h, page.URL+"/")
			require.NoError(b, err, name)
			navs = append(navs, d)
			_ = conn.ws.Close(websocket.StatusNormalClosure, "")
			time.Sleep(300 * time.Millisecond) // the relay's session ends
		}
		_, conn, sess, err := firstNavigate(ctx, wsURL, h, page.URL+"/")
		require.NoError(b, err, name)
		for range 50 {
			start := time.Now()
			_, err := conn.call(ctx, sess, "Runtime.evaluate", map[string]any{"expression": "1+1", "returnByValue": true})
			require.NoError(b, err, name)
			evals = append(evals, time.Since(start))
		}
		_ = conn.ws.Close(websocket.StatusNormalClosure, "")
		time.Sleep(300 * time.Millisecond)
		return p50(navs), p50(evals)
	}
	wNav, wEval := measure("worker", "ws"+strings.TrimPrefix(base, "http")+"/cdp", hdr)
	bNav, bEval := measure("bare", bareChromium(b), nil)

	guest := func(method, route string) float64 {
		var ds []time.Duration
		for range 20 {
			start := time.Now()
			req, _ := http.NewRequest(method, base+"/osworld"+route, nil)
			req.Header = hdr.Clone()
			resp, err := http.DefaultClient.Do(req)
			require.NoError(b, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Equal(b, http.StatusOK, resp.StatusCode, route)
			ds = append(ds, time.Since(start))
		}
		return p50(ds)
	}
	shot := guest("GET", "/screenshot")
	tree := guest("GET", "/accessibility")

	b.ReportMetric(wNav, "cdp_connect_navigate_worker_p50_ms")
	b.ReportMetric(bNav, "cdp_connect_navigate_bare_p50_ms")
	b.ReportMetric(wNav/bNav, "cdp_connect_navigate_x_bare")
	b.ReportMetric(wEval, "cdp_evaluate_worker_p50_ms")
	b.ReportMetric(bEval, "cdp_evaluate_bare_p50_ms")
	b.ReportMetric(wEval/bEval, "cdp_evaluate_x_bare")
	b.ReportMetric(shot, "osworld_screenshot_p50_ms")
	b.ReportMetric(tree, "osworld_accessibility_p50_ms")
}

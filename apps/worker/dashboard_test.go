package main

// The dashboard mounted in the real worker, in real headless Chromium,
// over a real botd with a real Codex run: a live thumbnail of the busy
// bot's screen (a screenshot that is not blank), "Stop the bot first" when
// taking the busy bot, control of the idle bot through the worker's own
// control page (noVNC connected through the relay), and release.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/takeover"
)

// cdp is a headless Chromium on the DevTools pipe (fds 3 and 4).
type cdp struct {
	w  io.WriteCloser
	r  *bufio.Reader
	id int
}

func startCDP(t *testing.T) *cdp {
	t.Helper()
	dir := t.TempDir()
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command("chromium", "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1280,900", "--no-first-run",
		"--disable-dev-shm-usage", "--hide-scrollbars", "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "HOME="+dir)
	require.NoError(t, cmd.Start())
	inR.Close()
	outW.Close()
	t.Cleanup(func() {
		inW.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return &cdp{w: inW, r: bufio.NewReader(outR)}
}

func (c *cdp) call(session, method string, params, out any) error {
	c.id++
	msg := map[string]any{"id": c.id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	b, _ := json.Marshal(msg)
	if _, err := c.w.Write(append(b, 0)); err != nil {
		return err
	}
	for {
		line, err := c.r.ReadBytes(0)
		if err != nil {
			return err
		}
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line[:len(line)-1], &resp); err != nil {
			return err
		}
		if resp.ID != c.id {
			continue
		}
		if resp.Error != nil {
			return fmt.Errorf("%s: %s", method, resp.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(resp.Result, out)
		}
		return nil
	}
}

func (c *cdp) open(t *testing.T, url string) string {
	t.Helper()
	var tg struct {
		TargetID string `json:"targetId"`
	}
	require.NoError(t, c.call("", "Target.createTarget", map[string]any{"url": url}, &tg))
	var at struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(t, c.call("", "Target.attachToTarget", map[string]any{"targetId": tg.TargetID, "flatten": true}, &at))
	return at.SessionID
}

func (c *cdp) eval(session, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := c.call(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("script: %s", r.ExceptionDetails.Text)
	}
	if len(r.Result.Value) == 0 {
		return fmt.Errorf("script returned nothing")
	}
	return json.Unmarshal(r.Result.Value, out)
}

// screenshot saves the page as PNG at path and returns the grey-level
// variance inside the element matched by selector.
func (c *cdp) screenshot(t *testing.T, session, selector, path string) float64 {
	t.Helper()
	var rect struct{ X, Y, W, H float64 }
	require.NoError(t, c.eval(session, `(() => { const r = document.querySelector(`+"`"+selector+"`"+`).getBoundingClientRect(); return {X: r.x, Y: r.y, W: r.width, H: r.height}; })()`, &rect))
	var shot struct {
		Data string `json:"data"`
	}
	require.NoError(t, c.call(session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot))
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	img, err := png.Decode(bytes.NewReader(raw))
	require.NoError(t, err)
	var n, sum, sq float64
	for y := int(rect.Y); y < int(rect.Y+rect.H); y += 2 {
		for x := int(rect.X); x < int(rect.X+rect.W); x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			g8 := float64(r+g+b) / 3 / 257
			n++
			sum += g8
			sq += g8 * g8
		}
	}
	if n == 0 {
		return 0
	}
	m := sum / n
	return sq/n - m*m
}

const dashThumbVariance = `(() => {
  const c = document.querySelector('.thumb[data-key="%s"] canvas');
  if (!c || !c.width || !c.height) return -1;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0, s = 0, q = 0;
  for (let i = 0; i < d.length; i += 4 * 97) { const g = (d[i] + d[i+1] + d[i+2]) / 3; n++; s += g; q += g * g; }
  const m = s / n; return q / n - m * m;
})()`

func TestDashboardThroughWorker(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	script := func(outs []mockmodel.Output) mockmodel.Step {
		steps := []mockmodel.Step{
			{Tool: "computer_observe", Args: map[string]any{}},
			waitShell("bots/alice/done"),
		}
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return mockmodel.Step{Message: "done"}
	}
	model := mockmodel.New(script).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	c := startComputer(t, modelSrv.URL, 484, "VIEW_PORT_BASE=23400")
	e := startWorker(t, c, "alice", "bob")
	e.w.People.Takeover.SetBase(e.url)

	id := e.startRun(t, "alice", "Look at the screen and wait.")
	sse := followSSE(t, e, id)
	sse.wait(t, "the waiting shell", 3*time.Minute, func(ev sseEvent) bool { return ev.Type == "tool_call" && ev.Data["tool"] == "shell" })

	// The dashboard is behind its own sign-in, not the API's token.
	resp, err := http.Get(e.url + "/dashboard/api/state")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	link, err := e.w.People.LoginLink(e.url)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(link, e.url+"/dashboard/login?code="), link)
	ch := startCDP(t)
	s := ch.open(t, link)
	var text string
	ok := false
	for deadline := time.Now().Add(90 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_ = ch.eval(s, `document.body.innerText`, &text)
		ok = strings.Contains(text, e.computer) && strings.Contains(text, "alice")
	}
	require.True(t, ok, "the dashboard with alice's run within 90 s; its page said: %.600q", text)
	var v float64
	waitFor(t, "alice's live thumbnail", 90*time.Second, func() bool {
		return ch.eval(s, fmt.Sprintf(dashThumbVariance, e.computer+"/alice"), &v) == nil && v > 10
	})
	shot := filepath.Join(os.TempDir(), "dashboard-worker.png")
	sv := ch.screenshot(t, s, `.thumb[data-key="`+e.computer+`/alice"]`, shot)
	t.Logf("screenshot %s: thumbnail variance %.0f", shot, sv)
	require.Greater(t, sv, 10.0, "the thumbnail in the screenshot shows the screen, not a blank box")

	// Take control of the busy bot: the policy's refusal, shown as is.
	require.NoError(t, ch.eval(s, `document.querySelector('.bot[data-bot="alice"] .take').click(), true`, new(bool)))
	waitFor(t, "the refusal", 20*time.Second, func() bool {
		_ = ch.eval(s, `document.querySelector('.message[data-key="`+e.computer+`/alice"]').innerText`, &text)
		return text == "Stop the bot first"
	})
	require.False(t, e.w.People.Takeover.InControl(e.computer, "alice"))

	// The idle bot: control granted, its link is the worker's control page,
	// which connects noVNC through the worker's relay.
	require.NoError(t, ch.eval(s, `document.querySelector('.bot[data-bot="bob"] .take').click(), true`, new(bool)))
	var href string
	waitFor(t, "control of bob", 60*time.Second, func() bool {
		_ = ch.eval(s, `(() => { const a = document.querySelector('.message[data-key="`+e.computer+`/bob"] a'); return a ? a.href : ''; })()`, &href)
		return href != ""
	})
	require.True(t, strings.HasPrefix(href, e.url+takeover.Prefix), href)
	require.NotContains(t, href, c.token)
	require.True(t, e.w.People.Takeover.InControl(e.computer, "bob"))
	cs := ch.open(t, href)
	var status string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_ = ch.eval(cs, `document.getElementById('status') ? document.getElementById('status').textContent : ''`, &status)
		if status == "connected" {
			break
		}
		if time.Now().After(deadline) {
			// What the page went through (rehearsal 39 timed out here, at
			// "connecting…": no event at all would mean its script never ran).
			var trace string
			_ = ch.eval(cs, `JSON.stringify({ready: document.readyState, control: window.control || null})`, &trace)
			t.Fatalf("the control page never connected: its status is %q; the page: %s", status, trace)
		}
	}
	require.NoError(t, ch.eval(s, `document.querySelector('.bot[data-bot="bob"] .release').click(), true`, new(bool)))
	waitFor(t, "release of bob", 20*time.Second, func() bool {
		_ = ch.eval(s, `document.querySelector('.message[data-key="`+e.computer+`/bob"]').innerText`, &text)
		return strings.HasPrefix(text, "Released")
	})
	waitFor(t, "the control page to see its end", 30*time.Second, func() bool {
		_ = ch.eval(cs, `document.getElementById('status').textContent`, &status)
		return strings.HasPrefix(status, "disconnected")
	})
	require.False(t, e.w.People.Takeover.InControl(e.computer, "bob"))

	writeBotFile(t, e, "alice", "bots/alice/done")
	final, _ := waitRun(t, e, id, 3*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status)
}

// TestDashboardLoginLinkRoute: `worker dashboard`'s route mints a one-time
// link only for the operator (never for WORKER_TOKEN); the link signs in
// once.
func TestDashboardLoginLinkRoute(t *testing.T) {
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir()}
	e.serve(t, "scripted-model")
	require.Equal(t, http.StatusUnauthorized, post(t, e.url+"/v1/dashboard/login-link", "wrong-token-0123456789", struct{}{}, nil))
	require.Equal(t, http.StatusForbidden, post(t, e.url+"/v1/dashboard/login-link", e.token, struct{}{}, nil))
	var got struct {
		URL string `json:"url"`
	}
	require.Equal(t, http.StatusOK, post(t, e.url+"/v1/dashboard/login-link", e.op, struct{}{}, &got))
	require.True(t, strings.HasPrefix(got.URL, e.url+"/dashboard/login?code="), got.URL)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(got.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Set-Cookie"), "HttpOnly")
	resp, err = noRedirect.Get(got.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the link works once")
	// The control relay refuses anything but a link the worker signed.
	resp, err = http.Get(e.url + takeover.Prefix + "bm90LWEtbGluaw.AAAA")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

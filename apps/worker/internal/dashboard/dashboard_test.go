package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/testbotd"
	"github.com/open-bot/computer/pkg/shared"
)

// realBackend implements the dashboard's interfaces over one real botd:
// bot "alice" has a live run (busy), bot "bob" has none.
type realBackend struct {
	botd machines.Machine
	mu   sync.Mutex
	// leases held by people, per bot.
	leases map[string]string
}

func (b *realBackend) Computers(ctx context.Context) ([]Computer, error) {
	return []Computer{{ID: "comp-1", Kind: "team", Provider: "local", State: "running",
		LastCheckpoint: &Checkpoint{Revision: 3, Size: 12_345_678, At: time.Now().Add(-time.Minute)},
		Capabilities:   &Capabilities{MultiScreen: false, Stop: true, Persistent: true}}}, nil
}

func (b *realBackend) Bots(ctx context.Context, id string) ([]Bot, error) {
	if id != "comp-1" {
		return nil, shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such computer")
	}
	screens, err := b.botd.Screens(ctx)
	if err != nil {
		return nil, err
	}
	state := map[string]string{}
	for _, s := range screens {
		state[s.ID] = s.State
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Bot
	for _, id := range []string{"alice", "bob"} {
		out = append(out, Bot{ID: id, Screen: id, ScreenState: state[id], InControl: b.leases[id] != ""})
	}
	return out, nil
}

func (b *realBackend) Runs(ctx context.Context, id string) ([]Run, error) {
	return []Run{{ID: "run-1", BotID: "alice", State: "running", Events: []Event{
		{At: time.Now().Add(-30 * time.Second), Kind: "tool", Text: "computer_observe"},
		{At: time.Now().Add(-10 * time.Second), Kind: "tool", Text: "computer_act click"},
	}}}, nil
}

func (b *realBackend) TakeControl(ctx context.Context, cid, bot string) (ControlLink, error) {
	if bot == "alice" {
		return ControlLink{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "Stop the bot first")
	}
	l, err := b.botd.AcquireLease(ctx, bot, "user", "dashboard-user", 5*time.Minute)
	if err != nil {
		return ControlLink{}, err
	}
	b.mu.Lock()
	b.leases[bot] = l.LeaseID
	b.mu.Unlock()
	return ControlLink{URL: "/v1/computers/comp-1/bots/" + bot + "/control/opaque", ExpiresAt: l.ExpiresAt}, nil
}

func (b *realBackend) ReleaseControl(ctx context.Context, cid, bot string) error {
	b.mu.Lock()
	id := b.leases[bot]
	delete(b.leases, bot)
	b.mu.Unlock()
	if id == "" {
		return nil
	}
	return b.botd.ReleaseLease(ctx, bot, id)
}

func (b *realBackend) Machine(ctx context.Context, id string) (machines.Machine, error) {
	if id != "comp-1" {
		return nil, fmt.Errorf("no machine for %s", id)
	}
	return b.botd, nil
}

// chrome is a headless Chromium on the DevTools pipe (fds 3 and 4).
type chrome struct {
	w   io.WriteCloser
	r   *bufio.Reader
	cmd *exec.Cmd
	id  int
}

func startChrome(t *testing.T) *chrome {
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
	c := &chrome{w: inW, r: bufio.NewReader(outR), cmd: cmd}
	t.Cleanup(func() {
		inW.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return c
}

// call sends one DevTools command and waits for its answer (events are
// skipped; this client is used from one goroutine).
func (c *chrome) call(session, method string, params any, out any) error {
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

func (c *chrome) open(t *testing.T, url string) string {
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

func (c *chrome) eval(session, expr string, out any) error {
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

func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, info := cond()
		if ok {
			return
		}
		if info != "" {
			last = info
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last: %s)", what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// thumbVariance is the grey-level variance of one thumbnail's canvas
// (-1 when it has none yet).
const thumbVariance = `(() => {
  const c = document.querySelector('.thumb[data-key="%s"] canvas');
  if (!c || !c.width || !c.height) return -1;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0, s = 0, q = 0;
  for (let i = 0; i < d.length; i += 4 * 97) { const g = (d[i] + d[i+1] + d[i+2]) / 3; n++; s += g; q += g * g; }
  const m = s / n; return q / n - m * m;
})()`

// thumbRed is the share of strongly red pixels in one thumbnail's canvas.
const thumbRed = `(() => {
  const c = document.querySelector('.thumb[data-key="%s"] canvas');
  if (!c || !c.width || !c.height) return 0;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0, red = 0;
  for (let i = 0; i < d.length; i += 4 * 31) { n++; if (d[i] > 180 && d[i+1] < 60 && d[i+2] < 60) red++; }
  return red / n;
})()`

func TestDashboardInChromium(t *testing.T) {
	testbotd.Require(t)
	bd := testbotd.Start(t, testbotd.Options{DisplayBase: 490, PortBase: 24200, Env: []string{"EGRESS_ALLOW=127.0.0.1/32"}})
	ctx := t.Context()
	for _, s := range []string{"alice", "bob"} {
		_, err := bd.Client.StartScreen(ctx, s)
		require.NoError(t, err)
	}
	be := &realBackend{botd: machines.BotdOf(bd.Client), leases: map[string]string{}}
	d, err := New(Options{Lister: be, Controller: be, Screens: be})
	require.NoError(t, err)
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	// Signed out: the page and the API refuse.
	for _, p := range []string{"/dashboard/", "/dashboard/api/state", "/dashboard/app.js", "/dashboard/novnc/core/rfb.js"} {
		resp, err := http.Get(srv.URL + p)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, p)
	}

	// A login link sets an HttpOnly SameSite=Strict session cookie, once.
	link, err := d.LoginLink()
	require.NoError(t, err)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(srv.URL + link)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	sc := resp.Header.Get("Set-Cookie")
	require.Contains(t, sc, "HttpOnly")
	require.Contains(t, sc, "SameSite=Strict")
	require.NotContains(t, sc, bd.Token)
	resp, err = noRedirect.Get(srv.URL + link)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a login link works once")

	// An HTTP session (for the API checks below).
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	link2, err := d.LoginLink()
	require.NoError(t, err)
	resp, err = hc.Get(srv.URL + link2)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/dashboard/api/computers/comp-1/bots/bob/takeover", nil)
	resp, err = hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a write without X-Dashboard (a cross-site form) is refused")
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/dashboard/api/computers/other/bots/bob/takeover", nil)
	req.Header.Set("X-Dashboard", "1")
	resp, err = hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	// A view id is bound to the session that asked for it.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/dashboard/api/computers/comp-1/screens/alice/view", nil)
	req.Header.Set("X-Dashboard", "1")
	resp, err = hc.Do(req)
	require.NoError(t, err)
	var v struct {
		WS string `json:"ws"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	resp.Body.Close()
	require.NotContains(t, v.WS, bd.Token)
	resp, err = http.Get(srv.URL + v.WS)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "another browser cannot use this view")

	// The page in real Chromium.
	ch := startChrome(t)
	s := ch.open(t, srv.URL+mustLink(t, d))
	var title string
	waitFor(t, 20*time.Second, "the dashboard", func() (bool, string) {
		_ = ch.eval(s, `document.title + '|' + (window.dashboard ? window.dashboard.polls : 0)`, &title)
		return strings.HasPrefix(title, "open-bot computer|") && !strings.HasSuffix(title, "|0"), title
	})
	var cookie string
	require.NoError(t, ch.eval(s, `document.cookie`, &cookie))
	require.Empty(t, cookie, "the session cookie is HttpOnly")
	var text string
	require.NoError(t, ch.eval(s, `document.body.innerText`, &text))
	require.Contains(t, text, "comp-1")
	require.Contains(t, text, "checkpoint #3 · 12.3 MB")
	require.Contains(t, text, "one screen: only one bot has a desktop; the others have shell and files · can stop · home persists",
		"the provider's description is shown")
	require.Contains(t, text, "computer_act click", "run events are shown")

	var variance float64
	opened := time.Now()
	waitFor(t, 60*time.Second, "alice's live thumbnail", func() (bool, string) {
		err := ch.eval(s, fmt.Sprintf(thumbVariance, "comp-1/alice"), &variance)
		return err == nil && variance > 10, fmt.Sprint(variance, err)
	})
	t.Logf("dashboard open → alice's thumbnail drawn: %v (canvas variance %.0f)", time.Since(opened).Round(time.Millisecond), variance)

	// The screenshot shows the desktop inside the thumbnail.
	var rect struct{ X, Y, W, H float64 }
	require.NoError(t, ch.eval(s, `(() => { const r = document.querySelector('.thumb[data-key="comp-1/alice"]').getBoundingClientRect(); return {X: r.x, Y: r.y, W: r.width, H: r.height}; })()`, &rect))
	var shot struct {
		Data string `json:"data"`
	}
	require.NoError(t, ch.call(s, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot))
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(t, err)
	shotPath := filepath.Join(os.TempDir(), "dashboard-homes.png")
	require.NoError(t, os.WriteFile(shotPath, raw, 0o644))
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
	mean := sum / n
	t.Logf("screenshot %s: thumbnail variance %.0f", shotPath, sq/n-mean*mean)
	require.Greater(t, sq/n-mean*mean, 10.0, "the thumbnail in the screenshot shows the screen, not a blank box")

	// Live: when the screen changes, the thumbnail follows.
	red := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><title>red</title><body style="margin:0;background:#e00000;height:100vh">`)
	}))
	defer red.Close()
	var before float64
	require.NoError(t, ch.eval(s, fmt.Sprintf(thumbRed, "comp-1/alice"), &before))
	lease, err := bd.Client.AcquireLease(ctx, "alice", "agent", "test", time.Minute)
	require.NoError(t, err)
	_, err = bd.Client.Open(ctx, "alice", lease.LeaseID, red.URL)
	require.NoError(t, err)
	var after float64
	waitFor(t, 30*time.Second, "the thumbnail to show the red page", func() (bool, string) {
		_ = ch.eval(s, fmt.Sprintf(thumbRed, "comp-1/alice"), &after)
		return after > before+0.2, fmt.Sprintf("red share %.2f → %.2f", before, after)
	})
	t.Logf("thumbnail red share %.2f → %.2f after the page opened", before, after)
	require.NoError(t, bd.Client.ReleaseLease(ctx, "alice", lease.LeaseID))

	// Take control of the busy bot: the worker's refusal, shown as is.
	require.NoError(t, ch.eval(s, `document.querySelector('.bot[data-bot="alice"] .take').click(), true`, new(bool)))
	waitFor(t, 10*time.Second, "the refusal", func() (bool, string) {
		_ = ch.eval(s, `document.querySelector('.message[data-key="comp-1/alice"]').innerText`, &text)
		return text == "Stop the bot first", text
	})
	// The free bot: control is granted and a link shown; release hands it back.
	require.NoError(t, ch.eval(s, `document.querySelector('.bot[data-bot="bob"] .take').click(), true`, new(bool)))
	waitFor(t, 10*time.Second, "control of bob", func() (bool, string) {
		_ = ch.eval(s, `document.querySelector('.message[data-key="comp-1/bob"]').innerText`, &text)
		return strings.HasPrefix(text, "You have control"), text
	})
	be.mu.Lock()
	require.NotEmpty(t, be.leases["bob"], "a user lease on bob's screen")
	be.mu.Unlock()
	require.NoError(t, ch.eval(s, `document.querySelector('.bot[data-bot="bob"] .release').click(), true`, new(bool)))
	waitFor(t, 10*time.Second, "release of bob", func() (bool, string) {
		_ = ch.eval(s, `document.querySelector('.message[data-key="comp-1/bob"]').innerText`, &text)
		return strings.HasPrefix(text, "Released"), text
	})
	be.mu.Lock()
	require.Empty(t, be.leases["bob"])
	be.mu.Unlock()
}

func mustLink(t *testing.T, d *Dashboard) string {
	l, err := d.LoginLink()
	require.NoError(t, err)
	return l
}

// Login links and sessions expire; the page then asks to sign in again.
func TestDashboardLoginExpiry(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	be := &realBackend{leases: map[string]string{}} // never reached: every request here is signed out
	d, err := New(Options{Lister: be, Controller: be, Screens: be, Now: clock, LoginTTL: time.Minute, SessionTTL: time.Hour})
	require.NoError(t, err)
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	stale, err := d.LoginLink()
	require.NoError(t, err)
	advance(2 * time.Minute)
	resp, err := http.Get(srv.URL + stale)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, string(body), "invalid, used or expired")

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	fresh, err := d.LoginLink()
	require.NoError(t, err)
	resp, err = hc.Get(srv.URL + fresh)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	advance(2 * time.Hour)
	resp, err = hc.Get(srv.URL + "/dashboard/api/state")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an expired session is signed out")
}

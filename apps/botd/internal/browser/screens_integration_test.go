package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/browser"
	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
	"github.com/open-bot/computer/apps/botd/internal/cookies"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// events records what was published.
type events struct {
	// mu guards list.
	mu   sync.Mutex
	list []string
}

func (e *events) Publish(typ string, data any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if typ == "cdp_session" {
		b, _ := json.Marshal(data)
		typ += " " + string(b)
	}
	e.list = append(e.list, typ)
}

// has reports whether an event of typ whose data contains s was published.
func (e *events) has(typ, s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.list {
		if strings.HasPrefix(t, typ+" ") && strings.Contains(t, s) {
			return true
		}
	}
	return false
}

// all is every published event of typ, with its data.
func (e *events) all(typ string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, t := range e.list {
		if strings.HasPrefix(t, typ+" ") {
			out = append(out, t)
		}
	}
	return out
}

func (e *events) count(typ string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, t := range e.list {
		if t == typ || strings.HasPrefix(t, typ+" ") {
			n++
		}
	}
	return n
}

func call(t *testing.T, srv *httptest.Server, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	if resp.StatusCode != 200 {
		t.Logf("%s %s -> %d %s", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode
}

// screensRig is a Screens attached to a screen manager on a mux served by
// a test server, with a fresh home (the bot's and desktop's directories),
// a SOCKS proxy sending every name to site, and what was published.
type screensRig struct {
	home  string
	socks string // the proxy's address
	srv   *httptest.Server
	bs    *browser.Screens
	sm    *screen.Manager
	ev    *events
}

func newScreensRig(t *testing.T, u osuser.User, prefix, site string, displayBase, viewPortBase, maxScreens int) *screensRig {
	t.Helper()
	bot, err := osuser.Lookup("bot")
	if err != nil {
		testenv.Unavailable(t, "bot user: %v", err)
	}
	home, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := osuser.PrepareDirs(osuser.Layout(home, u, bot)); err != nil {
		t.Fatal(err)
	}
	socks := browsertest.StartSocks(t, site)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	ev := &events{}
	jar, err := cookies.Load(cookies.Options{Path: filepath.Join(home, ".botd", "cookies.json")})
	if err != nil {
		t.Fatal(err)
	}
	bs := browser.NewScreens(browser.ScreensOptions{
		SocksAddr: socks.Addr, Desktop: u, Workspace: filepath.Join(home, "bot"), Cookies: jar, Events: ev, Log: log,
	})
	sm := screen.New(screen.Options{
		Home: home, DisplayBase: displayBase, ViewPortBase: viewPortBase, MaxScreens: maxScreens, Desktop: u, Log: log,
		Events: ev, Blocked: bs.Blocked, BrowserState: bs.State,
	})
	mux := http.NewServeMux()
	sm.Routes(mux)
	bs.Attach(sm, mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sm.Close(ctx)
		bs.Close(ctx)
	})
	return &screensRig{home: home, socks: socks.Addr, srv: srv, bs: bs, sm: sm, ev: ev}
}

// TestScreensRoutes drives the browser routes on a real screen (Xvfb, XFCE)
// through the screen manager: open, read, pages, the apply guard reported
// in observe, type-secret's origin check, and tabs coming back after the
// screen stops (browser first) and starts again.
func TestScreensRoutes(t *testing.T) {
	u := browsertest.Require(t)
	testenv.RequireTools(t, "xfwm4", "xfce4-panel", "xfdesktop", "dbus-daemon", "x11vnc")
	site := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/login" {
			fmt.Fprint(w, `<title>login</title><input id=pw type=password autofocus>`)
			return
		}
		fmt.Fprintf(w, `<title>%s</title><body>hello from %s</body>`, r.URL.Path, r.Host)
	}))
	rg := newScreensRig(t, u, "browser-screens-it-", site.addr(), 225, 28125, 2)
	srv, bs, sm, ev := rg.srv, rg.bs, rg.sm, rg.ev
	_ = ev
	ctx := browsertest.Ctx(t, 4*time.Minute)

	var l struct {
		LeaseID string `json:"leaseId"`
	}
	if code := call(t, srv, "POST", "/screens/bt1/lease", map[string]any{"kind": "agent", "holder": "bot-1", "ttlSeconds": 600}, &l); code != 200 {
		t.Fatalf("lease: %d", code)
	}
	// Reading before the screen runs is a clear error.
	if code := call(t, srv, "GET", "/screens/bt1/browser/page", nil, nil); code != http.StatusConflict {
		t.Fatalf("read of a stopped screen: %d", code)
	}
	start := time.Now()
	var opened map[string]any
	if code := call(t, srv, "POST", "/screens/bt1/open", map[string]any{"leaseId": l.LeaseID, "target": "http://www.site.test/first"}, &opened); code != 200 {
		t.Fatalf("open: %d", code)
	}
	t.Logf("open on a cold screen took %v: %v", time.Since(start), opened)
	var page browser.Page
	waitFor(t, 15*time.Second, "page via the route", func() bool {
		return call(t, srv, "GET", "/screens/bt1/browser/page", nil, &page) == 200 && page.Title == "/first"
	})
	if !strings.Contains(page.Text, "hello from www.site.test") {
		t.Fatalf("page %+v", page)
	}
	var pages struct {
		Pages []string `json:"pages"`
	}
	if call(t, srv, "GET", "/screens/bt1/browser/pages", nil, &pages) != 200 || len(pages.Pages) != 1 || pages.Pages[0] != "http://www.site.test/first" {
		t.Fatalf("pages %+v", pages)
	}
	// A workspace export/import quiesces the browsers: closed (tabs saved),
	// none starts until resume, then the tab is back on demand.
	resume, err := bs.Quiesce(ctx)
	if err != nil {
		t.Fatalf("quiesce: %v", err)
	}
	if st := bs.State("bt1"); st == shared.StateRunning {
		t.Fatalf("browser still %s after quiesce", st)
	}
	// A read that meets the quiesced browser waits for it (up to
	// browser.PauseWait) instead of failing, and gets the page after resume.
	readDone := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/screens/bt1/browser/page")
		if err != nil {
			readDone <- 0
			return
		}
		resp.Body.Close()
		readDone <- resp.StatusCode
	}()
	select {
	case code := <-readDone:
		t.Fatalf("read while quiesced answered %d before resume; want it to wait", code)
	case <-time.After(time.Second):
	}
	resume()
	if code := <-readDone; code != 200 {
		t.Fatalf("read that waited for the quiesced browser: %d, want 200", code)
	}
	waitFor(t, 60*time.Second, "the tab back after resume", func() bool {
		return call(t, srv, "GET", "/screens/bt1/browser/page", nil, &page) == 200 && page.Title == "/first"
	})
	if bs.State("bt1") != "running" {
		t.Fatalf("browser state %s", bs.State("bt1"))
	}
	{
		b, err := bs.Browser(ctx, "bt1")
		if err != nil {
			t.Fatal(err)
		}
		wins, err := b.Windows(ctx)
		if err != nil || len(wins) != 1 || (wins[0].State != "maximized" && wins[0].Width < 1280) {
			t.Fatalf("windows %+v %v", wins, err)
		}
		t.Logf("window after start: %+v", wins[0])
	}
	// Bad targets.
	if code := call(t, srv, "POST", "/screens/bt1/open", map[string]any{"leaseId": l.LeaseID, "target": "/etc/passwd"}, nil); code != http.StatusForbidden {
		t.Fatalf("absolute path: %d", code)
	}
	if code := call(t, srv, "POST", "/screens/bt1/open", map[string]any{"leaseId": l.LeaseID, "target": "javascript:alert(1)"}, nil); code != http.StatusBadRequest {
		t.Fatalf("javascript URL: %d", code)
	}
	if code := call(t, srv, "POST", "/screens/bt1/open", map[string]any{"leaseId": "nope", "target": "http://www.site.test/"}, nil); code != http.StatusConflict {
		t.Fatalf("stale lease: %d", code)
	}

	// The apply guard: a blocked application shows in the next observe.
	b, err := bs.Browser(ctx, "bt1")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EvalFront(ctx, `fetch("http://www.linkedin.com/jobs/9/apply", {method: "POST", body: "cv"}).catch(() => {}); 1`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "apply_guard event", func() bool { return ev.count("apply_guard") == 1 })
	var obs struct {
		Blocked []browser.Blocked `json:"blocked"`
	}
	if call(t, srv, "POST", "/screens/bt1/observe", map[string]any{"leaseId": l.LeaseID}, &obs) != 200 || len(obs.Blocked) != 1 || obs.Blocked[0].URL != "http://www.linkedin.com/jobs/9/apply" {
		t.Fatalf("observe blocked %+v", obs.Blocked)
	}
	if site.saw("POST www.linkedin.com") {
		t.Fatal("the application reached the server")
	}

	// type-secret types only on its own origin.
	if call(t, srv, "POST", "/screens/bt1/open", map[string]any{"leaseId": l.LeaseID, "target": "http://www.bank.test/login"}, nil) != 200 {
		t.Fatal("open login")
	}
	waitFor(t, 10*time.Second, "login page", func() bool {
		return call(t, srv, "GET", "/screens/bt1/browser/page", nil, &page) == 200 && page.Title == "login"
	})
	if code := call(t, srv, "POST", "/screens/bt1/type-secret", map[string]any{"leaseId": l.LeaseID, "secret": "hunter2", "origin": "http://www.evil.test"}, nil); code != http.StatusConflict {
		t.Fatalf("type-secret on the wrong origin: %d", code)
	}
	if code := call(t, srv, "POST", "/screens/bt1/type-secret", map[string]any{"leaseId": l.LeaseID, "secret": "hünter2 😀", "origin": "http://www.bank.test"}, nil); code != 200 {
		t.Fatalf("type-secret: %d", code)
	}
	sess, err := b.FrontSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var typed string
	waitFor(t, 5*time.Second, "typed secret", func() bool {
		yes := true
		res, err := cdpapi.Call(ctx, sess, runtime.Evaluate, runtime.EvaluateParams{Expression: `document.getElementById("pw").value`, ReturnByValue: &yes})
		if err != nil || res.Result == nil {
			return false
		}
		_ = json.Unmarshal(res.Result.Value, &typed)
		return typed == "hünter2 😀"
	})
	assertNoTCPListener(t, b.Pid())

	// Stop the screen: the browser goes first and saves its tabs; the next
	// open starts both again and the tabs are back.
	if code := call(t, srv, "POST", "/screens/bt1/stop", map[string]any{}, nil); code != 200 {
		t.Fatalf("stop: %d", code)
	}
	select {
	case <-b.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("browser still running after its screen stopped")
	}
	if st := bs.State("bt1"); st != "stopped" {
		t.Fatalf("browser state after a screen stop: %s", st)
	}
	if call(t, srv, "POST", "/screens/bt1/open", map[string]any{"leaseId": l.LeaseID, "target": "http://www.site.test/second", "newTab": true}, nil) != 200 {
		t.Fatal("open after restart")
	}
	b2, err := bs.Browser(ctx, "bt1")
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	waitFor(t, 15*time.Second, "restored tabs", func() bool {
		urls, err = b2.AllURLs(ctx)
		return err == nil && contains(urls, "http://www.bank.test/login") && contains(urls, "http://www.site.test/second")
	})
	t.Logf("tabs after the screen restarted: %v", urls)

	// A browser started from the screen's own menu gets the screen's flags
	// (through /etc/chromium.d/open-bot and the session's args file); when
	// botd needs its browser, it closes that one and its tabs come back.
	if _, err := os.Stat("/etc/chromium.d/open-bot"); err != nil {
		testenv.Unavailable(t, "/etc/chromium.d/open-bot not installed (run scripts/provision.sh)")
	}
	env, ok := sm.Env("bt1")
	if !ok {
		t.Fatal("no session env")
	}
	var rt string
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "XDG_RUNTIME_DIR="); ok {
			rt = v
		}
	}
	args, err := os.ReadFile(filepath.Join(rt, browser.ArgsFile))
	if err != nil || !strings.Contains(string(args), "'--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1'") || !strings.Contains(string(args), "--proxy-server=socks5://"+rg.socks) {
		t.Fatalf("args file %q %v", args, err)
	}
	if err := b2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-b2.Done()
	menu, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"chromium", "http://www.site.test/menu"}, User: &u, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	menuDone := make(chan struct{})
	go func() { _, _ = menu.Wait(); close(menuDone) }()
	t.Cleanup(func() { _ = menu.SignalGroup(syscall.SIGKILL) })
	waitFor(t, 30*time.Second, "the menu browser through the screen's proxy", func() bool { return site.saw("GET www.site.test/menu") })
	// A person's browser runs a while: until Chromium has saved the menu
	// page in its session file (it saves a few seconds after a change).
	sessions := filepath.Join(sm.ProfileDir("bt1"), "chromium", "Default", "Sessions")
	waitFor(t, 60*time.Second, "the menu page in the profile's session file", func() bool {
		files, _ := filepath.Glob(filepath.Join(sessions, "Session_*"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte("www.site.test/menu")) {
				return true
			}
		}
		return false
	})
	b3, err := bs.Browser(ctx, "bt1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-menuDone:
	case <-time.After(15 * time.Second):
		t.Fatal("the menu browser still runs")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		urls, err = b3.AllURLs(ctx)
		if err == nil && contains(urls, "http://www.site.test/menu") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the menu browser's tab is not in botd's browser: %v %v", urls, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("tabs after taking the profile back: %v", urls)
}

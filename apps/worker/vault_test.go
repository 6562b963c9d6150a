package main

// The vault on real botd, Chromium and Codex: a caller stores a password
// for one origin; a teammate's type_secret has botd type it into a real
// login page on that origin (loopback), and the page signs in. On another
// origin, into a cross-origin iframe, or when the page navigates away or
// moves the focus into another origin's frame as the typing starts, that
// origin receives nothing. The value appears in no tool result, run event,
// model request, worker or botd log, database file or process command line.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// vaultAddr picks a free loopback port in 17500-17999 (this test's band).
func vaultAddr(t testing.TB) net.Listener {
	t.Helper()
	for range 500 {
		p := 17500 + int(vaultPortNext.Add(1))%500
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			return l
		}
	}
	t.Fatalf("no free loopback port in 17500-17999")
	return nil
}

var vaultPortNext atomic.Int32

// site is one origin's pages, recording what its pages report: every
// value typed into their fields ("page|value") and every key they saw
// ("page-key|key").
type site struct {
	url, other string
	secret     string
	mu         sync.Mutex
	reports    []string
	signedIn   bool
}

func (s *site) add(r string) {
	s.mu.Lock()
	s.reports = append(s.reports, r)
	s.mu.Unlock()
}

func (s *site) reset() {
	s.mu.Lock()
	s.reports = nil
	s.mu.Unlock()
}

func (s *site) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reports...)
}

func (s *site) didSignIn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signedIn
}

// of lists the reports of one page ("login", "catch-key", …).
func (s *site) of(page string) []string {
	var out []string
	for _, r := range s.all() {
		if p, v, ok := strings.Cut(r, "|"); ok && p == page {
			out = append(out, v)
		}
	}
	return out
}

// reporter reports each field's value on input, and each key pressed.
const reporter = `<script>
function report(what, v) { navigator.sendBeacon("/typed?page=" + encodeURIComponent(what), v); }
const page = document.title;
document.addEventListener("input", e => report(page, e.target.value), true);
document.addEventListener("keydown", e => report(page + "-key", e.key), true);
window.addEventListener("load", () => report(page + "-loaded", "1"));
</script>`

func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.Method + " " + r.URL.Path {
	case "POST /typed":
		b, _ := io.ReadAll(r.Body)
		s.add(r.URL.Query().Get("page") + "|" + string(b))
	case "GET /login":
		fmt.Fprint(w, `<title>login</title>`+reporter+`<form method=post action=/login>
<input name=user value=alice> <input id=pw name=pw type=password autofocus> <button>Sign in</button></form>`)
	case "POST /login":
		_ = r.ParseForm()
		if r.PostForm.Get("pw") == s.secret && r.PostForm.Get("user") == "alice" {
			s.mu.Lock()
			s.signedIn = true
			s.mu.Unlock()
			fmt.Fprint(w, `<title>home</title><h1>signed in</h1>`)
			return
		}
		fmt.Fprint(w, `<title>login failed</title><h1>wrong password</h1>`)
	case "GET /frame":
		// The top page is this origin's; a frame of the other origin fills
		// the viewport, with a text area inside.
		fmt.Fprint(w, `<title>frame</title>`+reporter+`<style>html,body{margin:0;height:100%}
iframe{position:fixed;left:0;top:0;width:100%;height:100%;border:0}</style>
<input id=pw type=password autofocus><iframe src="`+s.other+`/inner"></iframe>`)
	case "GET /inner":
		fmt.Fprint(w, `<title>inner</title>`+reporter+`<style>html,body{margin:0;height:100%}
textarea{width:100%;height:100%;box-sizing:border-box}</style><textarea id=t></textarea>
<script>window.addEventListener("focus", () => document.getElementById("t").focus());</script>`)
	case "GET /hop":
		// Navigates to the other origin as soon as typing starts (a key
		// press or text input), having reported what it got.
		fmt.Fprint(w, `<title>hop</title>`+reporter+`<input id=pw type=password autofocus>
<script>let gone = false;
function hop() { if (!gone) { gone = true; setTimeout(() => location.replace("`+s.other+`/catch"), 0); } }
document.addEventListener("keydown", hop); document.addEventListener("input", hop);</script>`)
	case "GET /catch":
		// The text area fills the viewport, so a click anywhere puts the
		// focus in it.
		fmt.Fprint(w, `<title>catch</title>`+reporter+`<style>html,body{margin:0;height:100%}
textarea{position:fixed;left:0;top:0;width:100%;height:100%;border:0}</style><textarea id=t autofocus></textarea>`)
	case "GET /focushop":
		// Moves the focus into the other origin's frame as soon as typing
		// starts.
		fmt.Fprint(w, `<title>focushop</title>`+reporter+`<input id=pw type=password autofocus>
<iframe src="`+s.other+`/inner" style="width:400px;height:120px"></iframe>
<script>function away() { document.querySelector("iframe").focus(); }
document.addEventListener("keydown", away, true); document.addEventListener("beforeinput", away, true);</script>`)
	default:
		http.NotFound(w, r)
	}
}

// serveSite serves a site on a loopback port of the test's band.
func serveSite(t testing.TB, s *site) {
	srv := httptest.NewUnstartedServer(s)
	srv.Listener.Close()
	srv.Listener = vaultAddr(t)
	srv.Start()
	t.Cleanup(srv.Close)
	s.url = srv.URL
}

// vaultModel keeps every request body the scripted model receives.
type vaultModel struct {
	next   http.Handler
	mu     sync.Mutex
	bodies []string
}

func (m *vaultModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.bodies = append(m.bodies, string(b))
	m.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	m.next.ServeHTTP(w, r)
}

func (m *vaultModel) all() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.bodies, "\n")
}

// procScan reads every process's command line and environment until
// stopped, and reports which of needles it saw.
type procScan struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	seen map[string]string // needle → the process that carried it
	n    int               // full passes over /proc
}

func scanProcs(needles ...string) *procScan {
	p := &procScan{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]string{}}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			dirs, _ := filepath.Glob("/proc/[0-9]*")
			for _, d := range dirs {
				for _, f := range []string{"cmdline", "environ"} {
					b, err := os.ReadFile(filepath.Join(d, f))
					if err != nil {
						continue
					}
					for _, n := range needles {
						if bytes.Contains(b, []byte(n)) {
							p.mu.Lock()
							if _, ok := p.seen[n]; !ok {
								p.seen[n] = d + "/" + f + ": " + strings.ReplaceAll(string(b), "\x00", " ")
							}
							p.mu.Unlock()
						}
					}
				}
			}
			p.mu.Lock()
			p.n++
			p.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return p
}

func (p *procScan) passes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *procScan) end() map[string]string {
	close(p.stop)
	<-p.done
	return p.seen
}

// vaultWorker serves the worker in-process with its log captured.
func vaultWorker(t testing.TB, c *computer, logs io.Writer, bots ...string) *workerEnv {
	t.Helper()
	e := &workerEnv{token: "worker-token-0123456789", op: "operator-token-0123456789", dataDir: t.TempDir(), logs: logs}
	e.serve(t, "scripted-model")
	return e.addComputer(t, c, map[string]any{"team": "t1"}, bots...)
}

func TestVaultTypeSecret(t *testing.T) {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	secret := "Pw-" + hex.EncodeToString(b) + "-Zq9"

	bank := &site{secret: secret}
	evil := &site{secret: "not-the-secret"}
	serveSite(t, bank)
	serveSite(t, evil)
	bank.other, evil.other = evil.url, bank.url

	// The model signs in: open the login page, read it, type the secret,
	// press Enter, read until it says "signed in".
	var mu sync.Mutex
	step, typed := 0, false
	model := mockmodel.New(func(outs []mockmodel.Output) mockmodel.Step {
		mu.Lock()
		defer mu.Unlock()
		last := ""
		if len(outs) > 0 {
			last = outs[len(outs)-1].Text
		}
		step++
		switch {
		case len(outs) == 0:
			return mockmodel.Step{Tool: "open_path", Args: map[string]any{"target": bank.url + "/login"}}
		case strings.Contains(last, "signed in"):
			return mockmodel.Step{Message: "signed in"}
		case strings.HasPrefix(last, "typed the secret"):
			return mockmodel.Step{Tool: "computer_act", Args: map[string]any{"actions": []map[string]any{{"type": "keypress", "keys": []string{"Enter"}}}}}
		case !typed && strings.Contains(last, `"title":"login"`):
			typed = true
			return mockmodel.Step{Tool: "type_secret", Args: map[string]any{"name": "bank"}}
		case step > 40:
			return mockmodel.Step{Message: "gave up: " + last}
		}
		return mockmodel.Step{Tool: "browser_read_page", Args: map[string]any{}}
	})
	rec := &vaultModel{next: model}
	modelSrv := httptest.NewServer(rec)
	t.Cleanup(modelSrv.Close)

	c := startComputer(t, modelSrv.URL, 680, "VIEW_PORT_BASE=27800", "EGRESS_ALLOW=127.0.0.1/32", "BOTD_LOG_LEVEL=debug")
	workerLogs := &syncBuffer{}
	e := vaultWorker(t, c, workerLogs, "alice")

	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/secrets", map[string]string{"name": "bank", "origin": bank.url, "value": secret}, nil))
	// A long one, so that typing it key by key would take long enough for a
	// navigation that typing starts to commit part way through.
	long := strings.Repeat(hex.EncodeToString(b), 4096/len(hex.EncodeToString(b)))
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/secrets", map[string]string{"name": "long", "origin": bank.url, "value": long}, nil))
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/secrets", map[string]string{"name": "gone", "origin": bank.url, "value": secret + "-old"}, nil))
	require.Equal(t, http.StatusOK, e.do(t, "DELETE", "/secrets/gone", nil, nil))

	// Every process's command line and environment, while secrets move.
	canary := "vault-canary-" + hex.EncodeToString(b[:4])
	scan := scanProcs(secret, canary)
	sleeper := exec.Command("sh", "-c", "sleep 30; true", canary)
	require.NoError(t, sleeper.Start())
	waitFor(t, "the process scan to see the canary", 30*time.Second, func() bool {
		scan.mu.Lock()
		defer scan.mu.Unlock()
		return scan.seen[canary] != ""
	})
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()

	var results []string // every direct tool answer
	tool := func(t *testing.T, name string, args map[string]any) toolResult {
		t.Helper()
		_, res := e.tool(t, "alice", name, args)
		results = append(results, res.text())
		return res
	}
	open := func(t *testing.T, s *site, page string) {
		t.Helper()
		r := tool(t, "open_path", map[string]any{"target": s.url + "/" + page})
		require.True(t, r.Success, r.text())
		waitFor(t, page+" loaded", 30*time.Second, func() bool {
			r := tool(t, "browser_read_page", map[string]any{})
			return r.Success && strings.Contains(r.text(), `"title":"`+page+`"`)
		})
	}
	typeText := func(t *testing.T, text string) {
		t.Helper()
		r := tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "type", "text": text}}})
		require.True(t, r.Success, r.text())
	}
	// only: every value a page reported is a prefix of want, and every key
	// it saw is one of want's (nothing else was typed there). The markers
	// typed share no character with the secret (hex digits, P, w, Z, q, -).
	only := func(t *testing.T, s *site, page, want string) {
		t.Helper()
		// Beacons may arrive out of order: wait for any report of the
		// whole marker, not for the last one to be it.
		deadline := time.Now().Add(30 * time.Second)
		for !slices.ContainsFunc(s.of(page), func(v string) bool { return strings.HasSuffix(v, want) }) {
			require.True(t, time.Now().Before(deadline), "timed out waiting for %s reporting %s; it reported %q and keys %q", page, want, s.of(page), s.of(page+"-key"))
			time.Sleep(100 * time.Millisecond)
		}
		for _, v := range s.of(page) {
			require.True(t, strings.HasPrefix(want, v), "%s got %q: something besides %q was typed there", page, v, want)
		}
		for _, k := range s.of(page + "-key") {
			require.True(t, len(k) == 1 && strings.Contains(want, k), "%s saw the key %q: something besides %q was typed there", page, k, want)
		}
	}

	t.Run("unknown name", func(t *testing.T) {
		r := tool(t, "type_secret", map[string]any{"name": "nope"})
		require.False(t, r.Success)
		require.Contains(t, r.text(), `no secret named "nope"`)
		require.Contains(t, r.text(), "bank")
		r = tool(t, "type_secret", map[string]any{"name": "bank", "screen": "bob"})
		require.False(t, r.Success)
		require.Contains(t, r.text(), "is not yours")
	})

	t.Run("another origin", func(t *testing.T) {
		bank.reset()
		evil.reset()
		open(t, evil, "login")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		require.False(t, r.Success, r.text())
		require.Contains(t, r.text(), "not on "+bank.url)
		require.Contains(t, r.text(), "not typed")
		typeText(t, "mkt")
		only(t, evil, "login", "mkt")
	})

	t.Run("cross-origin iframe", func(t *testing.T) {
		bank.reset()
		evil.reset()
		open(t, bank, "frame")
		waitFor(t, "the other origin's frame", 30*time.Second, func() bool { return len(evil.of("inner-loaded")) > 0 })
		// Click into the other origin's frame (it fills the viewport).
		r := tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "click", "x": 640, "y": 500}}})
		require.True(t, r.Success, r.text())
		r = tool(t, "type_secret", map[string]any{"name": "bank"})
		require.False(t, r.Success, r.text())
		require.Contains(t, r.text(), "frame of another origin")
		typeText(t, "jrx")
		only(t, evil, "inner", "jrx")
		require.Empty(t, bank.of("frame"), "nothing was typed in the top page either")
	})

	t.Run("navigation as typing starts", func(t *testing.T) {
		bank.reset()
		evil.reset()
		open(t, bank, "hop")
		r := tool(t, "type_secret", map[string]any{"name": "long"})
		t.Logf("type_secret on a page that navigates away as typing starts: %s", r.text())
		waitFor(t, "the hop to the other origin", 30*time.Second, func() bool {
			r := tool(t, "browser_read_page", map[string]any{})
			return r.Success && strings.Contains(r.text(), `"title":"catch"`)
		})
		// Autofocus alone is not always honoured after the hop (seen in CI:
		// the marker reached no field): click into the text area first.
		r2 := tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "click", "x": 640, "y": 500}}})
		require.True(t, r2.Success, r2.text())
		typeText(t, "nuv")
		only(t, evil, "catch", "nuv")
		if r.Success {
			// Typed: all of it on the secret's own page, before it left.
			waitFor(t, "the hop page's report", 30*time.Second, func() bool { return len(bank.of("hop")) > 0 })
			require.Equal(t, []string{long}, bank.of("hop"))
		}
	})

	t.Run("focus moves into another origin's frame as typing starts", func(t *testing.T) {
		bank.reset()
		evil.reset()
		open(t, bank, "focushop")
		waitFor(t, "the other origin's frame", 30*time.Second, func() bool { return len(evil.of("inner-loaded")) > 0 })
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		t.Logf("type_secret on a page that moves the focus away as typing starts: %s", r.text())
		// The focus is in the other origin's frame now (or still on the
		// field, had nothing started): what is typed next shows where.
		typeText(t, "hsy")
		waitFor(t, "hsy typed somewhere", 30*time.Second, func() bool {
			return slices.Contains(evil.of("inner-key"), "y") || slices.Contains(bank.of("focushop-key"), "y")
		})
		t.Logf("the secret's page reported %d values, the other origin's frame %q and keys %q", len(bank.of("focushop")), evil.of("inner"), evil.of("inner-key"))
		for _, v := range evil.of("inner") {
			require.True(t, strings.Contains("hsy", v), "the other origin's frame got %q", v)
		}
		for _, k := range evil.of("inner-key") {
			require.True(t, len(k) == 1 && strings.Contains("hsy", k), "the other origin's frame saw the key %q", k)
		}
	})

	t.Run("sign in through a run", func(t *testing.T) {
		id := e.startRun(t, "alice", "Sign in to the bank with the vault's secret named bank.")
		final, _ := waitRun(t, e, id, 4*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
		require.Equal(t, "signed in", final.Message)
		require.True(t, bank.didSignIn(), "the login page checked the password")
		var typed bool
		for _, tc := range final.ToolCalls {
			if tc.Tool == "type_secret" {
				typed = tc.Success
			}
			noSecret(t, secret, tc.Output, "tool call %s output", tc.Tool)
			noSecret(t, secret, string(tc.Arguments), "tool call %s arguments", tc.Tool)
		}
		require.True(t, typed, "the run typed the secret")
		evs := runEvents(t, e, id)
		require.NotEmpty(t, evs)
		for _, ev := range evs {
			noSecret(t, secret, string(ev.Data), "run event %s", ev.Type)
		}
		require.Contains(t, rec.all(), "typed the secret", "the model was told the secret was typed")
		require.Contains(t, rec.all(), "signed in")
	})

	// Nowhere else: the model's requests, tool answers, logs, the
	// database, any process's argv or environment.
	seen := scan.end()
	t.Logf("process scan: %d passes over /proc", scan.passes())
	assert.Empty(t, seen[secret], "a process's command line or environment carried the secret")
	noSecret(t, secret, rec.all(), "a model request")
	for _, r := range results {
		noSecret(t, secret, r, "a tool answer")
	}
	var list struct {
		Secrets []map[string]string `json:"secrets"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/secrets", nil, &list))
	require.Equal(t, []map[string]string{{"name": "bank", "origin": bank.url}, {"name": "long", "origin": bank.url}}, list.Secrets)
	noSecret(t, secret, workerLogs.String(), "the worker's log")
	require.Contains(t, workerLogs.String(), "/secrets", "the worker's log was captured")
	noSecret(t, secret, c.logs.String(), "botd's log")
	require.Contains(t, c.logs.String(), "type-secret", "botd's log was captured")
	for _, f := range []string{"worker.db", "worker.db-wal"} {
		data, err := os.ReadFile(filepath.Join(e.dataDir, f))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		noSecret(t, secret, string(data), "%s", f)
	}
}

// noSecret fails (and goes on) when hay holds secret, quoting only a little
// of the text around it.
func noSecret(t *testing.T, secret, hay, format string, args ...any) {
	t.Helper()
	i := strings.Index(hay, secret)
	if i < 0 {
		return
	}
	from, to := max(0, i-80), min(len(hay), i+len(secret)+40)
	assert.Fail(t, fmt.Sprintf(format, args...)+" carried the secret", "…%s…", hay[from:to])
}

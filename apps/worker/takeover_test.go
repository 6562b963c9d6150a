package main

// Takeover and botd's events through the real worker, a real botd (Xvfb,
// xfce, x11vnc, Chromium) and real Codex driven by the scripted model:
// the policy (409 "Stop the bot first" on a busy bot, allowed while the
// run waits for a person), request_takeover's control link, a raw RFB
// client through the worker's relay (a frame; keys that reach the page
// while control is held; closed on release and refused afterwards), an
// expiring link, and apply-guard blocks, a preemption and a crashed
// browser arriving as events of the bot's run and in its SSE stream.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/egressagent"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/events"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/takeover"
	"github.com/open-bot/computer/pkg/shared/client"
)

// keyPage is a local page that records the keys typed into it and, with
// ?apply=1, tries to submit an application (which the apply guard blocks).
type keyPage struct {
	srv *httptest.Server
	mu  sync.Mutex
	// keys typed into the page, in order; applied counts submissions
	// that reached the server (the guard must keep it at 0).
	keys    strings.Builder
	applied int
}

func newKeyPage(t testing.TB) *keyPage {
	p := &keyPage{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			apply := ""
			if r.URL.Query().Get("apply") == "1" {
				apply = `fetch('/jobs/1/apply',{method:'POST',body:'cv'}).catch(()=>{});`
			}
			fmt.Fprintf(w, `<!doctype html><title>sign in</title><body style="margin:0;background:#fff">
<input id="i" autofocus style="position:fixed;left:0;top:0;width:100vw;height:100vh;font-size:60px">
<script>document.addEventListener('keydown',e=>{fetch('/key?k='+encodeURIComponent(e.key))});%s</script></body>`, apply)
		case r.URL.Path == "/key":
			p.mu.Lock()
			p.keys.WriteString(r.URL.Query().Get("k"))
			p.mu.Unlock()
		case strings.Contains(r.URL.Path, "apply") && r.Method == http.MethodPost:
			p.mu.Lock()
			p.applied++
			p.mu.Unlock()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *keyPage) typed() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys.String()
}

// sseLog follows a run's SSE stream and keeps what it saw.
type sseLog struct {
	mu     sync.Mutex
	events []sseEvent
	ended  bool
}

type sseEvent struct {
	Type string
	Data map[string]any
}

func followSSE(t testing.TB, e *workerEnv, runID string) *sseLog {
	l := &sseLog{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp := openEvents(t, ctx, e, runID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	go func() {
		defer resp.Body.Close()
		_ = readSSE(resp.Body, func(typ, data string) bool {
			var ev struct {
				Data map[string]any `json:"data"`
			}
			_ = json.Unmarshal([]byte(data), &ev)
			l.mu.Lock()
			l.events = append(l.events, sseEvent{Type: typ, Data: ev.Data})
			if typ == "end" {
				l.ended = true
			}
			l.mu.Unlock()
			return true
		})
	}()
	return l
}

// find returns the first event matching.
func (l *sseLog) find(match func(sseEvent) bool) (sseEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if match(ev) {
			return ev, true
		}
	}
	return sseEvent{}, false
}

func (l *sseLog) wait(t testing.TB, what string, within time.Duration, match func(sseEvent) bool) sseEvent {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if ev, ok := l.find(match); ok {
			return ev
		}
		l.mu.Lock()
		ended := l.ended
		l.mu.Unlock()
		if ended || time.Now().After(deadline) {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("no %s event (within %s, or before the run ended); saw %d events: %v", what, within, len(l.events), l.events)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func botdKind(kind string) func(sseEvent) bool {
	return func(ev sseEvent) bool { return ev.Type == events.RunEventBotd && ev.Data["kind"] == kind }
}

// takeoverCall posts or deletes a takeover with e's credentials (capa
// overrides the capability when set).
func takeoverCall(t testing.TB, e *workerEnv, method, bot, capa string) (int, takeover.Link, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.url+"/v1/computers/"+e.computer+"/bots/"+bot+"/takeover", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	if capa == "" {
		capa = e.capa
	}
	req.Header.Set("X-Computer-Capability", capa)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		takeover.Link
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Link, body.Error.Message
}

// writeBotFile writes a file in the workspace through the worker's direct
// tool API (it takes no execution lease).
func writeBotFile(t testing.TB, e *workerEnv, bot, path string) {
	t.Helper()
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_write", map[string]any{"botId": bot,
		"args": map[string]string{"path": path, "content": "go\n"}}, nil))
}

// waitShell is a shell step that waits (up to a minute) for a file.
func waitShell(path string) mockmodel.Step {
	return mockmodel.Step{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c",
		"i=0; while [ ! -e " + path + " ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo waited"}, "timeoutMs": 120000}}
}

// connectControl opens a control link with the raw RFB client and reads a
// drawn frame.
func connectControl(t testing.TB, link string) *rfbClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, status, err := dialRFB(ctx, wsURL(link))
	require.NoError(t, err, "dial the control link: HTTP %d", status)
	require.NoError(t, c.handshake())
	deadline := time.Now().Add(30 * time.Second)
	for {
		rects, err := c.fullFrame(time.Until(deadline))
		require.NoError(t, err)
		if variance(rects) > 10 {
			return c
		}
		require.True(t, time.Now().Before(deadline), "the control link's frames stay blank")
	}
}

// chromiumPids are the main Chromium processes of botd home's screen.
func chromiumPids(home, screen string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := string(b)
		if strings.Contains(cmd, "--user-data-dir="+home) && strings.Contains(cmd, "/screens/"+screen+"/") && !strings.Contains(cmd, "--type=") {
			out = append(out, pid)
		}
	}
	return out
}

// TestTakeoverAndBotdEvents runs on each store engine (a fresh botd each).
func TestTakeoverAndBotdEvents(t *testing.T) { eachStore(t, takeoverAndBotdEvents) }

func takeoverAndBotdEvents(t *testing.T, dbURL string) {
	page := newKeyPage(t)
	var phase atomic.Int32
	script := func(outs []mockmodel.Output) mockmodel.Step {
		var steps []mockmodel.Step
		switch phase.Load() {
		case 1: // busy, then asks for a person, then looks again
			steps = []mockmodel.Step{
				{Tool: "computer_observe", Args: map[string]any{}},
				{Tool: "open_path", Args: map[string]any{"target": page.srv.URL + "/"}},
				waitShell("bots/alice/go1"),
				{Tool: "request_takeover", Args: map[string]any{"reason": "please sign in for me"}},
				{Tool: "computer_observe", Args: map[string]any{}},
			}
		case 3: // asks for a person; the caller resumes it instead
			steps = []mockmodel.Step{
				{Tool: "request_takeover", Args: map[string]any{"reason": "decide for me"}},
				{Tool: "computer_observe", Args: map[string]any{}},
			}
		case 2: // opens a page that submits an application, then waits
			steps = []mockmodel.Step{
				{Tool: "open_path", Args: map[string]any{"target": page.srv.URL + "/?apply=1"}},
				waitShell("bots/alice/go2"),
			}
		}
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return mockmodel.Step{Message: "done"}
	}
	model := mockmodel.New(script).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	c := startComputer(t, modelSrv.URL, 474,
		"EGRESS_ALLOW="+strings.TrimPrefix(page.srv.URL, "http://"), "APPLY_GUARD_EXTRA_DOMAINS=127.0.0.1",
		"VIEW_PORT_BASE=23550")
	// The worker has the model too: the worker runtime's run below.
	e := startWorkerWith(t, c, "scripted-model", func(cfg *serveConfig) {
		if tw := withDatabase(dbURL); tw != nil {
			tw(cfg)
		}
		cfg.Getenv = envMap(map[string]string{"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey})
	}, "alice", "bob")
	requirePostgresUsed(t, e, dbURL)
	e.w.People.Takeover.SetBase(e.url)
	botd := client.New(c.url, c.token, nil)

	t.Run("request_takeover", func(t *testing.T) {
		phase.Store(1)
		id := e.startRun(t, "alice", "Sign in to the page; ask a person to do it.")
		sse := followSSE(t, e, id)
		sse.wait(t, "waiting shell", 3*time.Minute, func(ev sseEvent) bool { return ev.Type == "tool_call" && ev.Data["tool"] == "shell" })

		// Busy: a live run that is not waiting → 409, and nothing granted.
		status, _, msg := takeoverCall(t, e, "POST", "alice", "")
		require.Equal(t, http.StatusConflict, status)
		require.Equal(t, "Stop the bot first", msg)
		// Another team's bot (not on this computer) and a wrong capability: 404.
		status, _, _ = takeoverCall(t, e, "POST", "mallory", "")
		require.Equal(t, http.StatusNotFound, status)
		status, _, _ = takeoverCall(t, e, "POST", "alice", "not-the-capability-0123456789abcdef")
		require.Equal(t, http.StatusNotFound, status)

		writeBotFile(t, e, "alice", "bots/alice/go1")
		ev := sse.wait(t, "waiting_takeover", 2*time.Minute, func(ev sseEvent) bool {
			return ev.Type == "status" && ev.Data["status"] == string(runs.StatusWaitingTakeover)
		})
		link, _ := ev.Data["controlUrl"].(string)
		require.True(t, strings.HasPrefix(link, e.url+takeover.Prefix), "the event carries a worker control link, got %v", ev.Data)
		require.NotContains(t, link, c.token)
		require.NotContains(t, link, strings.TrimPrefix(c.url, "http://"), "botd's address never reaches the person")
		require.Equal(t, "alice", ev.Data["screen"])
		require.Equal(t, runs.StatusWaitingTakeover, e.getRun(t, id).Status)
		sr, err := e.w.Store.GetRun(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, store.RunWaitingTakeover, sr.State, "waiting_takeover is persisted")

		// The person's raw RFB client through the worker: a frame, and keys
		// that reach the page while control is held.
		rfb := connectControl(t, link)
		// The pointer moves on the X display, and keys reach the page
		// (clicked into first; a person clicks again if focus was elsewhere).
		require.NoError(t, rfb.pointer(0, 123, 234))
		waitFor(t, "the pointer to move", 30*time.Second, func() bool { x, y := pointerAt(t, c, botd, "alice"); return x == 123 && y == 234 })
		typeUntil(t, rfb, page, "h")

		// While the run waits, the policy lets a person take control again:
		// a new link, and the old one's control ends with the answer. Keys
		// sent on the old connection right after (the client has read
		// nothing since, so they go out on the wire) must not reach the
		// page, which still has the focus "h" went to: once the new link's
		// "k" arrived, an earlier relayed "zz" would have too. Then the
		// server has closed the old connection, and a new dial is refused.
		status, link2, _ := takeoverCall(t, e, "POST", "alice", "")
		require.Equal(t, http.StatusOK, status)
		require.NotEqual(t, link, link2.URL)
		if err := rfb.typeText("zz"); err != nil {
			t.Logf("keys on the ended control connection: %v (the server had dropped it already)", err)
		}
		rfb2 := connectControl(t, link2.URL)
		typeUntil(t, rfb2, page, "k")
		require.NotContains(t, page.typed(), "zz", "keys sent on the old connection after its control ended reached the page")
		requireClosedByServer(t, rfb, 20*time.Second, "the old control connection")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, st, err := dialRFB(ctx, wsURL(link))
		cancel()
		require.Error(t, err)
		require.Equal(t, http.StatusGone, st)

		// Release: the connection closes, the link is refused, the run goes on.
		// Input sent right after the release answered must not act either.
		status, _, _ = takeoverCall(t, e, "DELETE", "alice", "")
		require.Equal(t, http.StatusOK, status)
		_ = rfb2.typeText("qq")
		_ = rfb2.pointer(0, 321, 123)
		requireClosedByServer(t, rfb2, 20*time.Second, "the released control connection")
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		_, st, err = dialRFB(ctx, wsURL(link2.URL))
		cancel()
		require.Error(t, err)
		require.Equal(t, http.StatusGone, st)

		final, _ := waitRun(t, e, id, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, "after release the run continues: %+v", final)
		var sawTakeover bool
		for _, tc := range final.ToolCalls {
			if tc.Tool == "request_takeover" {
				sawTakeover = tc.Success && strings.Contains(tc.Output, "handed the screen back")
			}
		}
		require.True(t, sawTakeover, "request_takeover returned after the release: %+v", final.ToolCalls)
		require.Equal(t, runs.StatusRunning, runs.Status(mustStatusAfterWaiting(t, sse)), "the run went back to running")
		x, y := pointerAt(t, c, botd, "alice")
		require.False(t, x == 321 && y == 123, "a pointer move after release reached the screen")
		require.NotContains(t, page.typed(), "zz")
		require.NotContains(t, page.typed(), "qq")

		// An idle bot: take and release work without a run.
		status, idle, _ := takeoverCall(t, e, "POST", "alice", "")
		require.Equal(t, http.StatusOK, status)
		require.True(t, idle.ExpiresAt.After(time.Now()))
		status, _, _ = takeoverCall(t, e, "DELETE", "alice", "")
		require.Equal(t, http.StatusOK, status)
	})

	t.Run("expired link", func(t *testing.T) {
		// A service with an eight-second link life over the same worker.
		tk := takeover.New(takeover.Options{Computers: e.w.Computers, Runs: e.w.Runs, Store: e.w.Store, TTL: 8 * time.Second})
		srv := httptest.NewServer(tk.Handler(""))
		defer srv.Close()
		tk.SetBase(srv.URL)
		link, err := tk.Take(context.Background(), e.computer, "bob", "")
		require.NoError(t, err)
		t.Cleanup(func() { _ = tk.Release(context.Background(), e.computer, "bob") })
		// One whole frame (a fresh screen may not have painted yet).
		ctx0, cancel0 := context.WithTimeout(context.Background(), 10*time.Second)
		rfb, st0, err := dialRFB(ctx0, wsURL(link.URL))
		cancel0()
		require.NoError(t, err, "HTTP %d", st0)
		require.NoError(t, rfb.handshake())
		_, err = rfb.fullFrame(10 * time.Second)
		require.NoError(t, err)
		// The open connection closes at expiry (botd's and the worker's
		// clocks both end it); a new dial is refused.
		requireClosedByServer(t, rfb, 30*time.Second, "the expiring control connection")
		require.False(t, time.Now().Before(link.ExpiresAt), "closed before its expiry")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, st, err := dialRFB(ctx, wsURL(link.URL))
		require.Error(t, err)
		require.Equal(t, http.StatusGone, st)
		// A forged link: 401.
		_, st, err = dialRFB(ctx, wsURL(srv.URL+takeover.Prefix+"eyJjIjoieCJ9.AAAA"))
		require.Error(t, err)
		require.Equal(t, http.StatusUnauthorized, st)
		require.NoError(t, tk.Release(context.Background(), e.computer, "bob"))
	})

	t.Run("execution lease", func(t *testing.T) {
		// The bot's execution lease held by a run this process does not
		// drive (another worker's on the same database; a team has one
		// computer, so no other computer of it can run bob). Busy as well,
		// until the lease is given back.
		ctx := t.Context()
		comp, err := e.w.Store.GetComputer(ctx, e.computer)
		require.NoError(t, err)
		l, err := e.w.Store.AcquireLease(ctx, computers.LeaseKey(comp, "bob"), "r_of_another_worker", time.Minute)
		require.NoError(t, err)
		status, _, msg := takeoverCall(t, e, "POST", "bob", "")
		require.Equal(t, http.StatusConflict, status)
		require.Equal(t, "Stop the bot first", msg)
		require.NoError(t, e.w.Store.ReleaseLease(ctx, l.Key, l.Epoch))
		status, _, _ = takeoverCall(t, e, "POST", "bob", "")
		require.Equal(t, http.StatusOK, status)
		status, _, _ = takeoverCall(t, e, "DELETE", "bob", "")
		require.Equal(t, http.StatusOK, status)
	})

	t.Run("resume ends the grant", func(t *testing.T) {
		phase.Store(3)
		id := e.startRun(t, "alice", "Ask a person to decide.")
		sse := followSSE(t, e, id)
		ev := sse.wait(t, "waiting_takeover", 2*time.Minute, func(ev sseEvent) bool {
			return ev.Type == "status" && ev.Data["status"] == string(runs.StatusWaitingTakeover)
		})
		link, _ := ev.Data["controlUrl"].(string)
		rfb := connectControl(t, link)
		require.Equal(t, http.StatusOK, e.do(t, "POST", "/runs/"+id+"/resume", nil, nil))
		requireClosedByServer(t, rfb, 20*time.Second, "resuming the run ends the person's control")
		final, _ := waitRun(t, e, id, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status)
		require.Len(t, final.ToolCalls, 2)
		require.True(t, final.ToolCalls[1].Success, "the run had its screen back: %s", final.ToolCalls[1].Output)
		require.False(t, e.w.People.Takeover.InControl(e.computer, "alice"))
	})

	// The same with the agent loop in the worker (issue 30): the run
	// contract is the runtime's too. This time the person releases.
	t.Run("request_takeover, worker runtime", func(t *testing.T) {
		phase.Store(3)
		id := e.startRunOn(t, "alice", "Ask a person to decide.", "worker")
		sse := followSSE(t, e, id)
		ev := sse.wait(t, "waiting_takeover", 2*time.Minute, func(ev sseEvent) bool {
			return ev.Type == "status" && ev.Data["status"] == string(runs.StatusWaitingTakeover)
		})
		require.Equal(t, "decide for me", ev.Data["reason"])
		link, _ := ev.Data["controlUrl"].(string)
		require.True(t, strings.HasPrefix(link, e.url+takeover.Prefix), "the event carries a worker control link, got %v", ev.Data)
		rfb := connectControl(t, link)
		require.NoError(t, rfb.pointer(0, 321, 123))
		waitFor(t, "the person's pointer to move", 30*time.Second, func() bool { x, y := pointerAt(t, c, botd, "alice"); return x == 321 && y == 123 })
		status, _, _ := takeoverCall(t, e, "DELETE", "alice", "")
		require.Equal(t, http.StatusOK, status)
		requireClosedByServer(t, rfb, 20*time.Second, "the release ends the person's control")
		final, _ := waitRun(t, e, id, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
		require.Equal(t, "worker", final.Runtime)
		require.Len(t, final.ToolCalls, 2)
		require.True(t, final.ToolCalls[1].Success, "the run had its screen back: %s", final.ToolCalls[1].Output)
		require.False(t, e.w.People.Takeover.InControl(e.computer, "alice"))
	})

	t.Run("botd events", func(t *testing.T) {
		phase.Store(2)
		// Its reconnects back off to 15 s, and a dial on a loaded host
		// takes seconds more (rehearsal 60 missed a 30 s bound).
		waitFor(t, "the worker following botd's events", 90*time.Second, func() bool { return e.w.People.Events.Connected(e.computer) })
		id := e.startRun(t, "alice", "Open the job page and wait.")
		sse := followSSE(t, e, id)
		// The page's application POST is blocked by botd's apply guard.
		blocked := sse.wait(t, "apply guard", 3*time.Minute, botdKind("apply_guard_blocked"))
		require.Contains(t, blocked.Data["url"], "/jobs/1/apply")
		require.Equal(t, "alice", blocked.Data["screen"])
		sse.wait(t, "waiting shell", 2*time.Minute, func(ev sseEvent) bool { return ev.Type == "tool_call" && ev.Data["tool"] == "shell" })

		// A person takes the screen at botd: the run hears it was preempted.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := botd.AcquireLease(ctx, "alice", "user", "someone", 30*time.Second)
		require.NoError(t, err)
		sse.wait(t, "preempted", time.Minute, botdKind("preempted"))
		require.NoError(t, botd.ReleaseLease(ctx, "alice", l.LeaseID))

		// The screen's Chromium dies.
		pids := chromiumPids(c.home, "alice")
		require.NotEmpty(t, pids, "alice's Chromium")
		for _, pid := range pids {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		}
		crashed := sse.wait(t, "browser crashed", time.Minute, botdKind("browser_crashed"))
		require.Equal(t, "alice", crashed.Data["screen"])

		writeBotFile(t, e, "alice", "bots/alice/go2")
		final, _ := waitRun(t, e, id, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status)
		page.mu.Lock()
		require.Zero(t, page.applied, "the application never reached the server")
		page.mu.Unlock()
		// They are stored with the run too (a later reader sees them).
		evs, err := e.w.Runs.StoredEvents(context.Background(), id)
		require.NoError(t, err)
		kinds := map[string]bool{}
		for _, ev := range evs {
			if ev.Type == events.RunEventBotd {
				var d map[string]any
				if raw, ok := ev.Data.(json.RawMessage); ok && json.Unmarshal(raw, &d) == nil {
					kinds[fmt.Sprint(d["kind"])] = true
				}
			}
		}
		require.True(t, kinds["apply_guard_blocked"] && kinds["preempted"] && kinds["browser_crashed"], "stored: %v", kinds)
	})
}

// requireClosedByServer: the server ends the connection within the time
// given, rather than the client's own read deadline expiring (which drain
// reports as an error too).
func requireClosedByServer(t testing.TB, c *rfbClient, within time.Duration, what string) {
	t.Helper()
	err := c.drain(within)
	require.Error(t, err)
	require.False(t, errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded),
		"%s: still open after %s (%v)", what, within, err)
}

// mustStatusAfterWaiting is the first status event after waiting_takeover.
func mustStatusAfterWaiting(t testing.TB, l *sseLog) string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := false
	for _, ev := range l.events {
		if ev.Type != "status" {
			continue
		}
		if seen {
			return fmt.Sprint(ev.Data["status"])
		}
		seen = ev.Data["status"] == string(runs.StatusWaitingTakeover)
	}
	t.Fatalf("no status after waiting_takeover: %v", l.events)
	return ""
}

// TestBotdEgressLossIntoRun: in tunnel mode, the egress agent going away
// and coming back reach the bot's live run as events (real botd, real
// egress agent, real Codex with the scripted model).
func TestBotdEgressLossIntoRun(t *testing.T) {
	script := func(outs []mockmodel.Output) mockmodel.Step {
		if len(outs) == 0 {
			return waitShell("bots/alice/go")
		}
		return mockmodel.Step{Message: "done"}
	}
	model := mockmodel.New(script).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	c := startComputer(t, modelSrv.URL, 476, "EGRESS_MODE=tunnel", "VIEW_PORT_BASE=23850")
	e := startWorker(t, c, "alice")
	botd := client.New(c.url, c.token, nil)

	agent := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = egressagent.Run(ctx, egressagent.Options{BotdURL: c.url, Token: c.token})
		}()
		return func() { cancel(); <-done }
	}
	tunnel := func(want bool) func() bool {
		return func() bool {
			h, err := botd.Health(context.Background())
			return err == nil && h.Egress.TunnelConnected == want && h.Egress.AgentOnline == want
		}
	}
	stop := agent()
	waitFor(t, "the tunnel up", 30*time.Second, tunnel(true))
	waitFor(t, "the worker following botd's events", 30*time.Second, func() bool { return e.w.People.Events.Connected(e.computer) })

	id := e.startRun(t, "alice", "Wait for the file.")
	sse := followSSE(t, e, id)
	sse.wait(t, "the waiting shell", 3*time.Minute, func(ev sseEvent) bool { return ev.Type == "tool_call" && ev.Data["tool"] == "shell" })

	stop()
	waitFor(t, "the tunnel down", 30*time.Second, tunnel(false))
	sse.wait(t, "egress lost", time.Minute, botdKind("egress_lost"))
	stop = agent()
	defer stop()
	sse.wait(t, "egress restored", time.Minute, botdKind("egress_restored"))

	writeBotFile(t, e, "alice", "bots/alice/go")
	final, _ := waitRun(t, e, id, 3*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status)
}

// typeUntil clicks the middle of the screen and types key until the page
// has seen it (up to ten tries: focus may take a moment to land).
func typeUntil(t testing.TB, c *rfbClient, p *keyPage, key string) {
	t.Helper()
	before := strings.Count(p.typed(), key)
	for try := 0; try < 10; try++ {
		require.NoError(t, c.pointer(1, c.W/2, c.H/2))
		require.NoError(t, c.pointer(0, c.W/2, c.H/2))
		require.NoError(t, c.typeText(key))
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if strings.Count(p.typed(), key) > before {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Fatalf("key %q never reached the page (typed: %q)", key, p.typed())
}

// pointerAt reads the X pointer of screen on the test botd's display with
// xdotool (as root, with the screen's X cookie).
func pointerAt(t testing.TB, c *computer, botd *client.Client, screen string) (int, int) {
	t.Helper()
	scs, err := botd.Screens(context.Background())
	require.NoError(t, err)
	for _, sc := range scs {
		if sc.ID != screen {
			continue
		}
		cmd := exec.Command("xdotool", "getmouselocation", "--shell")
		cmd.Env = append(os.Environ(), "DISPLAY="+sc.Display, fmt.Sprintf("XAUTHORITY=%s/desktop/.Xauthority-%d", c.home, sc.Slot))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "xdotool: %s", out)
		return mouseLocation(out)
	}
	t.Fatalf("no screen %s", screen)
	return 0, 0
}

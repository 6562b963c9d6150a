package main

// The control plane against a real botd (displays 400-419, ports
// 31000-31999): credentials and scopes, bots and their folders, the direct
// tools, one run per bot, MULTI_SCREEN_UNAVAILABLE with shell still
// working, and a worker SIGKILLed mid-run.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// toolResult is a direct tool call's answer.
type toolResult struct {
	Success bool `json:"success"`
	Content []struct {
		Type, Text, ImageURL string
	} `json:"content"`
}

func (r toolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func (e *workerEnv) tool(t testing.TB, bot, name string, args any) (int, toolResult) {
	t.Helper()
	var res toolResult
	st := e.do(t, "POST", "/tools/"+name, map[string]any{"botId": bot, "args": args}, &res)
	return st, res
}

// raw sends a request with the given credentials and returns status and body.
func raw(t testing.TB, method, url, token, capa string, body any) (int, string) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, url, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if capa != "" {
		req.Header.Set("X-Computer-Capability", capa)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String()
}

// hangingModel observes once, then "thinks" until the test ends: the
// first hangs requests after an observation hang (-1: all of them); later
// ones answer "resumed and done".
func hangingModel(t testing.TB, hangs ...int) (*mockmodel.Server, string) {
	hang := make(chan struct{})
	left := -1
	if len(hangs) > 0 {
		left = hangs[0]
	}
	var mu sync.Mutex
	model := mockmodel.New(func(outs []mockmodel.Output) mockmodel.Step {
		if len(outs) == 0 {
			return mockmodel.Step{Tool: "computer_observe", Args: map[string]any{}}
		}
		mu.Lock()
		wait := left != 0
		if left > 0 {
			left--
		}
		mu.Unlock()
		if wait {
			<-hang
		}
		return mockmodel.Step{Message: "resumed and done"}
	})
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) }) // runs before srv.Close
	return model, srv.URL
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestControlPlaneAgainstBotd runs on each store engine (a fresh botd each).
func TestControlPlaneAgainstBotd(t *testing.T) { eachStore(t, controlPlaneAgainstBotd) }

func controlPlaneAgainstBotd(t *testing.T, dbURL string) {
	model, modelURL := hangingModel(t)
	// One screen only: a second bot's graphical tools must fail while shell works.
	c := startComputerWith(t, scripted(modelURL), 400, "MAX_SCREENS=1", "VIEW_PORT_BASE=31100",
		"EGRESS_ALLOW=127.0.0.1/32") // the test page is on loopback, which egress refuses by default
	env := startWorkerWith(t, c, "scripted-model", withDatabase(dbURL), "alice", "bob")
	requirePostgresUsed(t, env, dbURL)

	// --- credentials ---------------------------------------------------------
	st, body := raw(t, "GET", env.url+"/v1/computers", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, st)
	st, _ = raw(t, "GET", env.url+"/v1/tools", "wrong-token-0123456789", "", nil)
	require.Equal(t, http.StatusUnauthorized, st)
	st, body = raw(t, "GET", env.url+"/v1/computers", env.token, "", nil)
	require.Equal(t, http.StatusOK, st)
	require.Contains(t, body, env.computer)
	require.NotContains(t, body, env.capa, "a listing never carries a capability")
	require.NotContains(t, body, c.token, "nor the botd token")
	// Without, with a wrong, with another computer's capability: 404 alike.
	other := startWorkerOnSame(t, env, c)
	for _, capa := range []string{"", "x", other} {
		st, body = raw(t, "GET", env.url+"/v1/computers/"+env.computer, env.token, capa, nil)
		require.Equal(t, http.StatusNotFound, st, "capability %q", capa)
		require.Contains(t, body, "no such computer")
	}
	st, _ = raw(t, "GET", env.url+"/v1/computers/..%2F..%2Fetc", env.token, env.capa, nil)
	require.Equal(t, http.StatusNotFound, st, "malformed id")
	st, _ = raw(t, "GET", env.url+"/v1/computers/c_0000000000000000", env.token, env.capa, nil)
	require.Equal(t, http.StatusNotFound, st, "unknown id")
	var got struct {
		Computer struct {
			ID   string `json:"id"`
			Bots []struct{ ID, Dir, Screen string }
		} `json:"computer"`
	}
	require.Equal(t, http.StatusOK, env.do(t, "GET", "", nil, &got))
	require.Len(t, got.Computer.Bots, 2)
	require.Equal(t, "bots/alice", got.Computer.Bots[0].Dir)
	require.Equal(t, "alice", got.Computer.Bots[0].Screen)

	// adopt (the operator's): a new capability; the old one stops working.
	var adopted struct{ Capability string }
	st, body = raw(t, "POST", env.url+"/v1/computers/"+env.computer+"/adopt", env.op, "", nil)
	require.Equal(t, http.StatusOK, st)
	require.NoError(t, json.Unmarshal([]byte(body), &adopted))
	old := env.capa
	env.capa = adopted.Capability
	st, _ = raw(t, "GET", env.url+"/v1/computers/"+env.computer, env.token, old, nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, http.StatusOK, env.do(t, "GET", "", nil, nil))

	// --- bots and their folders ---------------------------------------------
	botUser, err := user.Lookup("bot")
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(c.home, "bot/bots/alice"))
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|os.ModeSetgid|0o775, fi.Mode()&(os.ModeDir|os.ModeSetgid|os.ModePerm), "bots/alice is 2775")
	require.Equal(t, botUser.Uid, strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)), "bots/alice is bot-owned")
	require.Equal(t, http.StatusConflict, env.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	require.Equal(t, http.StatusBadRequest, env.do(t, "POST", "/bots", map[string]string{"id": "../x"}, nil))

	// --- the tool list and direct tools --------------------------------------
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	st, body = raw(t, "GET", env.url+"/v1/tools", env.token, "", nil)
	require.Equal(t, http.StatusOK, st)
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	var names []string
	for _, x := range list.Tools {
		names = append(names, x.Name)
	}
	require.Equal(t, []string{"computer_observe", "computer_act", "computer_windows", "clipboard_read", "clipboard_write", "open_path", "launch_app", "browser_read_page", "type_secret", "shell", "file_read", "file_write", "file_list"}, names)

	st, res := env.tool(t, "alice", "shell", map[string]any{"argv": []string{"true"}})
	require.Equal(t, http.StatusOK, st, res.text())
	require.True(t, res.Success)
	st, res = env.tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/notes.md", "content": "hello from alice\n"})
	require.Equal(t, http.StatusOK, st, res.text())
	st, res = env.tool(t, "alice", "file_read", map[string]any{"path": "bots/alice/notes.md"})
	require.Equal(t, http.StatusOK, st, res.text())
	require.Equal(t, "hello from alice\n", res.text())
	st, res = env.tool(t, "alice", "file_list", map[string]any{"path": "bots/alice"})
	require.Equal(t, http.StatusOK, st, res.text())
	require.Contains(t, res.text(), "notes.md")
	st, res = env.tool(t, "alice", "file_read", map[string]any{"path": "../../etc/shadow"})
	require.False(t, res.Success)
	require.NotEqual(t, http.StatusOK, st)

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>control plane page</title><body><p>the quick brown fox</p></body>`)
	}))
	defer page.Close()
	st, res = env.tool(t, "alice", "open_path", map[string]any{"target": page.URL + "/"})
	require.Equal(t, http.StatusOK, st, res.text())
	waitFor(t, "the page in alice's browser", time.Minute, func() bool {
		_, res = env.tool(t, "alice", "browser_read_page", map[string]any{})
		return res.Success && strings.Contains(res.text(), "control plane page")
	})
	require.Contains(t, res.text(), "the quick brown fox")
	st, res = env.tool(t, "alice", "launch_app", map[string]any{"app": "terminal"})
	require.Equal(t, http.StatusOK, st, res.text())
	require.True(t, res.Success)
	st, res = env.tool(t, "alice", "launch_app", map[string]any{"app": "rm -rf /"})
	require.False(t, res.Success)

	// Screen outside the bot's namespace; a bot not on the computer.
	st, res = env.tool(t, "alice", "computer_observe", map[string]any{"screen": "bob"})
	require.Equal(t, http.StatusForbidden, st)
	require.Contains(t, res.text(), "not yours")
	st, _ = env.tool(t, "mallory", "shell", map[string]any{"argv": []string{"true"}})
	require.Equal(t, http.StatusNotFound, st)
	st, _ = env.tool(t, "alice", "no_such_tool", map[string]any{})
	require.Equal(t, http.StatusNotFound, st)

	// --- runs: one per bot ----------------------------------------------------
	big := strings.Repeat("x", runs.MaxPrompt+1)
	require.Equal(t, http.StatusRequestEntityTooLarge, env.do(t, "POST", "/runs", map[string]string{"botId": "alice", "prompt": big}, nil))
	require.Equal(t, http.StatusNotFound, env.do(t, "POST", "/runs", map[string]string{"botId": "mallory", "prompt": "go"}, nil))
	runID := env.startRun(t, "alice", "look at the screen")
	require.Equal(t, http.StatusConflict, env.do(t, "POST", "/runs", map[string]string{"botId": "alice", "prompt": "again"}, nil), "a second run for a busy bot")
	waitFor(t, "alice's run to take her screen", 3*time.Minute, func() bool {
		s := env.getRun(t, runID)
		return len(s.ToolCalls) >= 1 && model.Requests() >= 2
	})
	snap := env.getRun(t, runID)
	require.True(t, snap.ToolCalls[0].Success, snap.ToolCalls[0].Output)
	require.Equal(t, runs.StatusRunning, snap.Status)

	var withScreens struct {
		Computer struct {
			Screens []struct {
				ID    string
				Lease *struct{ Kind, Holder string }
			}
		} `json:"computer"`
	}
	require.Equal(t, http.StatusOK, env.do(t, "GET", "", nil, &withScreens))
	require.Len(t, withScreens.Computer.Screens, 1)
	require.Equal(t, "alice", withScreens.Computer.Screens[0].ID)
	require.Equal(t, "run-"+runID, withScreens.Computer.Screens[0].Lease.Holder)

	// The one screen is alice's: bob's graphical tools fail, his shell works.
	st, res = env.tool(t, "bob", "computer_observe", map[string]any{})
	require.False(t, res.Success)
	require.Contains(t, res.text(), "MULTI_SCREEN_UNAVAILABLE")
	require.Equal(t, http.StatusConflict, st)
	st, res = env.tool(t, "bob", "shell", map[string]any{"argv": []string{"sh", "-c", "echo bob works > bots/bob/out.txt && cat bots/bob/out.txt"}})
	require.Equal(t, http.StatusOK, st, res.text())
	require.Contains(t, res.text(), "bob works")

	// Resume of a run that is not waiting is a conflict; stop ends it and
	// frees the bot.
	require.Equal(t, http.StatusConflict, env.do(t, "POST", "/runs/"+runID+"/resume", nil, nil))
	var stopped struct{ Run runs.Snapshot }
	require.Equal(t, http.StatusOK, env.do(t, "POST", "/runs/"+runID+"/stop", nil, &stopped))
	require.Equal(t, runs.StatusStopped, stopped.Run.Status)
	final, events := waitRun(t, env, runID, time.Minute)
	require.Equal(t, runs.StatusStopped, final.Status)
	require.Contains(t, events, "tool_result")
	require.Equal(t, http.StatusNotFound, env.do(t, "GET", "/runs/nope", nil, nil))
}

// startWorkerOnSame creates a second computer (same botd) and returns its
// capability: it must not open the first.
func startWorkerOnSame(t testing.TB, env *workerEnv, c *computer) string {
	t.Helper()
	var created struct {
		Capability string `json:"capability"`
	}
	require.Equal(t, http.StatusCreated, post(t, env.url+"/v1/computers", env.op, map[string]any{
		"scope": map[string]string{"session": "s2"}, "kind": "private", "provider": "attach",
		"attach": map[string]string{"url": c.url, "token": c.token}}, &created))
	return created.Capability
}

// TestWorkerKilledMidRun: a worker process SIGKILLed while two Team bots'
// runs are mid-turn, then started again on the same DATA_DIR: each run's
// Codex thread is resumed (the orphaned turn interrupted, a new turn
// started) and completes; nothing is left running; the dead process's screen
// leases are given back; the old capability no longer works (adopt mints a
// new one). It runs on each store engine (WORKER_DATABASE_URL for Postgres).
func TestWorkerKilledMidRun(t *testing.T) { eachStore(t, workerKilledMidRun) }

func workerKilledMidRun(t *testing.T, dbURL string) {
	model, modelURL := hangingModel(t, 2) // the two turns the kill interrupts
	// Each store's variant has displays and view ports of its own, so the
	// second never waits on the first's X servers to exit. (The view ports
	// stay clear of the vnc package's 31600+.)
	display, viewBase := 402, "VIEW_PORT_BASE=31300"
	if dbURL != "" {
		display, viewBase = 492, "VIEW_PORT_BASE=31350"
	}
	c := startComputerWith(t, scripted(modelURL), display, viewBase)
	dir := t.TempDir()
	bin := goBuilt(t, workerPkg)
	dataDir := filepath.Join(dir, "data")
	listen := "127.0.0.1:31400"
	token := "worker-token-killed-0123456789"
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(), "DATA_DIR="+dataDir, "WORKER_MACHINES_DIR="+filepath.Join(dataDir, "machines"), "WORKER_LISTEN="+listen, "WORKER_TOKEN="+token,
			"WORKER_MODEL=scripted-model", "WORKER_MODEL_PROVIDER=botd", "WORKER_PROVIDER=attach",
			"MODEL_UPSTREAM_URL="+modelURL+"/v1", "MODEL_API_KEY="+scriptedKey, // alice's worker runtime
			"WORKER_DATABASE_URL="+dbURL) // "": SQLite in DATA_DIR
		var logs syncBuffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("worker logs:\n%s", tail(logs.String(), 40))
			}
		})
		waitFor(t, "the worker to listen", 30*time.Second, func() bool {
			resp, err := http.Get("http://" + listen + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		})
		return cmd
	}
	w1 := start()
	env := &workerEnv{url: "http://" + listen, token: token, dataDir: dataDir}
	_, err := os.Stat(filepath.Join(dataDir, "worker.db"))
	require.Equal(t, dbURL == "", err == nil, "the worker keeps its state in SQLite only without WORKER_DATABASE_URL (%v)", err)
	// The operator's CLI on the worker's host: no token at all, the
	// operator socket in DATA_DIR (the attach token file is read by the
	// CLI and sent by value).
	opCLI := func(args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "WORKER_URL="+env.url, "DATA_DIR="+dataDir, "WORKER_TOKEN=", "WORKER_TOKEN_FILE=",
			"WORKER_OPERATOR_TOKEN=", "WORKER_OPERATOR_TOKEN_FILE=")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "worker %v: %s", args, out)
		return string(out)
	}
	tokFile := filepath.Join(dir, "botd-token")
	require.NoError(t, os.WriteFile(tokFile, []byte(c.token+"\n"), 0o600))
	var created struct {
		Computer   struct{ ID string } `json:"computer"`
		Capability string              `json:"capability"`
	}
	require.NoError(t, json.Unmarshal([]byte(opCLI("computers", "create", "--json", "--team", "t1", "--provider", "attach",
		"--attach-url", c.url, "--attach-token-file", tokFile)), &created))
	require.NotEmpty(t, created.Capability)
	env.computer, env.capa = created.Computer.ID, created.Capability
	require.Equal(t, http.StatusCreated, env.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	require.Equal(t, http.StatusCreated, env.do(t, "POST", "/bots", map[string]string{"id": "bob"}, nil))
	// Two Team bots work at once, each on its own screen: alice's agent
	// loop in the worker (issue 30), bob's Codex in the machine.
	runID := env.startRunOn(t, "alice", "look", "worker")
	bobRun := env.startRun(t, "bob", "look")
	waitFor(t, "both runs to be mid-turn", 3*time.Minute, func() bool {
		a, b := env.getRun(t, runID), env.getRun(t, bobRun)
		return len(a.ToolCalls) >= 1 && len(b.ToolCalls) >= 1 && model.Requests() >= 4
	})
	for _, id := range []string{runID, bobRun} {
		s := env.getRun(t, id)
		require.Equal(t, runs.StatusRunning, s.Status)
		require.True(t, s.ToolCalls[0].Success, "%s: %s", s.BotID, s.ToolCalls[0].Output)
	}
	var screens struct {
		Screens []struct {
			ID    string `json:"id"`
			Lease *struct {
				Kind string `json:"kind"`
			} `json:"lease"`
		} `json:"screens"`
	}
	getJSON(t, c.url+"/screens", c.token, &screens)
	leased := map[string]bool{}
	for _, sc := range screens.Screens {
		leased[sc.ID] = sc.Lease != nil
	}
	require.Equal(t, map[string]bool{"alice": true, "bob": true}, leased, "two distinct screens, both held")
	require.NoError(t, w1.Process.Signal(syscall.SIGKILL))
	_ = w1.Wait()

	start() // over the killed worker's stale operator socket
	// The capability died with the process.
	st, _ := raw(t, "GET", env.url+"/v1/computers/"+env.computer, token, env.capa, nil)
	require.Equal(t, http.StatusNotFound, st)
	st, _ = raw(t, "POST", env.url+"/v1/computers/"+env.computer+"/adopt", token, "", nil)
	require.Equal(t, http.StatusForbidden, st, "adopt is the operator's, not WORKER_TOKEN's")
	var adopted struct{ Capability string }
	require.NoError(t, json.Unmarshal([]byte(opCLI("computers", "adopt", "--json", env.computer)), &adopted))
	require.NotEmpty(t, adopted.Capability)
	env.capa = adopted.Capability
	// The dashboard link, through the socket, is on the worker's address.
	require.Regexp(t, `(?m)^http://`+listen+`/dashboard/login\?code=\S+$`, opCLI("dashboard"))
	for _, id := range []string{runID, bobRun} {
		final, events := waitRun(t, env, id, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, "run %s: %s", id, final.Error)
		require.Equal(t, "resumed and done", final.Message)
		require.Contains(t, events, "resumed")
		require.True(t, final.ToolCalls[0].Success, "the events recorded before the kill survive")
		if id == runID {
			// The worker's loop continues its conversation from the
			// recorded calls (the model is told the worker restarted): its
			// look before the kill is given back, not made again, and the
			// model finished.
			require.Equal(t, "worker", final.Runtime)
			require.Len(t, final.ToolCalls, 1, "the recorded look is not made again")
			continue
		}
		require.Len(t, final.ToolCalls, 1, "the events recorded before the kill survive")
	}
	var comp struct {
		Computer struct{ State string } `json:"computer"`
	}
	waitFor(t, "the computer to be reconciled", time.Minute, func() bool {
		env.do(t, "GET", "", nil, &comp)
		return comp.Computer.State == "running"
	})
	// The dead runs' screen leases are given back (well before botd's
	// 120 s lease TTL would have freed them).
	waitFor(t, "the dead runs' screen leases to be released", 60*time.Second, func() bool {
		var now struct {
			Screens []struct {
				Lease *struct{ Holder string } `json:"lease"`
			} `json:"screens"`
		}
		getJSON(t, c.url+"/screens", c.token, &now)
		for _, sc := range now.Screens {
			if sc.Lease != nil {
				return false
			}
		}
		return true
	})
	// The bot is free again.
	run2 := env.startRun(t, "alice", "again")
	require.Equal(t, http.StatusOK, env.do(t, "POST", "/runs/"+run2+"/stop", nil, nil))

	// The CLI people use says the same, readable or as JSON.
	cli := func(args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "WORKER_URL="+env.url, "WORKER_TOKEN="+token, "WORKER_CAPABILITY="+env.capa)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "worker %v: %s", args, out)
		return string(out)
	}
	out := []byte(cli("computers", "list"))
	require.Regexp(t, env.computer+`\s+team\s+attach\s+team:t1\s+running`, string(out))
	require.NotContains(t, string(out), env.capa)
	var listed struct {
		Computers []struct{ ID, State string } `json:"computers"`
	}
	require.NoError(t, json.Unmarshal([]byte(cli("computers", "list", "--json")), &listed))
	require.Equal(t, env.computer, listed.Computers[0].ID)
	watched := cli("runs", "watch", "--computer", env.computer, runID)
	require.Contains(t, watched, "run ended: completed")
	require.Contains(t, watched, "resumed")
	require.Contains(t, cli("runs", "stop", "--computer", env.computer, run2), "is stopped")
	bad := exec.Command(bin, "runs", "start", "--computer", env.computer, "--bot", "alice", "--prompt", "")
	bad.Env = append(os.Environ(), "WORKER_URL="+env.url, "WORKER_TOKEN="+token, "WORKER_CAPABILITY=wrong")
	out, err = bad.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "no such computer (404 not_found)")
}

package main

// The worker's flows on both store engines, and what the store decides as
// seen through the API: the run, fencing, restart and takeover flows run
// once on SQLite in DATA_DIR and once on Postgres (WORKER_DATABASE_URL, a
// schema of its own per test); per-bot leases across computers of one team,
// of another team and of the account; a run fenced by another holder of
// its bot's lease; and the checkpoints taken at a run's failure and before
// an explicit stop.

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
)

// workerStore is one engine a test's worker keeps its state in: url gives
// the WORKER_DATABASE_URL for a test ("" is SQLite in DATA_DIR).
type workerStore struct {
	name string
	url  func(t testing.TB) string
}

// workerStores is every engine the worker's flows run on. The Postgres one
// comes from WORKER_TEST_DATABASE_URL (scripts/postgres.sh prints it; .ci/run
// sets it); without it that variant skips, and fails under CI=true.
func workerStores() []workerStore {
	return []workerStore{
		{"sqlite", func(testing.TB) string { return "" }},
		{"postgres", testDatabaseURL},
	}
}

// eachStore runs fn as a subtest on every engine with the database URL the
// worker is to use.
func eachStore(t *testing.T, fn func(t *testing.T, dbURL string)) {
	for _, s := range workerStores() {
		t.Run(s.name, func(t *testing.T) { fn(t, s.url(t)) })
	}
}

// withDatabase is a serve-config tweak that puts the worker on dbURL
// (nil for SQLite).
func withDatabase(dbURL string) func(*serveConfig) {
	if dbURL == "" {
		return nil
	}
	return func(c *serveConfig) { c.DatabaseURL = dbURL }
}

// testDatabaseURL gives the test an empty schema of its own on the CI
// Postgres (dropped at the end, after the worker has closed) and returns a
// URL whose search_path is that schema: tests never see each other's rows.
func testDatabaseURL(t testing.TB) string {
	t.Helper()
	return storetest.SchemaURL(t, storetest.DSN(t), "w_")
}

// requirePostgresUsed checks that a worker meant for Postgres really keeps
// its state there (and not in a SQLite file in DATA_DIR).
func requirePostgresUsed(t testing.TB, e *workerEnv, dbURL string) {
	t.Helper()
	if dbURL == "" {
		require.Equal(t, "sqlite", e.w.Store.Engine())
		return
	}
	require.Equal(t, "postgres", e.w.Store.Engine())
	_, err := os.Stat(filepath.Join(e.dataDir, "worker.db"))
	require.True(t, errors.Is(err, os.ErrNotExist), "no SQLite file beside a Postgres store: %v", err)
}

// addComputer attaches (as the operator, the botd token by value) another
// computer on e's worker for botd c, with scope (e.g. {"team": "t2"},
// {"account": true}), and adds bots to it.
func (e *workerEnv) addComputer(t testing.TB, c *computer, scope map[string]any, bots ...string) *workerEnv {
	t.Helper()
	var created struct {
		Computer struct {
			ID, State string
		} `json:"computer"`
		Capability string `json:"capability"`
	}
	require.Equal(t, http.StatusCreated, post(t, e.url+"/v1/computers", e.op, map[string]any{
		"scope": scope, "provider": "attach", "attach": map[string]string{"url": c.url, "token": c.token}}, &created))
	require.Equal(t, "running", created.Computer.State)
	o := *e
	o.computer, o.capa = created.Computer.ID, created.Capability
	for _, b := range bots {
		require.Equal(t, http.StatusCreated, o.do(t, "POST", "/bots", map[string]string{"id": b}, nil))
	}
	return &o
}

// tryCreate asks e's worker for another attach computer on botd c with
// scope (and kind, "" for the default), and returns the status, the
// computer's id (the new one, or the scope's live one a 409 names) and the
// body.
func (e *workerEnv) tryCreate(t testing.TB, c *computer, scope map[string]any, kind string) (int, string, string) {
	t.Helper()
	req := map[string]any{"scope": scope, "provider": "attach", "attach": map[string]string{"url": c.url, "token": c.token}}
	if kind != "" {
		req["kind"] = kind
	}
	st, body := raw(t, "POST", e.url+"/v1/computers", e.op, "", req)
	var out struct {
		Computer struct{ ID string } `json:"computer"`
		Error    struct {
			ComputerID string `json:"computerId"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out), body)
	if out.Computer.ID != "" {
		return st, out.Computer.ID, body
	}
	return st, out.Error.ComputerID, body
}

// tryRun asks for a run of bot and returns the status and the run's id
// (when one was made) or the error's message.
func (e *workerEnv) tryRun(t testing.TB, bot string) (int, string) {
	t.Helper()
	var out struct {
		Run   runs.Snapshot `json:"run"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	st := e.do(t, "POST", "/runs", map[string]string{"botId": bot, "prompt": "look at the screen"}, &out)
	if out.Run.ID != "" {
		return st, out.Run.ID
	}
	return st, out.Error.Message
}

// stopRun stops a run and waits for its end (its lease is given back
// before the end event).
func (e *workerEnv) stopRun(t testing.TB, id string) {
	t.Helper()
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/runs/"+id+"/stop", nil, nil))
	final, _ := waitRun(t, e, id, 2*time.Minute)
	require.Equal(t, runs.StatusStopped, final.Status)
}

// TestBotLeaseScopes: one bot id on computers of one botd — team t1's,
// team t2's, the account's and a session's. A team, the account and a
// session each have one computer: a second create for t1 or for the
// account or session is 409 naming the first (never a capability). Bot
// alice runs at once on t1's, t2's and the account's computer (another
// scope's alice is another bot), while a second
// run of t1's alice is refused (409) until the first ends. Everything is
// observed through the API.
func TestBotLeaseScopes(t *testing.T) {
	_, modelURL := hangingModel(t) // runs stay mid-turn until stopped
	c := startComputerWith(t, scripted(modelURL), 406, "VIEW_PORT_BASE=31900")
	eachStore(t, func(t *testing.T, dbURL string) {
		t1 := startWorkerWith(t, c, "scripted-model", withDatabase(dbURL), "alice")
		requirePostgresUsed(t, t1, dbURL)
		t2 := t1.addComputer(t, c, map[string]any{"team": "t2", "share": true}, "alice")
		acct := t1.addComputer(t, c, map[string]any{"account": true}, "alice")
		sess := t1.addComputer(t, c, map[string]any{"session": "s1"}, "alice")
		for _, tc := range []struct {
			scope map[string]any
			want  *workerEnv
		}{{map[string]any{"team": "t1", "share": true}, t1}, {map[string]any{"account": true}, acct}, {map[string]any{"session": "s1"}, sess}} {
			st, id, body := t1.tryCreate(t, c, tc.scope, "")
			require.Equal(t, http.StatusConflict, st, "a second computer of %v: %s", tc.scope, body)
			require.Equal(t, tc.want.computer, id, body)
			require.NotContains(t, body, tc.want.capa)
			require.NotContains(t, body, `"capability"`)
		}
		var found struct {
			Computers []struct{ ID string } `json:"computers"`
		}
		getJSON(t, t1.url+"/v1/computers?scope=team:t1", t1.token, &found)
		require.Len(t, found.Computers, 1)
		require.Equal(t, t1.computer, found.Computers[0].ID)

		var started []struct {
			e  *workerEnv
			id string
		}
		for _, e := range []*workerEnv{t1, t2, acct} {
			st, id := e.tryRun(t, "alice")
			require.Equal(t, http.StatusCreated, st, "each scope's alice is its own bot: %s", id)
			started = append(started, struct {
				e  *workerEnv
				id string
			}{e, id})
		}
		st, msg := t1.tryRun(t, "alice")
		require.Equal(t, http.StatusConflict, st, "t1's alice runs already: %s", msg)
		require.Contains(t, msg, "already has a computer-use run")
		// The refusal made nothing, and the runs that were made still live.
		for _, r := range started {
			require.False(t, r.e.getRun(t, r.id).Status.Ended(), "run %s ended early", r.id)
		}
		// Once t1's run ends, its alice runs again.
		t1.stopRun(t, started[0].id)
		st, again := t1.tryRun(t, "alice")
		require.Equal(t, http.StatusCreated, st, again)
		t1.stopRun(t, again)
		for _, r := range started[1:] {
			r.e.stopRun(t, r.id)
		}
	})
}

// TestRunFencedThroughWorker: while a run waits in a shell step, another
// holder takes its bot's lease (as a restarted worker does: the same run,
// a new epoch). The old run's next write is refused: its shell result is
// not recorded, it cannot complete itself, the model's next tool call is
// not carried out, and it does not give away the lease it lost (the bot
// stays busy until the new holder lets go).
func TestRunFencedThroughWorker(t *testing.T) {
	eachStore(t, func(t *testing.T, dbURL string) {
		var later atomic.Bool // the run after the fence only answers
		script := func(outs []mockmodel.Output) mockmodel.Step {
			switch {
			case later.Load():
			case len(outs) == 0:
				return waitShell("bots/alice/go")
			case len(outs) == 1:
				return mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": "bots/alice/after-fence.txt", "content": "a fenced run acted\n"}}
			}
			return mockmodel.Step{Message: "done"}
		}
		model := mockmodel.New(script).RequireKey(scriptedKey)
		modelSrv := httptest.NewServer(model)
		defer modelSrv.Close()
		c := startComputer(t, modelSrv.URL, 408, "VIEW_PORT_BASE=31950")
		e := startWorkerWith(t, c, "scripted-model", withDatabase(dbURL), "alice")
		requirePostgresUsed(t, e, dbURL)
		ctx := t.Context()

		id := e.startRun(t, "alice", "Wait for the file, then write a note.")
		sse := followSSE(t, e, id)
		sse.wait(t, "the waiting shell", 3*time.Minute, func(ev sseEvent) bool { return ev.Type == "tool_call" && ev.Data["tool"] == "shell" })
		before, err := e.w.Store.GetRun(ctx, id)
		require.NoError(t, err)
		taken, err := e.w.Store.AcquireLease(ctx, before.LeaseKey, id, time.Minute)
		require.NoError(t, err)
		require.Greater(t, taken.Epoch, before.Epoch)

		writeBotFile(t, e, "alice", "bots/alice/go")
		waitRun(t, e, id, 3*time.Minute)

		after, err := e.w.Store.GetRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, string(runs.StatusRunning), after.State, "the fenced run could not record an outcome")
		evs, err := e.w.Runs.StoredEvents(ctx, id)
		require.NoError(t, err)
		var types []string
		for _, ev := range evs {
			types = append(types, ev.Type)
		}
		require.Contains(t, types, "tool_call", "what it did before the fence is kept")
		require.NotContains(t, types, "tool_result", "the shell's result came after the fence: %v", types)
		require.NotContains(t, types, "checkpoint")
		_, err = os.Stat(filepath.Join(c.home, "bot/bots/alice/after-fence.txt"))
		require.True(t, errors.Is(err, os.ErrNotExist), "a tool call after the fence was carried out (%v)", err)

		// The lease is the new holder's: the bot is busy until it lets go.
		st, msg := e.tryRun(t, "alice")
		require.Equal(t, http.StatusConflict, st, "the fenced run gave away a lease it no longer held: %s", msg)
		require.NoError(t, e.w.Store.ReleaseLease(ctx, taken.Key, taken.Epoch))
		later.Store(true)
		st, next := e.tryRun(t, "alice")
		require.Equal(t, http.StatusCreated, st, next)
		final, _ := waitRun(t, e, next, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, "the bot runs again: %+v", final)
	})
}

// failingModel serves the scripted model's first answer (first) and
// refuses every later request with 400, so the run's turn fails.
func failingModel(t testing.TB, first mockmodel.Step) *httptest.Server {
	model := mockmodel.New(func([]mockmodel.Output) mockmodel.Step { return first }).RequireKey(scriptedKey)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/responses" && n.Add(1) > 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"scripted refusal: the model cannot go on","type":"invalid_request_error","code":"scripted"}}`)
			return
		}
		model.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// checkpointFile reads name from the computer's latest checkpoint in the
// worker's local home store: its revision and the file's content ("" and
// false when the tar has no such file).
func checkpointFile(t testing.TB, e *workerEnv, name string) (int64, string, bool) {
	t.Helper()
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	hs, err := homes.NewLocal(e.dataDir)
	require.NoError(t, err)
	rc, rev, err := hs.Open(t.Context(), c.HomeKey)
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return rev.Number, "", false
		}
		require.NoError(t, err)
		if strings.HasSuffix(h.Name, name) {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			return rev.Number, string(b), true
		}
	}
}

// lastCheckpoint is the revision GET /v1/computers/{id} shows (0: none).
func lastCheckpoint(t testing.TB, e *workerEnv) int64 {
	t.Helper()
	var got struct {
		Computer struct {
			LastCheckpoint *struct{ Revision int64 } `json:"lastCheckpoint"`
		} `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "GET", "", nil, &got))
	if got.Computer.LastCheckpoint == nil {
		return 0
	}
	return got.Computer.LastCheckpoint.Revision
}

// TestCheckpointsAtRunFailureAndBeforeStop: on a computer the worker made
// (local provider, whose machine uses a worker-owned home), a run writes a
// file and then fails (the model refuses to go on): the run's end
// checkpoints, advancing the home's revision marker; the file is in the
// worker-owned home and nothing was exported. Then a file written
// afterwards is there when an explicit stop has checkpointed (the marker
// advanced again) and stopped the machine.
func TestCheckpointsAtRunFailureAndBeforeStop(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	const bot = "bob"
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	modelSrv := failingModel(t, mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": "bots/" + bot + "/failed-run.txt", "content": "written by the failing run " + nonce + "\n"}})
	dir := openDir(t, "wire-cpfail-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	start := lastCheckpoint(t, e)

	// A run that fails: its end checkpoints what it wrote.
	id := e.startRun(t, bot, "Write the file, then go on.")
	final, events := waitRun(t, e, id, 5*time.Minute)
	require.Equal(t, runs.StatusFailed, final.Status, "run: %+v", final)
	require.Len(t, final.ToolCalls, 1)
	require.True(t, final.ToolCalls[0].Success, final.ToolCalls[0].Output)
	require.Contains(t, events, "checkpoint", "the failed run's end checkpointed: %v", events)
	atFailure := lastCheckpoint(t, e)
	require.Greater(t, atFailure, start, "the checkpoint revision advanced at the failure")
	noTar(t, e)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	home := e.w.Computers.HomeDir(c, c.Provider)
	content, err := os.ReadFile(filepath.Join(home, "bot", "bots", bot, "failed-run.txt"))
	require.NoError(t, err, "the failed run's file is in the worker-owned home")
	require.Equal(t, "written by the failing run "+nonce+"\n", string(content))

	// An explicit stop checkpoints before the machine stops: a file written
	// after the run's checkpoint is in the new one.
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_write", map[string]any{"botId": bot,
		"args": map[string]string{"path": "bots/" + bot + "/before-stop.txt", "content": "written before the stop " + nonce + "\n"}}, nil))
	var stopped struct {
		Computer struct{ State, LastError string } `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/stop", nil, &stopped))
	require.Equal(t, store.StateStopped, stopped.Computer.State, stopped.Computer.LastError)
	require.Empty(t, stopped.Computer.LastError, "the checkpoint before the stop did not fail")
	atStop := lastCheckpoint(t, e)
	require.Greater(t, atStop, atFailure, "the stop checkpointed first")
	noTar(t, e)
	content, err = os.ReadFile(filepath.Join(home, "bot", "bots", bot, "before-stop.txt"))
	require.NoError(t, err, "the file written before the stop is in the worker-owned home")
	require.Equal(t, "written before the stop "+nonce+"\n", string(content))
}

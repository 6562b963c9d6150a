package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/group"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
)

// groupWorker is one `worker serve` process of a test's worker group, on
// the group's Postgres through a proxy of its own that the test can cut.
type groupWorker struct {
	name, url, groupURL, metricsURL string
	cmd                             *exec.Cmd
	proxy                           *storetest.CutProxy
	logs                            *syncBuffer
}

// groupSetup is what the members of one test group share.
type groupSetup struct {
	bin, dbURL, token, op, groupToken string
	key                               []byte
	env                               map[string]string
}

// newGroupSetup builds the worker and makes the group's schema, tokens and
// shared secret key (every member unseals the same secrets).
func newGroupSetup(t testing.TB, env map[string]string) *groupSetup {
	t.Helper()
	bin := goBuilt(t, workerPkg)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &groupSetup{bin: bin, dbURL: testDatabaseURL(t), token: "worker-token-group-" + randHex(8), op: "operator-token-group-" + randHex(8),
		groupToken: "group-token-" + randHex(24), key: key, env: env}
}

// start runs one member; it is killed when the test ends.
func (s *groupSetup) start(t testing.TB, name string) *groupWorker {
	t.Helper()
	return s.startEnv(t, name, nil)
}

// startEnv is start with env of this member's own on top of the group's.
func (s *groupSetup) startEnv(t testing.TB, name string, own map[string]string) *groupWorker {
	t.Helper()
	u, err := url.Parse(s.dbURL)
	require.NoError(t, err)
	g := &groupWorker{name: name, logs: &syncBuffer{}}
	g.proxy = storetest.StartCutProxy(t, "127.0.0.1:0", u.Host)
	u.Host = g.proxy.Addr()
	// Traversable (0755): a local or docker machine's users reach their
	// homes below it.
	dataDir := openDir(t, "group-worker-")
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "secret.key"), s.key, 0o600))
	listen, glisten, mlisten := freeAddr(t), freeAddr(t), freeAddr(t)
	g.url, g.groupURL, g.metricsURL = "http://"+listen, "http://"+glisten, "http://"+mlisten+"/metrics"
	g.cmd = exec.Command(s.bin, "serve")
	g.cmd.Env = append(os.Environ(), "WORKER_DATABASE_URL="+u.String(), "DATA_DIR="+dataDir, "WORKER_MACHINES_DIR="+filepath.Join(dataDir, "machines"),
		"WORKER_LISTEN="+listen, "WORKER_GROUP_LISTEN="+glisten, "WORKER_METRICS_LISTEN="+mlisten, "WORKER_GROUP_TOKEN="+s.groupToken,
		"WORKER_TOKEN="+s.token, "WORKER_OPERATOR_TOKEN="+s.op, "WORKER_PROVIDER=attach",
		"WORKER_MODEL=scripted-model", "WORKER_MODEL_PROVIDER=botd", "WORKER_POOL=", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=")
	for _, env := range []map[string]string{s.env, own} {
		for k, v := range env {
			g.cmd.Env = append(g.cmd.Env, k+"="+v)
		}
	}
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, g.cmd.Start())
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			t.Logf("worker %s's log:\n%s", name, tail(g.logs.String(), 6000))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(g.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "worker %s did not come up: %s", name, g.logs.String())
		time.Sleep(100 * time.Millisecond)
	}
	return g
}

// stop ends the worker as a service manager would (SIGTERM: it leaves the
// group and removes its pooled machines), SIGKILL after a minute.
func (g *groupWorker) stop() {
	if g.cmd.Process == nil || g.cmd.ProcessState != nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = g.cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		g.kill()
		<-done
	}
}

// kill ends the worker with SIGKILL (nothing of it runs on).
func (g *groupWorker) kill() {
	if g.cmd.Process != nil {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		_, _ = g.cmd.Process.Wait()
	}
}

// on is env's computer, as reached through worker g.
func on(e *workerEnv, g *groupWorker) *workerEnv {
	o := *e
	o.url = g.url
	return &o
}

// ownerOf reads computer id's ownership lease: the member holding it (its
// group address) and the epoch.
func ownerOf(t testing.TB, db *sql.DB, id string) (string, int64) {
	t.Helper()
	var holder string
	var epoch int64
	var exp int64
	err := db.QueryRow(`SELECT holder, epoch, expires_at FROM bot_leases WHERE lease_key=$1`, group.OwnerPrefix+id).Scan(&holder, &epoch, &exp)
	if err != nil || holder == "" || time.UnixMilli(exp).Before(time.Now()) {
		return "", epoch
	}
	var addr string
	require.NoError(t, db.QueryRow(`SELECT holder FROM bot_leases WHERE lease_key=$1`, group.MemberPrefix+holder).Scan(&addr))
	return addr, epoch
}

// stepsScript plays a run of n file writes into bots/<bot>/, one a
// model request, each answered after pace: long enough for a worker to
// die in the middle of the run.
func stepsScript(bot, prefix string, n int, pace time.Duration) mockmodel.Script {
	return func(outs []mockmodel.Output) mockmodel.Step {
		time.Sleep(pace)
		if len(outs) < n {
			i := len(outs) + 1
			return mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": fmt.Sprintf("bots/%s/%s-%02d.txt", bot, prefix, i), "content": fmt.Sprintf("step %d", i)}}
		}
		return mockmodel.Step{Message: "all steps written"}
	}
}

// checkRunEvents asserts that run id's stored events are numbered 1..n
// with no gap, and that each of the n steps' tool results is there
// exactly once: nothing lost, nothing recorded twice across the owners.
func checkRunEvents(t testing.TB, db *sql.DB, id, prefix string, steps int) {
	t.Helper()
	rows, err := db.Query(`SELECT seq, type, data FROM run_events WHERE run_id=$1 ORDER BY seq`, id)
	require.NoError(t, err)
	defer rows.Close()
	seen := map[string]int{}
	want := int64(1)
	for rows.Next() {
		var seq int64
		var typ, data string
		require.NoError(t, rows.Scan(&seq, &typ, &data))
		require.Equal(t, want, seq, "run %s: events numbered without a gap", id)
		want++
		if typ == "tool_result" {
			for i := 1; i <= steps; i++ {
				if strings.Contains(data, fmt.Sprintf("%s-%02d.txt", prefix, i)) {
					seen[fmt.Sprintf("%02d", i)]++
				}
			}
		}
	}
	require.NoError(t, rows.Err())
	var dup, missing []string
	for i := 1; i <= steps; i++ {
		k := fmt.Sprintf("%02d", i)
		switch n := seen[k]; {
		case n == 0:
			missing = append(missing, k)
		case n > 1:
			dup = append(dup, k)
		}
	}
	require.Empty(t, missing, "run %s: steps with no tool result recorded", id)
	require.Empty(t, dup, "run %s: steps whose tool result was recorded twice", id)
}

// TestWorkerGroupKillPartitionRejoin runs three `worker serve` processes
// on one Postgres with two teams' computers and runs going on throughout:
// requests through any worker reach the computer's owner (capabilities
// minted on one worker work on every other); a worker killed with SIGKILL
// loses nothing (a survivor owns its computer, reconnects the same machine
// and finishes the run with every event once); a worker cut off from
// Postgres stops acting before its lease runs out and a survivor takes
// over; mended, it rejoins as a peer, learns the capabilities and serves
// again.
func TestWorkerGroupKillPartitionRejoin(t *testing.T) {
	const steps = 14
	model := newHostModel(t, scriptedKey)
	model.play(stepsScript("alice", "step", steps, 700*time.Millisecond))
	s := newGroupSetup(t, model.env(nil))
	db, err := sql.Open("pgx", s.dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	w := []*groupWorker{s.start(t, "w0"), s.start(t, "w1"), s.start(t, "w2")}
	c1 := startComputer(t, "http://127.0.0.1:1", 1560, "VIEW_PORT_BASE=36200")
	c2 := startComputer(t, "http://127.0.0.1:1", 1570, "VIEW_PORT_BASE=36400")
	base := &workerEnv{token: s.token, op: s.op}
	// Team t1's computer is made through w0, t2's through w1: each is its
	// maker's.
	t1 := on(base, w[0]).addComputer(t, c1, map[string]any{"team": "t1"}, "alice")
	t2 := on(base, w[1]).addComputer(t, c2, map[string]any{"team": "t2"}, "alice")
	owner1, epoch1 := ownerOf(t, db, t1.computer)
	owner2, _ := ownerOf(t, db, t2.computer)
	require.Equal(t, w[0].groupURL, owner1, "the maker owns team t1's computer")
	require.Equal(t, w[1].groupURL, owner2, "the maker owns team t2's computer")

	t.Run("any worker serves any computer", func(t *testing.T) {
		for _, g := range w {
			for _, e := range []*workerEnv{t1, t2} {
				st, res := on(e, g).tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/via-" + g.name + ".txt", "content": g.name})
				require.Equal(t, http.StatusOK, st, "through %s: %+v", g.name, res)
				require.True(t, res.Success, res.text())
			}
		}
		for _, c := range []*computer{c1, c2} {
			for _, g := range w {
				b, err := os.ReadFile(filepath.Join(c.home, "bot", "bots/alice/via-"+g.name+".txt"))
				require.NoError(t, err)
				require.Equal(t, g.name, string(b))
			}
		}
		// A wrong capability is refused through a relay as it is directly.
		bad := *on(t1, w[2])
		bad.capa = "not-" + t1.capa
		require.Equal(t, http.StatusNotFound, bad.do(t, "GET", "", nil, nil))
		// The group listener takes nothing without the group token.
		st, _ := raw(t, "GET", w[0].groupURL+"/group/v1/caps", "", "", nil)
		require.Equal(t, http.StatusUnauthorized, st)
		st, _ = raw(t, "GET", w[0].groupURL+"/v1/computers/"+t1.computer, s.op, t1.capa, nil)
		require.Equal(t, http.StatusUnauthorized, st, "the caller's credentials do not open the group listener")
		// The ownership did not move for any of it.
		_, e := ownerOf(t, db, t1.computer)
		require.Equal(t, epoch1, e)
		// The relays show on the relaying worker's metrics: w2 owns
		// nothing and relayed both teams' calls; w0 made t1's computer.
		m2, _ := scrapeMetrics(t, w[2].metricsURL, s.op)
		require.GreaterOrEqual(t, m2[`openbot_worker_group_relay_duration_seconds_count{outcome="ok"}`], 2.0, "w2 relayed a call of each team")
		m0, _ := scrapeMetrics(t, w[0].metricsURL, s.op)
		require.Equal(t, 1.0, m0[`openbot_worker_group_ownership_changes_total{change="gained"}`], "w0 owns the computer it made")
		// An MCP session through a worker that owns nothing: found by the
		// capability, held by the owner, every call of it relayed.
		cs, _, err := mcpConnect(t.Context(), w[2].url, s.token, t1.capa, "alice")
		require.NoError(t, err)
		mr, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "file_write", Arguments: map[string]any{"path": "bots/alice/via-mcp.txt", "content": "mcp"}})
		require.NoError(t, err)
		require.False(t, mr.IsError, mcpText(mr))
		require.NoError(t, cs.Close())
		b, err := os.ReadFile(filepath.Join(c1.home, "bot", "bots/alice/via-mcp.txt"))
		require.NoError(t, err)
		require.Equal(t, "mcp", string(b))

		// The dashboard: a sign-in link made by w0 opens through w2, the
		// session is good through w1, and a screen view of t1's computer
		// asked through w2 streams through w1 (made and held by the owner).
		var ll struct {
			URL string `json:"url"`
		}
		require.Equal(t, http.StatusOK, post(t, w[0].url+"/v1/dashboard/login-link", s.op, struct{}{}, &ll))
		lu0, err := url.Parse(ll.URL)
		require.NoError(t, err)
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noRedirect.Get(w[2].url + lu0.RequestURI())
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the sign-in code made on w0 works on w2")
		var cookie string
		for _, ck := range resp.Cookies() {
			cookie = ck.Name + "=" + ck.Value
		}
		require.NotEmpty(t, cookie)
		resp, err = noRedirect.Get(w[0].url + lu0.RequestURI())
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "and is spent on every worker")
		dash := func(g *groupWorker, method, path string) (int, string) {
			req, _ := http.NewRequest(method, g.url+path, nil)
			req.Header.Set("Cookie", cookie)
			req.Header.Set("X-Dashboard", "1")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		st, body := dash(w[1], "GET", "/dashboard/api/state")
		require.Equal(t, http.StatusOK, st, body)
		require.Contains(t, body, t1.computer)
		// alice's screen up (a look starts it), through a non-owner too.
		st, looked := on(t1, w[1]).tool(t, "alice", "computer_observe", map[string]any{})
		require.Equal(t, http.StatusOK, st, "%+v", looked)
		st, body = dash(w[2], "POST", "/dashboard/api/computers/"+t1.computer+"/screens/alice/view")
		require.Equal(t, http.StatusOK, st, body)
		var view struct {
			WS string `json:"ws"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &view))
		vctx, vcancel := context.WithTimeout(t.Context(), 30*time.Second)
		ws, _, err := websocket.Dial(vctx, wsURL(w[1].url+view.WS), &websocket.DialOptions{Subprotocols: []string{"binary"},
			HTTPHeader: http.Header{"Cookie": {cookie}, "Origin": {w[1].url}}})
		vcancel()
		require.NoError(t, err, "the view's stream through w1")
		ws.SetReadLimit(64 << 20)
		nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
		vc := &rfbClient{ws: ws, conn: nc, br: bufio.NewReaderSize(nc, 1<<20)}
		require.NoError(t, vc.handshake(), "the screen's RFB handshake through the relay")
		vc.Close()

		// A person's control link made through w1 opens through w2: the
		// link is routed to the owner (w0), which verifies it; the live
		// control (the RFB stream) goes through the relay too.
		st, link, msg := takeoverCall(t, on(t1, w[1]), "POST", "alice", "")
		require.Equal(t, http.StatusOK, st, msg)
		lu, err := url.Parse(link.URL)
		require.NoError(t, err)
		page, body := raw(t, "GET", w[2].url+lu.Path, "", "", nil)
		require.Equal(t, http.StatusOK, page, body)
		require.Contains(t, body, "<html")
		rc := connectControl(t, w[2].url+lu.Path)
		rc.Close()
		st, _, msg = takeoverCall(t, on(t1, w[2]), "DELETE", "alice", "")
		require.Equal(t, http.StatusOK, st, msg)
		gone, _ := raw(t, "GET", w[1].url+lu.Path, "", "", nil)
		require.Equal(t, http.StatusGone, gone, "released on the owner, whichever worker released it")
		forged, _ := raw(t, "GET", w[2].url+lu.Path+"x", "", "", nil)
		require.Equal(t, http.StatusUnauthorized, forged, "the owner checks the link's signature")

		// One live computer per scope, whichever workers are asked at once.
		// The goroutines only send; the test's goroutine asserts.
		type res struct {
			st  int
			err error
		}
		out := make(chan res, 3)
		raceBody, _ := json.Marshal(map[string]any{"scope": map[string]any{"team": "race"}, "provider": "attach",
			"attach": map[string]string{"url": c1.url, "token": c1.token}})
		for _, g := range w {
			go func() {
				st, err := sendJSON("POST", g.url+"/v1/computers", s.op, "", raceBody)
				out <- res{st, err}
			}()
		}
		created, refused := 0, 0
		for range w {
			r := <-out
			require.NoError(t, r.err)
			switch r.st {
			case http.StatusCreated:
				created++
			case http.StatusConflict:
				refused++
			default:
				t.Fatalf("create for one scope on three workers at once: status %d", r.st)
			}
		}
		require.Equal(t, 1, created, "one live computer for the scope")
		require.Equal(t, 2, refused)

		// The operator adopts through a worker that does not own the
		// computer: the new capability works through every worker, the
		// old one through none.
		var adopted struct {
			Capability string `json:"capability"`
		}
		require.Equal(t, http.StatusOK, post(t, w[2].url+"/v1/computers/"+t2.computer+"/adopt", s.op, nil, &adopted))
		require.NotEmpty(t, adopted.Capability)
		old := t2.capa
		t2.capa = adopted.Capability
		for _, g := range w {
			st, res := on(t2, g).tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/adopted.txt", "content": g.name})
			require.Equal(t, http.StatusOK, st, "the adopted capability through %s: %+v", g.name, res)
			stale := *on(t2, g)
			stale.capa = old
			require.Equal(t, http.StatusNotFound, stale.do(t, "GET", "", nil, nil), "the old capability through %s", g.name)
		}

	})

	t.Run("a killed worker loses nothing", func(t *testing.T) {
		// Runs of both teams, started through workers that do not own
		// their computers.
		run1 := on(t1, w[2]).startRunOn(t, "alice", "write the steps", providers.RuntimeWorker)
		run2 := on(t2, w[0]).startRunOn(t, "alice", "write the steps", providers.RuntimeWorker)
		survivorsGained := func() float64 {
			n := 0.0
			for _, g := range w[1:] {
				m, _ := scrapeMetrics(t, g.metricsURL, s.op)
				n += m[`openbot_worker_group_ownership_changes_total{change="gained"}`]
			}
			return n
		}
		gainedBefore := survivorsGained()
		ofW0 := 0.0 // t1's, and the raced scope's when w0 made it
		ids, err := db.Query(`SELECT id FROM computers WHERE observed_state<>'destroyed'`)
		require.NoError(t, err)
		for ids.Next() {
			var id string
			require.NoError(t, ids.Scan(&id))
			if o, _ := ownerOf(t, db, id); o == w[0].groupURL {
				ofW0++
			}
		}
		ids.Close()
		waitFile(t, filepath.Join(c1.home, "bot", "bots/alice/step-03.txt"), 60*time.Second)
		killed := time.Now()
		w[0].kill()
		var took time.Duration
		require.Eventually(t, func() bool {
			o, _ := ownerOf(t, db, t1.computer)
			if o != "" && o != w[0].groupURL {
				took = time.Since(killed)
				return true
			}
			return false
		}, 60*time.Second, 100*time.Millisecond, "a survivor owns the killed worker's computer")
		t.Logf("failover: %s after SIGKILL", took)
		require.Eventually(t, func() bool { return survivorsGained()-gainedBefore == ofW0 }, 30*time.Second, 200*time.Millisecond,
			"each of the killed w0's %v computers claimed by one survivor, once", ofW0)
		final1, _ := waitRun(t, on(t1, w[1]), run1, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final1.Status, "%+v", final1)
		final2, _ := waitRun(t, on(t2, w[2]), run2, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final2.Status, "%+v", final2)
		checkRunEvents(t, db, run1, "step", steps)
		checkRunEvents(t, db, run2, "step", steps)
		for i := 1; i <= steps; i++ {
			for _, c := range []*computer{c1, c2} {
				_, err := os.Stat(filepath.Join(c.home, "bot", fmt.Sprintf("bots/alice/step-%02d.txt", i)))
				require.NoError(t, err, "step %d on %s", i, c.url)
			}
		}
		// The same machine, reconnected: one attach machine per computer.
		for _, e := range []*workerEnv{t1, t2} {
			st, res := on(e, w[1]).tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/after-kill.txt", "content": "x"})
			require.Equal(t, http.StatusOK, st, "%+v", res)
		}
	})

	t.Run("a worker cut off from Postgres stops, and rejoins", func(t *testing.T) {
		// w1 now owns t1's computer (or w2 does); cut whichever owns t2's.
		o2, epoch := ownerOf(t, db, t2.computer)
		var cut *groupWorker
		for _, g := range w[1:] {
			if g.groupURL == o2 {
				cut = g
			}
		}
		require.NotNil(t, cut, "a live member owns team t2's computer")
		model.play(stepsScript("alice", "cut", steps, 700*time.Millisecond))
		run2 := on(t2, cut).startRunOn(t, "alice", "write the steps again", providers.RuntimeWorker)
		waitFile(t, filepath.Join(c2.home, "bot", "bots/alice/cut-03.txt"), 60*time.Second)
		var exp int64
		require.NoError(t, db.QueryRow(`SELECT expires_at FROM bot_leases WHERE lease_key=$1`, group.OwnerPrefix+t2.computer).Scan(&exp))
		cut.proxy.Hold()
		held := time.Now()
		// It stops acting before its lease can run out: nobody else may
		// claim the computer before then.
		const stopped = "worker group: stopped acting for a computer"
		require.Eventually(t, func() bool { return strings.Contains(cut.logs.String(), stopped) }, 30*time.Second, 20*time.Millisecond,
			"the cut-off worker stops acting for its computer")
		stoppedAt := time.Now()
		require.Eventually(t, func() bool {
			for _, l := range strings.Split(cut.logs.String(), "\n") {
				if strings.Contains(l, run2) && strings.Contains(l, "run lost its bot lease") {
					return true
				}
			}
			return false
		}, 10*time.Second, 20*time.Millisecond, "the cut-off worker stopped its run of the computer")
		mc, _ := scrapeMetrics(t, cut.metricsURL, s.op)
		require.GreaterOrEqual(t, mc[`openbot_worker_group_ownership_changes_total{change="lost"}`], 1.0, "the cut worker counts what it let go")
		leaseEnd := time.UnixMilli(exp)
		t.Logf("cut at %s; stopped acting %s later; its lease (last renewed before the cut) ran until %s after the cut",
			held.Format(time.TimeOnly), stoppedAt.Sub(held).Round(time.Millisecond), leaseEnd.Sub(held).Round(time.Millisecond))
		require.True(t, stoppedAt.Before(leaseEnd) || func() bool {
			// The lease may have been renewed once more just before the
			// cut: then it ends up to TTL after the cut.
			var e2 int64
			_ = db.QueryRow(`SELECT expires_at FROM bot_leases WHERE lease_key=$1 AND holder<>'' AND epoch=$2`, group.OwnerPrefix+t2.computer, epoch).Scan(&e2)
			return e2 != 0 && stoppedAt.Before(time.UnixMilli(e2))
		}(), "stopped acting (%s) before its lease could run out (%s)", stoppedAt, leaseEnd)
		require.Eventually(t, func() bool {
			o, e := ownerOf(t, db, t2.computer)
			return o != "" && o != cut.groupURL && e > epoch
		}, 60*time.Second, 100*time.Millisecond, "a survivor owns the computer under a new epoch")
		var other *groupWorker
		for _, g := range w[1:] {
			if g != cut {
				other = g
			}
		}
		final, _ := waitRun(t, on(t2, other), run2, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, "%+v", final)
		checkRunEvents(t, db, run2, "cut", steps)

		// Mended, it is a peer again: requests through it reach the
		// owners.
		cut.proxy.Mend()
		require.Eventually(t, func() bool {
			st, _ := on(t2, cut).tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/after-mend.txt", "content": "m"})
			return st == http.StatusOK
		}, 60*time.Second, 250*time.Millisecond, "the mended worker serves again")

		// The killed worker comes back as a new process: it learns the
		// capabilities from a peer (they were never written anywhere) and
		// serves both teams.
		back := s.start(t, "w0-again")
		for _, e := range []*workerEnv{t1, t2} {
			st, res := on(e, back).tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/after-rejoin.txt", "content": "r"})
			require.Equal(t, http.StatusOK, st, "%+v", res)
		}
		require.Contains(t, back.logs.String(), "learned the capabilities from a peer")
	})

	t.Run("nothing secret in the store or the logs", func(t *testing.T) {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM bot_leases WHERE holder LIKE '%'||$1||'%'`, s.groupToken).Scan(&n))
		require.Zero(t, n)
		for _, g := range append(w, nil) {
			if g == nil {
				continue
			}
			l := g.logs.String()
			for _, secret := range []string{s.groupToken, s.token, s.op, t1.capa, t2.capa} {
				require.NotContains(t, l, secret, "worker %s's log", g.name)
			}
		}
	})
}

// sendJSON sends body with the given credentials and returns the status;
// it never fails the test, so goroutines other than the test's may call it.
func sendJSON(method, url, token, capa string, body []byte) (int, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if capa != "" {
		req.Header.Set("X-Computer-Capability", capa)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitFile waits for path to exist.
func waitFile(t testing.TB, path string, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, d, 100*time.Millisecond, "%s", path)
}

// TestWorkerGroupTraceCrossesTheRelay: a tool call sent to a worker that
// does not own the computer is one trace across both workers: the
// relaying worker's "relay POST" span, the owner's request span as its
// child, the tool span and its call to botd under that. A traceparent the
// caller sends is not taken as a parent, and no credential is in a span.
func TestWorkerGroupTraceCrossesTheRelay(t *testing.T) {
	rec := newOTLPReceiver(t)
	s := newGroupSetup(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rec.srv.URL, "OTEL_BSP_SCHEDULE_DELAY": "200"})
	w0, w1 := s.start(t, "w0"), s.start(t, "w1")
	c := startComputer(t, "http://127.0.0.1:1", 1590, "VIEW_PORT_BASE=36800")
	e := on(&workerEnv{token: s.token, op: s.op}, w0).addComputer(t, c, map[string]any{"team": "traced"}, "alice")

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest("POST", w1.url+"/v1/computers/"+e.computer+"/tools/file_write",
		strings.NewReader(`{"botId":"alice","args":{"path":"bots/alice/traced.txt","content":"t"}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("X-Computer-Capability", e.capa)
	req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	const route = "POST /v1/computers/{id}/tools/{name}"
	var relay, server, tool *tracepb.Span
	var spans []*tracepb.Span
	var raw []byte
	found := func() bool {
		spans, raw, _ = rec.got()
		relay, server, tool = nil, nil, nil
		// Each worker exports on its own: look for each span in all of
		// them, whatever their order.
		for _, sp := range spans {
			if sp.Name == "relay POST" {
				relay = sp
			}
		}
		for _, sp := range spans {
			if sp.Name == route && sp.Kind == tracepb.Span_SPAN_KIND_SERVER && relay != nil && hex.EncodeToString(sp.ParentSpanId) == hex.EncodeToString(relay.SpanId) {
				server = sp
			}
		}
		for _, sp := range spans {
			if server != nil && sp.Name == "tool file_write" && hex.EncodeToString(sp.ParentSpanId) == hex.EncodeToString(server.SpanId) {
				tool = sp
			}
		}
		return relay != nil && server != nil && tool != nil
	}
	for deadline := time.Now().Add(30 * time.Second); !found(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			var names []string
			for _, sp := range spans {
				names = append(names, fmt.Sprintf("%s[%x<-%x]", sp.Name, sp.SpanId, sp.ParentSpanId))
			}
			t.Fatalf("relay, request and tool spans in one chain; spans: %v", names)
		}
	}
	require.Empty(t, relay.ParentSpanId, "the relay span is the trace's root: the caller's traceparent is not a parent")
	require.NotEqual(t, callerTrace, hex.EncodeToString(relay.TraceId))
	require.Equal(t, map[string]any{"http.request.method": "POST", "computer": e.computer, "http.response.status_code": int64(200)}, spanAttrs(relay))
	for _, sp := range []*tracepb.Span{server, tool} {
		require.Equal(t, hex.EncodeToString(relay.TraceId), hex.EncodeToString(sp.TraceId), "%s in the relay's trace", sp.Name)
	}
	var botd bool
	for _, sp := range spans {
		if strings.HasPrefix(sp.Name, "botd ") && hex.EncodeToString(sp.ParentSpanId) == hex.EncodeToString(tool.SpanId) {
			botd = true
		}
	}
	require.True(t, botd, "the owner's call to botd under the tool span")
	for _, secret := range []string{s.token, s.op, s.groupToken, e.capa, c.token, "Bearer"} {
		require.False(t, bytes.Contains(raw, []byte(secret)), "a credential in the exported spans")
	}
}

// TestWorkerGroupSharesThePool: the warm pool serves the whole group. Of
// two docker workers only w0 keeps a pool; a create sent to w1 is served
// from w0's pooled machine (the same computer id the pool listed, handed
// out once), owned by w0 and usable through both; the destroy through w1
// removes the machine.
func TestWorkerGroupSharesThePool(t *testing.T) {
	image := dockerImage(t)
	s := newGroupSetup(t, map[string]string{"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image})
	w0 := s.startEnv(t, "w0", map[string]string{"WORKER_POOL": "docker=1"})
	w1 := s.start(t, "w1")
	var made []string
	t.Cleanup(func() {
		for _, id := range made {
			_, _ = raw(t, "DELETE", w0.url+"/v1/computers/"+id, s.op, "", nil)
		}
	})
	var pooled string
	waitFor(t, "w0's pool to hold a ready docker machine", 3*time.Minute, func() bool {
		var got struct {
			Pool []computers.PoolKind `json:"pool"`
		}
		req, _ := http.NewRequest("GET", w0.url+"/pool", nil)
		req.Header.Set("Authorization", "Bearer "+s.op)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&got) != nil {
			return false
		}
		for _, k := range got.Pool {
			if k.Provider == providers.KindDocker && len(k.Ready) == 1 {
				pooled = k.Ready[0].Computer
				return true
			}
		}
		return false
	})
	pe := &poolEnv{url: w1.url, token: s.token}
	e, err := pe.tryCreate(t.Context(), map[string]any{"team": "pooled"}, "", false)
	require.NoError(t, err)
	made = append(made, e.computer)
	require.Equal(t, pooled, e.computer, "the create sent to w1 took w0's pooled machine")
	m0, _ := scrapeMetrics(t, w0.metricsURL, s.op)
	require.Equal(t, 1.0, m0[`openbot_worker_pool_handout_duration_seconds_count{provider="docker"}`], "handed out once, by w0")
	m1, _ := scrapeMetrics(t, w1.metricsURL, s.op)
	require.Equal(t, 1.0, m1[`openbot_worker_group_relay_duration_seconds_count{outcome="ok"}`], "w1 relayed the create")
	db, err := sql.Open("pgx", s.dbURL)
	require.NoError(t, err)
	defer db.Close()
	o, _ := ownerOf(t, db, e.computer)
	require.Equal(t, w0.groupURL, o, "the pool's worker owns what it handed out")
	e.op = s.op
	require.Equal(t, http.StatusCreated, on(e, w1).do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	for _, g := range []*groupWorker{w0, w1} {
		st, res := on(e, g).tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/pooled.txt", "content": g.name})
		require.Equal(t, http.StatusOK, st, "through %s: %+v", g.name, res)
	}
	var ref string
	require.NoError(t, db.QueryRow(`SELECT provider_ref FROM computers WHERE id=$1`, e.computer).Scan(&ref))
	require.Equal(t, http.StatusOK, on(e, w1).do(t, "DELETE", "", nil, nil))
	made = nil
	waitFor(t, "the pooled machine's container to be removed", 2*time.Minute, func() bool {
		return exec.Command("docker", "inspect", ref).Run() != nil
	})
}

// TestWorkerGroupRestoreKeyAnyWorker: a kept home's restore key, answered
// by a destroy sent to one worker (and done by the owner), restores the
// home into the scope's next computer through another worker: the key's
// hash was passed between the peers in memory. Used once, it is spent on
// every worker. Docker machines; the home store is S3 (a fake server
// here), which all members share.
func TestWorkerGroupRestoreKeyAnyWorker(t *testing.T) {
	image := dockerImage(t)
	_, env := fakeS3(t, "group/")
	env["WORKER_PROVIDER"], env["WORKER_IMAGE"] = providers.KindDocker, image
	s := newGroupSetup(t, env)
	w := []*groupWorker{s.start(t, "w0"), s.start(t, "w1"), s.start(t, "w2")}
	var made []string
	t.Cleanup(func() {
		for _, id := range made {
			_, _ = raw(t, "DELETE", w[0].url+"/v1/computers/"+id, s.op, "", nil)
		}
	})
	create := func(g *groupWorker, key string) (*workerEnv, bool) {
		pe := &poolEnv{url: g.url, token: s.token}
		e, err := pe.tryCreate(t.Context(), map[string]any{"team": "kept"}, key, key != "")
		require.NoError(t, err, "create through %s", g.name)
		made = append(made, e.computer)
		e.op = s.op
		return e, true
	}
	e, _ := create(w[0], "")
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	st, res := e.tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/kept.txt", "content": "kept across workers"})
	require.Equal(t, http.StatusOK, st, "%+v", res)
	var out struct {
		RestoreKey string `json:"restoreKey"`
		Computer   struct{ State, LastError string }
	}
	st = on(e, w[2]).do(t, "POST", "/checkpoint", nil, nil)
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, st, "a checkpoint through w2, into the shared home store")
	require.Equal(t, http.StatusOK, on(e, w[1]).do(t, "DELETE", "?keepHome=true", nil, &out), "destroy through w1")
	require.Equal(t, "destroyed", out.Computer.State, out.Computer.LastError)
	require.NotEmpty(t, out.RestoreKey, "the kept home's restore key")
	made = nil

	// Through w2, which neither made nor destroyed it.
	r, _ := create(w[2], out.RestoreKey)
	require.Equal(t, http.StatusCreated, r.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	st, res = on(r, w[1]).tool(t, "alice", "file_read", map[string]any{"path": "bots/alice/kept.txt"})
	require.Equal(t, http.StatusOK, st, "%+v", res)
	require.Contains(t, res.text(), "kept across workers", "the kept home is back")

	// Spent on every worker: the scope free again, the same key restores
	// nothing anywhere.
	require.Equal(t, http.StatusOK, on(r, w[0]).do(t, "DELETE", "", nil, nil))
	made = nil
	for _, g := range w {
		pe := &poolEnv{url: g.url, token: s.token}
		e, err := pe.tryCreate(t.Context(), map[string]any{"team": "kept"}, out.RestoreKey, false)
		if err == nil {
			made = append(made, e.computer)
		}
		require.ErrorContains(t, err, "status 403", "through %s: the spent key is refused", g.name)
		require.ErrorContains(t, err, "does not open a kept home")
	}
}

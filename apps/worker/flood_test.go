package main

// Red-team row of issue 25, requirement 2: a hostile machine floods the
// worker. The attack of the issue: a teammate's shell replaced its Codex
// behind botd's /agent with a program that, after initialize, thread/start
// and turn/start, sent 20 notifications with a 16 MiB method and 20 16 MiB
// item/agentMessage/deltas (the worker went to 2.9 GB, the database to 1 GB,
// and the run "completed" with a forged message of hundreds of MB).
//
// The hostile machine here is a stand-in for that compromised botd: a
// loopback server that is Team t2's attached botd. It serves /agent (and,
// for one row, /events) itself and passes everything else to a real botd,
// so the worker reaches it exactly as it reaches any attached computer.
// Team t1's computer is the same real botd, attached directly, with a live
// run of its own; its API, a tool call on it and the dashboard's state call
// are timed while each flood runs (logged, not asserted: no timing
// assertions). Each row asserts that the hostile run ends failed with the
// cap's reason, that the worker's heap and database grow by a bounded
// amount, and what the run's stored message may be.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/heapwatch"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// Displays 560-561 and loopback ports 14500-14999 are this test's: its own
// listeners take 14500-14899, botd's view ports 14900+.
const (
	floodDisplayBase  = 560
	floodViewPortBase = 14900
)

var floodPortNext atomic.Int32

// floodListener listens on a free loopback port of 14500-14899.
func floodListener(t testing.TB) net.Listener {
	t.Helper()
	for range 400 {
		p := 14500 + int(floodPortNext.Add(1))%400
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			return l
		}
	}
	t.Fatal("no free loopback port in 14500-14899")
	return nil
}

// floodServer serves h on a port of floodListener.
func floodServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = floodListener(t)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// noisePage is the worst screenshot a screen shows: every pixel random.
const noisePage = `<!doctype html><html><body style="margin:0;overflow:hidden"><canvas id="c"></canvas><script>
const c = document.getElementById('c'); c.width = innerWidth; c.height = innerHeight;
const x = c.getContext('2d'), d = x.createImageData(c.width, c.height);
for (let i = 0; i < d.data.length; i++) d.data[i] = (i % 4 == 3) ? 255 : Math.random() * 256;
x.putImageData(d, 0, 0); document.title = 'noise';
</script></body></html>`

// floodRow is one hostile behaviour behind /agent (and /events).
type floodRow struct {
	name string
	// flood is sent after the turn starts (nil: nothing).
	flood func(send func([]byte) error) error
	// botdEvents, when set, is how many apply-guard events /events sends
	// for the hostile bot's screen once the turn has started.
	botdEvents int
	want       string // in the run's error
	// textCut: the run's message is the agent text cut at the cap, marked.
	textCut bool
}

// hostileBotd is the compromised botd of Team t2.
type hostileBotd struct {
	t     testing.TB
	proxy *httputil.ReverseProxy
	// mu guards row.
	mu  sync.Mutex
	row floodRow
	// turnStarted carries a signal per turn for /events; eventsDone
	// tells /agent the events flood is over.
	turnStarted, eventsDone chan struct{}
	// delivered counts flood messages the worker accepted (written).
	delivered atomic.Int64
}

func newHostileBotd(t testing.TB, real string) *hostileBotd {
	u, err := url.Parse(real)
	require.NoError(t, err)
	return &hostileBotd{t: t, proxy: httputil.NewSingleHostReverseProxy(u),
		turnStarted: make(chan struct{}, 1), eventsDone: make(chan struct{}, 1)}
}

func (h *hostileBotd) setRow(r floodRow) {
	h.mu.Lock()
	h.row = r
	h.mu.Unlock()
	h.delivered.Store(0)
}

func (h *hostileBotd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/agent":
		h.agent(w, r)
	case "/events":
		h.events(w, r)
	default:
		h.proxy.ServeHTTP(w, r)
	}
}

// agent answers initialize, thread/start and turn/start as Codex would,
// then floods and ends the turn "completed" (which the worker must not
// believe once a cap was broken).
func (h *hostileBotd) agent(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	ctx := r.Context()
	var wmu sync.Mutex
	send := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return c.Write(ctx, websocket.MessageText, b)
	}
	reply := func(id json.RawMessage, result any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
		_ = send(b)
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch m.Method {
		case codexrpc.MethodInitialize:
			reply(m.ID, map[string]any{"userAgent": "hostile"})
		case codexrpc.MethodThreadStart:
			reply(m.ID, map[string]any{"thread": map[string]any{"id": "th-hostile"}, "model": "m"})
		case codexrpc.MethodTurnStart:
			reply(m.ID, map[string]any{"turn": map[string]any{"id": "tu-hostile", "status": "inProgress"}})
			h.mu.Lock()
			row := h.row
			h.mu.Unlock()
			go func() {
				if row.flood != nil {
					if row.flood(func(b []byte) error {
						if err := send(b); err != nil {
							return err
						}
						h.delivered.Add(1)
						return nil
					}) != nil {
						return
					}
				}
				if row.botdEvents > 0 {
					h.turnStarted <- struct{}{}
					select {
					case <-h.eventsDone:
					case <-ctx.Done():
						return
					}
				}
				done, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": codexrpc.NotifyTurnCompleted,
					"params": map[string]any{"threadId": "th-hostile", "turn": map[string]any{"id": "tu-hostile", "status": "completed"}}})
				_ = send(done)
			}()
		case codexrpc.MethodTurnInterrupt:
			reply(m.ID, map[string]any{})
		}
	}
}

// events is the hostile /events: quiet until a row's turn starts, then
// apply-guard blocks for the hostile bot's screen, each with a 200 KiB URL.
func (h *hostileBotd) events(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	go func() { _, _, _ = c.Read(ctx) }()
	long := "http://jobs.example/apply?" + strings.Repeat("x", 200<<10)
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.turnStarted:
		}
		h.mu.Lock()
		n := h.row.botdEvents
		h.mu.Unlock()
		for range n {
			b, _ := json.Marshal(map[string]any{"type": "apply_guard", "at": time.Now().UTC(),
				"data": map[string]string{"screen": "mallory", "method": "POST", "url": long}})
			if c.Write(ctx, websocket.MessageText, b) != nil {
				break
			}
			h.delivered.Add(1)
		}
		h.eventsDone <- struct{}{}
	}
}

func notify(method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return b
}

// repeat sends msg n times.
func repeat(n int, msg []byte) func(func([]byte) error) error {
	return func(send func([]byte) error) error {
		for range n {
			if err := send(msg); err != nil {
				return err
			}
		}
		return nil
	}
}

// latencies records the friendly team's calls by name.
type latencies struct {
	mu sync.Mutex
	d  map[string][]time.Duration
	// errs counts failed calls (an error or a status other than 200).
	errs map[string]int
}

func (l *latencies) add(name string, d time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d[name] = append(l.d[name], d)
	if !ok {
		l.errs[name]++
	}
}

func (l *latencies) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for n := range l.d {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		ds := append([]time.Duration(nil), l.d[n]...)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		fmt.Fprintf(&b, "\n    %-28s n=%-4d median %-8s p90 %-8s max %-8s failed %d", n, len(ds),
			ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*9/10].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), l.errs[n])
	}
	return b.String()
}

func TestHostileMachineFlood(t *testing.T) {
	// Team t1's run: a real screenshot of the desktop and of a noise page
	// (the largest a screenshot gets, to check the message cap against),
	// then a shell that waits for a file while the floods run.
	var shotMu sync.Mutex
	var shots []int
	pageSrv := floodServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(noisePage))
	}))
	script := func(outs []mockmodel.Output) mockmodel.Step {
		shotMu.Lock()
		shots = shots[:0]
		for _, o := range outs {
			for _, img := range o.Images {
				shots = append(shots, len(img))
			}
		}
		shotMu.Unlock()
		steps := []mockmodel.Step{
			{Tool: "computer_observe", Args: map[string]any{}},
			{Tool: "open_path", Args: map[string]any{"target": pageSrv.URL + "/noise"}},
			{Tool: "shell", Args: map[string]any{"argv": []string{"sleep", "2"}}},
			{Tool: "computer_observe", Args: map[string]any{}},
			{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c",
				"i=0; while [ ! -e bots/alice/done ] && [ $i -lt 5900 ]; do sleep 0.1; i=$((i+1)); done; echo waited"}, "timeoutMs": 600000}},
		}
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return mockmodel.Step{Message: "done"}
	}
	modelSrv := floodServer(t, mockmodel.New(script).RequireKey(scriptedKey))
	c := startComputer(t, modelSrv.URL, floodDisplayBase, fmt.Sprintf("VIEW_PORT_BASE=%d", floodViewPortBase),
		"EGRESS_ALLOW=127.0.0.1/32") // the noise page is on loopback
	friendly := startWorker(t, c, "alice", "bob")

	hb := newHostileBotd(t, c.url)
	hostileSrv := floodServer(t, hb)
	hostile := friendly.addComputer(t, &computer{url: hostileSrv.URL, token: c.token}, map[string]any{"team": "t2"}, "mallory")
	waitFor(t, "the worker following the hostile botd's events", 30*time.Second, func() bool {
		return friendly.w.People.Events.Connected(hostile.computer)
	})

	// The dashboard, signed in as a person would be.
	link, err := friendly.w.People.LoginLink(friendly.url)
	require.NoError(t, err)
	jar, _ := cookiejar.New(nil)
	dash := &http.Client{Jar: jar, Timeout: 60 * time.Second}
	resp, err := dash.Get(link)
	require.NoError(t, err)
	resp.Body.Close()

	aliceRun := friendly.startRun(t, "alice", "Look at the screen, open the page, look again, then wait.")
	aliceSSE := followSSE(t, friendly, aliceRun)
	aliceSSE.wait(t, "alice's waiting shell", 3*time.Minute, func(ev sseEvent) bool {
		if ev.Type != "tool_call" || ev.Data["tool"] != "shell" {
			return false
		}
		args, _ := ev.Data["arguments"].(map[string]any)
		argv, _ := args["argv"].([]any)
		return len(argv) == 3
	})
	shotMu.Lock()
	t.Logf("real screenshots (base64 data URLs) of t1's run: %v bytes (desktop, then the noise page); the JSON-RPC cap is %s",
		shots, codexrpc.Size(codexrpc.MaxMessage))
	for _, n := range shots {
		require.Less(t, n, codexrpc.MaxMessage/2, "a screenshot fits the message cap with room to spare")
	}
	shotMu.Unlock()

	api := &http.Client{Timeout: 60 * time.Second}
	call := func(method, u, capa string, body string) bool {
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+friendly.token)
		if capa != "" {
			req.Header.Set("X-Computer-Capability", capa)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := api.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	}
	base := friendly.url + "/v1/computers/" + friendly.computer
	probes := []struct {
		name string
		do   func() bool
	}{
		{"t1 GET run", func() bool { return call("GET", base+"/runs/"+aliceRun, friendly.capa, "") }},
		{"t1 GET computer", func() bool { return call("GET", base, friendly.capa, "") }},
		{"t1 tool call (shell true)", func() bool {
			return call("POST", base+"/tools/shell", friendly.capa, `{"botId":"bob","args":{"argv":["true"]}}`)
		}},
		{"dashboard state", func() bool {
			resp, err := dash.Get(friendly.url + "/dashboard/api/state")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode == http.StatusOK
		}},
	}

	dbSize := func() int64 {
		var n int64
		for _, f := range []string{"worker.db", "worker.db-wal"} {
			if st, err := os.Stat(filepath.Join(friendly.dataDir, f)); err == nil {
				n += st.Size()
			}
		}
		return n
	}
	const heapBound, dbBound = 256 << 20, 64 << 20

	big := strings.Repeat("A", 16<<20)
	delta := func(s string) []byte {
		return notify(codexrpc.NotifyAgentMessageDelta, map[string]any{"threadId": "th-hostile", "turnId": "tu-hostile", "itemId": "i1", "delta": s})
	}
	// Built before any heap is measured (they are the attacker's memory).
	bigMethod, bigDelta := notify(big, map[string]any{}), delta(big)
	rows := []floodRow{
		{name: "the issue's flood: 20 16 MiB methods, 20 16 MiB deltas", flood: func(send func([]byte) error) error {
			if err := repeat(20, bigMethod)(send); err != nil {
				return err
			}
			return repeat(20, bigDelta)(send)
		}, want: "the computer sent a 16 MiB JSON-RPC message; the cap is 4 MiB"},
		{name: "20 3 MiB methods (under the message cap)", flood: repeat(20, notify(big[:3<<20], map[string]any{})),
			want: "the computer sent a JSON-RPC method name of 3 MiB; the cap is 128 bytes"},
		{name: "20 3 MiB agent deltas", flood: repeat(20, delta(big[:3<<20])),
			want: "of agent text; the cap is 1 MiB", textCut: true},
		{name: "5000 4000-byte notifications", flood: repeat(5000, notify(codexrpc.NotifyThreadTokenUsage, map[string]string{"pad": big[:4000]})),
			want: "the computer caused more than 16 MiB of events in this run; the cap is 16 MiB"},
		{name: "1500 botd apply-guard events with 200 KiB URLs", botdEvents: 1500,
			want: "botd's /events reported more than 1000 events for this run; the cap is 1000"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			hb.setRow(row)
			heap, db0 := heapwatch.Start(20*time.Millisecond), dbSize()
			lat := &latencies{d: map[string][]time.Duration{}, errs: map[string]int{}}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for _, p := range probes {
				wg.Add(1)
				go func() { // Team t1 and the dashboard, timed meanwhile
					defer wg.Done()
					for {
						start := time.Now()
						ok := p.do()
						lat.add(p.name, time.Since(start), ok)
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
						}
					}
				}()
			}
			start := time.Now()
			id := hostile.startRun(t, "mallory", "Do the task.")
			var final runs.Snapshot
			deadline := time.Now().Add(5 * time.Minute)
			for {
				final = hostile.getRun(t, id)
				if final.Status.Ended() || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			took := time.Since(start)
			close(stop)
			wg.Wait()
			heapUp := heap.Stop()
			stored, err := friendly.w.Store.GetRun(context.Background(), id)
			require.NoError(t, err)
			grow := dbSize() - db0
			t.Logf("%s: run %s ended %s after %s: %q; message %s; the hostile delivered %d messages; "+
				"worker heap peak +%s, database +%s; Team t1 and the dashboard meanwhile:%s",
				row.name, id, stored.State, took.Round(time.Millisecond), codexrpc.Clip(stored.Error, 300),
				codexrpc.Size(int64(len(stored.Message))), hb.delivered.Load(), codexrpc.Size(max(heapUp, 0)), codexrpc.Size(max(grow, 0)), lat)
			assert.Equal(t, string(runs.StatusFailed), stored.State, "the run fails at the cap")
			assert.Contains(t, stored.Error, row.want)
			assert.Less(t, heapUp, int64(heapBound), "the worker's heap stays bounded")
			assert.Less(t, grow, int64(dbBound), "the database grows by a bounded amount")
			assert.LessOrEqual(t, len(stored.Message), runs.MaxAgentText+len(codexrpc.Truncated), "the message is bounded")
			if row.textCut {
				assert.Equal(t, runs.MaxAgentText+len(codexrpc.Truncated), len(stored.Message))
				assert.True(t, strings.HasSuffix(stored.Message, codexrpc.Truncated), "the cut message is marked")
			}
			evs, err := friendly.w.Store.Events(context.Background(), id, 0)
			require.NoError(t, err)
			var evBytes int
			for _, e := range evs {
				evBytes += len(e.Data)
			}
			t.Logf("%s: %d events stored, %s", row.name, len(evs), codexrpc.Size(int64(evBytes)))
			assert.LessOrEqual(t, evBytes, runs.MaxRunEventBytes+64<<10, "the run's events are bounded")
			assert.Equal(t, http.StatusOK, hostile.do(t, "GET", "/runs/"+id, nil, nil), "the hostile team's own API still answers")
		})
	}

	// Team t1's run was never disturbed: it finishes once its file is there.
	start := time.Now()
	writeBotFile(t, friendly, "alice", "bots/alice/done")
	final, _ := waitRun(t, friendly, aliceRun, 3*time.Minute)
	t.Logf("t1's run completed %s after its file was written", time.Since(start).Round(time.Millisecond))
	require.Equal(t, runs.StatusCompleted, final.Status)
	require.Equal(t, "done", final.Message)
}

package main

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkWorkerGroup: three `worker serve` processes on the test
// Postgres and one computer (a real botd), owned by the worker that made
// it. It reports (issue 33.7):
//   - a tool call (`shell true`) sent to the owner against the same call
//     sent to another worker, which relays it: p50/p99 each and the extra
//     cost of the relay (200 calls each, alternating);
//   - tool calls per second with 8 callers for 5 s, all through the owner
//     (one worker) and spread over the three workers;
//   - failover over 10 kills: the owner is SIGKILLed, and the time until a
//     call through a survivor succeeds again is taken (a new worker joins
//     after each kill, so that three stay); p50 and max.
func BenchmarkWorkerGroup(b *testing.B) {
	s := newGroupSetup(b, nil)
	db, err := sql.Open("pgx", s.dbURL)
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	w := []*groupWorker{s.start(b, "w0"), s.start(b, "w1"), s.start(b, "w2")}
	c := startComputer(b, "http://127.0.0.1:1", 1580, "VIEW_PORT_BASE=36600")
	e := on(&workerEnv{token: s.token, op: s.op}, w[0]).addComputer(b, c, map[string]any{"team": "bench"}, "bench")
	// call never fails the benchmark itself: the callers' goroutines use it.
	shellTrue, _ := json.Marshal(map[string]any{"botId": "bench", "args": map[string]any{"argv": []string{"true"}}})
	call := func(g *groupWorker) (int, time.Duration) {
		t0 := time.Now()
		st, err := sendJSON("POST", g.url+"/v1/computers/"+e.computer+"/tools/shell", e.token, e.capa, shellTrue)
		if err != nil {
			st = 0
		}
		return st, time.Since(t0)
	}
	owner := func() *groupWorker {
		o, _ := ownerOf(b, db, e.computer)
		for _, g := range w {
			if g.groupURL == o {
				return g
			}
		}
		return nil
	}

	// The relay's cost.
	const n = 200
	var direct, relayed []time.Duration
	for i := 0; i < n; i++ {
		st, d := call(w[0])
		require.Equal(b, http.StatusOK, st)
		direct = append(direct, d)
		st, d = call(w[1+i%2])
		require.Equal(b, http.StatusOK, st)
		relayed = append(relayed, d)
	}
	d50, d99, r50, r99 := pct(direct, 50), pct(direct, 99), pct(relayed, 50), pct(relayed, 99)
	b.ReportMetric(d50, "direct_p50_ms")
	b.ReportMetric(d99, "direct_p99_ms")
	b.ReportMetric(r50, "relayed_p50_ms")
	b.ReportMetric(r99, "relayed_p99_ms")
	b.ReportMetric(r50-d50, "relay_extra_p50_ms")
	b.ReportMetric(r99-d99, "relay_extra_p99_ms")

	// Calls per second through one worker and through three.
	rate := func(through []*groupWorker) float64 {
		var done, failed atomic.Int64
		stop := time.Now().Add(5 * time.Second)
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := i; time.Now().Before(stop); k++ {
					if st, _ := call(through[k%len(through)]); st == http.StatusOK {
						done.Add(1)
					} else {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(b, failed.Load(), "failed calls")
		return float64(done.Load()) / 5
	}
	one, three := rate(w[:1]), rate(w)
	b.ReportMetric(one, "calls/s_1_worker")
	b.ReportMetric(three, "calls/s_3_workers")

	// Failover, 10 kills.
	var fail []time.Duration
	for k := 0; k < 10; k++ {
		o := owner()
		require.NotNil(b, o, "kill %d: a live owner", k)
		var alive []*groupWorker
		for _, g := range w {
			if g != o {
				alive = append(alive, g)
			}
		}
		killed := time.Now()
		o.kill()
		for {
			st, _ := call(alive[k%2])
			if st == http.StatusOK {
				break
			}
			require.Less(b, time.Since(killed), 2*time.Minute, "kill %d: no survivor served the computer", k)
			time.Sleep(50 * time.Millisecond)
		}
		fail = append(fail, time.Since(killed))
		b.Logf("kill %d: served again %s after SIGKILL", k+1, fail[k].Round(time.Millisecond))
		w = append(alive, s.start(b, "w-new"))
	}
	b.ReportMetric(pct(fail, 50)/1000, "failover_p50_s")
	b.ReportMetric(pct(fail, 100)/1000, "failover_max_s")
}

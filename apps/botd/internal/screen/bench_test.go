package screen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// The figures of issue 3 that belong to screens: cold start, click round
// trip and an idle screen's memory. Each benchmark runs its own sample
// loop (run with -benchtime 1x) and reports percentiles as metrics.

const benchDisplayBase = itDisplayBase + 20

func percentile(d []time.Duration, p float64) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return float64(s[i].Microseconds()) / 1000
}

// reportPercentiles reports p50 and the max, and a tail percentile only
// when there are samples enough to mean it: p90 from 30, p99 from 200.
func reportPercentiles(b *testing.B, d []time.Duration) {
	b.ReportMetric(percentile(d, 0.5), "ms-p50")
	if len(d) >= 30 {
		b.ReportMetric(percentile(d, 0.9), "ms-p90")
	}
	if len(d) >= 200 {
		b.ReportMetric(percentile(d, 0.99), "ms-p99")
	}
	b.ReportMetric(percentile(d, 1), "ms-max")
	b.ReportMetric(float64(len(d)), "samples")
}

// BenchmarkScreenColdStart: ensure → running (X accepts the cookie, the
// window manager is up, x11vnc answers). Every sample is a screen id never
// started before, so nothing a first start prepares is reused.
func BenchmarkScreenColdStart(b *testing.B) {
	e := newIT(b, 2, benchDisplayBase)
	ctx := benchCtx(b)
	const samples = 10
	var took []time.Duration
	for i := 0; i < b.N*samples; i++ {
		id := fmt.Sprintf("bench-cold-%d", i)
		start := time.Now()
		_, err := e.m.Ensure(ctx, id)
		require.NoError(b, err)
		took = append(took, time.Since(start))
		require.NoError(b, e.m.Stop(ctx, id))
		require.NoError(b, e.m.Forget(ctx, id))
	}
	reportPercentiles(b, took)
}

// BenchmarkScreenClickRoundTrip: one click through the HTTP API, as a
// client sees it: the JSON request, the lease check, FIFO, XTEST, the
// 450 ms settle, the capture, and the JSON answer with the base64 JPEG
// decoded on the client. 200 samples, so p99 means something.
func BenchmarkScreenClickRoundTrip(b *testing.B) {
	e := newIT(b, 2, benchDisplayBase+2)
	ctx := benchCtx(b)
	_, err := e.m.Register("bench-click")
	require.NoError(b, err)
	l, err := e.m.Leases().Acquire("bench-click", lease.Agent, "bench", time.Hour)
	require.NoError(b, err)
	mux := http.NewServeMux()
	e.m.Routes(mux)
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	act := func(a shared.Action) (*ActResult, int) {
		body, err := json.Marshal(actRequest{LeaseID: l.ID, Actions: []shared.Action{a}})
		require.NoError(b, err)
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/screens/bench-click/act", bytes.NewReader(body))
		require.NoError(b, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		require.NoError(b, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode, string(raw))
		var res ActResult
		require.NoError(b, json.Unmarshal(raw, &res))
		return &res, len(raw)
	}
	act(shared.Action{Type: shared.ActionScreenshot})
	time.Sleep(2 * time.Second) // let the session finish drawing
	const samples = 200
	var took []time.Duration
	var bytesOut int
	for i := 0; i < b.N*samples; i++ {
		x := 700 + 10*(i%20)
		start := time.Now()
		res, n := act(shared.Action{Type: shared.ActionClick, X: intp(x), Y: intp(500)})
		took = append(took, time.Since(start))
		require.Equal(b, shared.Point{X: x, Y: 500}, res.Observation.Pointer)
		bytesOut += n
	}
	reportPercentiles(b, took)
	b.ReportMetric(float64(shared.SettleDefault.Milliseconds()), "ms-settle")
	b.ReportMetric(float64(bytesOut)/float64(len(took))/1024, "kB-json")
}

// BenchmarkScreenIdleRSS: resident memory of every process of one idle
// screen (X, the session and what its bus started, x11vnc).
func BenchmarkScreenIdleRSS(b *testing.B) {
	e := newIT(b, 2, benchDisplayBase+4)
	ctx := benchCtx(b)
	_, err := e.m.Ensure(ctx, "bench-rss")
	require.NoError(b, err)
	time.Sleep(5 * time.Second) // idle: everything started has settled
	ps := e.procs(b, "bench-rss")
	groups := map[int]bool{ps.xvfb.Pid(): true}
	for _, p := range ps.session {
		groups[p.Pid()] = true
	}
	kb, pss, n := groupRSS(b, groups)
	b.ReportMetric(float64(kb)/1024, "MB-rss")
	b.ReportMetric(float64(pss)/1024, "MB-pss")
	b.ReportMetric(float64(n), "processes")
}

// groupRSS sums VmRSS (shared pages counted in every process) and Pss
// (shared pages split between their users) over processes whose process
// group is in groups.
func groupRSS(b *testing.B, groups map[int]bool) (rss, pss, n int) {
	ents, err := os.ReadDir("/proc")
	require.NoError(b, err)
	for _, ent := range ents {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 3 {
			continue
		}
		pgid, _ := strconv.Atoi(f[2])
		if !groups[pgid] {
			continue
		}
		status, err := os.ReadFile("/proc/" + ent.Name() + "/status")
		if err != nil {
			continue
		}
		k := kbField(string(status), "VmRSS:")
		rss += k
		n++
		rollup, _ := os.ReadFile("/proc/" + ent.Name() + "/smaps_rollup")
		p := kbField(string(rollup), "Pss:")
		pss += p
		b.Logf("%-12s rss %6d kB  pss %6d kB", strings.TrimSpace(kvField(string(status), "Name:")), k, p)
	}
	return rss, pss, n
}

func kvField(text, key string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			return v
		}
	}
	return ""
}

func kbField(text, key string) int {
	k, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(kvField(text, key)), " kB"))
	return k
}

func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

package screen

import (
	"context"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/lease"
	"github.com/open-bot/computer/pkg/shared"
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

// BenchmarkScreenColdStart: ensure → running (X accepts the cookie, the
// window manager is up, x11vnc answers), p50 of several starts.
func BenchmarkScreenColdStart(b *testing.B) {
	e := newIT(b, 2, benchDisplayBase)
	ctx := benchCtx(b)
	const samples = 7
	var took []time.Duration
	for i := 0; i < b.N*samples; i++ {
		start := time.Now()
		_, err := e.m.Ensure(ctx, "bench-cold")
		require.NoError(b, err)
		took = append(took, time.Since(start))
		require.NoError(b, e.m.Stop(ctx, "bench-cold"))
	}
	b.ReportMetric(percentile(took, 0.5), "ms-p50")
	b.ReportMetric(percentile(took, 0.9), "ms-p90")
}

// BenchmarkScreenClickRoundTrip: one click through the whole act path
// (lease check, FIFO, XTEST, 450 ms settle, capture) to the observation.
func BenchmarkScreenClickRoundTrip(b *testing.B) {
	e := newIT(b, 2, benchDisplayBase+2)
	ctx := benchCtx(b)
	_, err := e.m.Register("bench-click")
	require.NoError(b, err)
	l, err := e.m.Leases().Acquire("bench-click", lease.Agent, "bench", time.Hour)
	require.NoError(b, err)
	_, err = actIT(e, ctx, "bench-click", l.ID, shared.Action{Type: shared.ActionScreenshot})
	require.NoError(b, err)
	time.Sleep(2 * time.Second) // let the session finish drawing
	const samples = 20
	var took []time.Duration
	for i := 0; i < b.N*samples; i++ {
		x := 700 + 10*(i%20)
		start := time.Now()
		res, err := actIT(e, ctx, "bench-click", l.ID, shared.Action{Type: shared.ActionClick, X: intp(x), Y: intp(500)})
		require.NoError(b, err)
		took = append(took, time.Since(start))
		require.Equal(b, shared.Point{X: x, Y: 500}, res.Observation.Pointer)
	}
	b.ReportMetric(percentile(took, 0.5), "ms-p50")
	b.ReportMetric(percentile(took, 0.99), "ms-p99")
	b.ReportMetric(float64(shared.SettleDefault.Milliseconds()), "ms-settle")
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

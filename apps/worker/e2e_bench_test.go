package main

import (
	"context"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared/client"
)

// BenchmarkE2ERun: the whole scripted acceptance run's wall time (run start
// → end event), on a computer already up.
func BenchmarkE2ERun(b *testing.B) {
	wall := acceptance(b, nil, "", 500)
	b.ReportMetric(float64(wall.Milliseconds()), "run_ms")
}

// BenchmarkToolRelay: one tool call relayed worker → botd → back (the shell
// tool running `true`) against the same call made to botd directly.
func BenchmarkToolRelay(b *testing.B) {
	c := startComputer(b, "http://127.0.0.1:1", 520)
	env := startWorker(b, c, "bench")
	botd := client.New(c.url, c.token, nil)
	ctx := context.Background()
	const n = 200
	direct := make([]float64, 0, n)
	relayed := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		_, err := botd.Exec(ctx, client.ExecRequest{Argv: []string{"true"}})
		require.NoError(b, err)
		direct = append(direct, float64(time.Since(t0).Microseconds())/1000)

		t0 = time.Now()
		var res struct {
			Success bool `json:"success"`
		}
		status := env.do(b, "POST", "/tools/shell", map[string]any{"botId": "bench", "args": map[string]any{"argv": []string{"true"}}}, &res)
		require.Equal(b, http.StatusOK, status)
		require.True(b, res.Success)
		relayed = append(relayed, float64(time.Since(t0).Microseconds())/1000)
	}
	p50 := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
	d, r := p50(direct), p50(relayed)
	b.ReportMetric(d, "direct_p50_ms")
	b.ReportMetric(r, "relayed_p50_ms")
	b.ReportMetric(r-d, "overhead_p50_ms")
}

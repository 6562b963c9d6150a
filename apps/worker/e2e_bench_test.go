package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
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
	// n = 200 samples: enough for a p99.
	pct := func(v []float64, p float64) float64 { sort.Float64s(v); return v[int(float64(len(v)-1)*p)] }
	d50, r50, d99, r99 := pct(direct, 0.5), pct(relayed, 0.5), pct(direct, 0.99), pct(relayed, 0.99)
	b.ReportMetric(d50, "direct_p50_ms")
	b.ReportMetric(r50, "relayed_p50_ms")
	b.ReportMetric(r50-d50, "overhead_p50_ms")
	b.ReportMetric(d99, "direct_p99_ms")
	b.ReportMetric(r99, "relayed_p99_ms")
	b.ReportMetric(r99-d99, "overhead_p99_ms")
}

// BenchmarkWorkerIdleRSS: the resident memory of a `worker serve` process
// (SQLite store, migrations applied, no computers) after it has answered a
// few requests and gone idle.
func BenchmarkWorkerIdleRSS(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "worker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(b, err, "%s", out)
	listen := "127.0.0.1:31501"
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "DATA_DIR="+filepath.Join(dir, "data"), "WORKER_MACHINES_DIR="+filepath.Join(dir, "machines"), "WORKER_LISTEN="+listen, "WORKER_TOKEN=bench-token-0123456789")
	require.NoError(b, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitFor(b, "the worker to listen", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + listen + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	for range 20 {
		req, _ := http.NewRequest("GET", "http://"+listen+"/v1/computers", nil)
		req.Header.Set("Authorization", "Bearer bench-token-0123456789")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		resp.Body.Close()
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	require.NoError(b, err)
	var kb float64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			require.NoError(b, err)
		}
	}
	require.Positive(b, kb)
	b.ReportMetric(kb/1024, "idle_rss_MB")
}

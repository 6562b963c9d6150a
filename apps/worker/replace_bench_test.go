package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// BenchmarkReplacement: a machine is lost behind the worker's back (botd
// SIGKILLed and its home removed; the container and volume removed
// with the docker CLI); from `recover` (a replacement provisioned through
// the stale ref, the latest checkpoint imported before first use) to the
// first successful computer_observe through the worker, p50 of 3, per
// provider (local; docker where an engine has WORKER_IMAGE). The home holds
// a 64 MiB file and 2,000 small ones.
func BenchmarkReplacement(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		requireIntegration(b, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
		dir := openDir(b, "wire-bench-")
		env := map[string]string{
			"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(b, dir),
			"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
		}
		e := providerWorker(b, env, filepath.Join(dir, "machines"), "alice")
		// The machine and its worker-owned home are lost: the replacement
		// imports the checkpoint.
		benchReplacement(b, e, func(ref string) {
			home := benchHome(b, e)
			loseLocal(b, filepath.Join(dir, "machines"), ref, home)
			loseHome(b, home)
		})
	})
	b.Run("docker", func(b *testing.B) {
		image := os.Getenv("WORKER_IMAGE")
		if image == "" {
			image = providers.DefaultImage
		}
		if exec.Command("docker", "image", "inspect", image).Run() != nil {
			b.Skipf("no Docker engine with %s (make image)", image)
		}
		dir := openDir(b, "wire-bench-docker-")
		env := map[string]string{"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image}
		e := providerWorker(b, env, filepath.Join(dir, "machines"), "alice")
		benchReplacement(b, e, func(ref string) {
			home := benchHome(b, e)
			loseDocker(b, ref, home)
			loseHome(b, home)
		})
	})
}

// benchHome is e's computer's worker-owned home.
func benchHome(b *testing.B, e *workerEnv) string {
	c, err := e.w.Store.GetComputer(b.Context(), e.computer)
	require.NoError(b, err)
	return e.w.Computers.HomeDir(c, c.Provider)
}

func benchReplacement(b *testing.B, e *workerEnv, lose func(ref string)) {
	ctx := b.Context()
	var out map[string]any
	require.Equal(b, http.StatusOK, e.do(b, "POST", "/tools/shell", map[string]any{"botId": "alice", "args": map[string]any{"argv": []string{"sh", "-c",
		"mkdir -p bots/alice/data && head -c 67108864 /dev/urandom > bots/alice/data/blob && for i in $(seq 2000); do echo $i > bots/alice/data/f$i; done; echo ok"}}}, &out), "%v", out)
	var cp CheckpointAnswer
	require.Equal(b, http.StatusOK, e.do(b, "POST", "/checkpoint", nil, &cp))
	var total, recov []float64
	for range 3 {
		c, err := e.w.Store.GetComputer(ctx, e.computer)
		require.NoError(b, err)
		lose(c.ProviderRef)
		start := time.Now()
		var rec struct {
			Computer struct{ State, LastError string } `json:"computer"`
		}
		require.Equal(b, http.StatusOK, e.do(b, "POST", "/recover", nil, &rec))
		require.Equal(b, "running", rec.Computer.State, rec.Computer.LastError)
		recov = append(recov, float64(time.Since(start).Milliseconds()))
		require.Equal(b, http.StatusOK, e.do(b, "POST", "/tools/computer_observe", map[string]any{"botId": "alice", "args": map[string]any{}}, &out), "%v", out)
		total = append(total, float64(time.Since(start).Milliseconds()))
		var got map[string]any
		require.Equal(b, http.StatusOK, e.do(b, "POST", "/tools/file_list", map[string]any{"botId": "alice", "args": map[string]any{"path": "bots/alice/data"}}, &got))
	}
	sort.Float64s(total)
	sort.Float64s(recov)
	b.ReportMetric(total[1], "replace_to_observe_p50_ms")
	b.ReportMetric(recov[1], "recover_p50_ms")
	b.ReportMetric(float64(cp.Size)/(1<<20), "checkpoint_MiB")
}

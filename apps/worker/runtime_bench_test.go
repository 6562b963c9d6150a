package main

// Issue 30 requirement 6: where a run's agent loop runs, in figures. Each
// run of the scripted model (mockmodel.ToolLoop) asks for the shell tool
// with `true` rtCalls times, then answers; the model records each request
// with its times (mockmodel.Exchange). Two figures, side by side:
//
//   - run start → first model request: from just before POST /runs is sent
//     to the run's first /v1/responses request read by the model;
//   - a tool round trip: from the model's answer asking for the call
//     (written and flushed) to the next request, carrying that call's
//     output, read by the model.
//
// On docker with the worker runtime (the worker's own loop; the model in
// this process, on the host's loopback) and with the machine runtime
// (Codex's app-server under botd in the container; the model, benchserve,
// on the container's loopback, which shares the host's clock); and on a
// desktop backend, E2B's desktop template on the emulator, with the worker
// runtime, the only one a stock desktop offers (a machine run there is
// refused, and the table says so).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

const (
	// rtRuns runs per backend and runtime are measured, after one
	// warm-up run (its first-request figure is reported apart, "cold").
	rtRuns = 10
	// rtCalls is the shell `true` calls of each run: rtRuns*rtCalls
	// round trips.
	rtCalls = 4
)

// runtimeFigures is one backend and runtime's samples, in ms.
type runtimeFigures struct {
	cold        float64   // the warm-up run's start → first request
	first, trip []float64 // the measured runs'
	// tool is the same shell `true` through the worker's direct tool API
	// (POST /tools/shell, timed by the caller), no model or run: the
	// floor a round trip's runtime overhead sits on.
	tool    []float64
	offered []string // the runtimes the computer's view lists
}

// rtPct is the existing benchmarks' percentile: v sorted, index (n-1)*p.
func rtPct(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[int(float64(len(s)-1)*p)]
}

func rtMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkRuntimeLatency: run start → first model request and one tool
// round trip, p50/p90, for the worker runtime and Codex in the machine on
// docker and for the worker runtime on E2B's desktop template (emulator),
// with ratios to docker's worker runtime (see the top of this file).
// Needs root (the Docker engine), the computer image and the e2b-desktop
// image (make image); under CI=true their absence fails.
func BenchmarkRuntimeLatency(b *testing.B) {
	if os.Geteuid() != 0 {
		requireIntegration(b) // root: the engine's socket and the root-only token files
	}
	image := os.Getenv("WORKER_IMAGE")
	if image == "" {
		image = providers.DefaultImage
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
		emutest.Unavailable(b, "no Docker engine with image %s (make image): %s", image, strings.TrimSpace(string(out)))
	}
	dir := openDir(b, "wire-rtbench-")
	figs := map[string]*runtimeFigures{}
	refusal := ""
	report := func(b *testing.B, f *runtimeFigures) {
		b.ReportMetric(rtPct(f.first, 0.5), "first_p50_ms")
		b.ReportMetric(rtPct(f.first, 0.9), "first_p90_ms")
		b.ReportMetric(rtPct(f.trip, 0.5), "trip_p50_ms")
		b.ReportMetric(rtPct(f.trip, 0.9), "trip_p90_ms")
		b.ReportMetric(f.cold, "cold_first_ms")
		b.ReportMetric(rtPct(f.tool, 0.5), "tool_p50_ms")
	}

	b.Run("docker-worker", func(b *testing.B) {
		model := mockmodel.New(mockmodel.ToolLoop("shell", map[string]any{"argv": []string{"true"}}, rtCalls)).RequireKey(scriptedKey)
		srv := httptest.NewServer(model)
		b.Cleanup(srv.Close)
		e := rtWorker(b, filepath.Join(dir, "dw"), map[string]string{
			"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image,
			"MODEL_UPSTREAM_URL": srv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		}, nil)
		f := rtMeasure(b, e, providers.RuntimeWorker, model.Exchanges)
		require.Equal(b, []string{providers.RuntimeMachine, providers.RuntimeWorker}, f.offered)
		figs["docker-worker"] = f
		report(b, f)
	})
	b.Run("docker-machine", func(b *testing.B) {
		ms := filepath.Join(dir, "benchserve")
		require.NoError(b, os.MkdirAll(ms, 0o755))
		build := exec.Command("go", "build", "-o", filepath.Join(ms, "benchserve"), "github.com/open-bot/computer/apps/worker/internal/mockmodel/benchserve")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		require.NoError(b, err, "build benchserve: %s", out)
		require.NoError(b, os.WriteFile(filepath.Join(ms, "key"), []byte(scriptedKey), 0o600))
		// Codex in the container reaches only the container's loopback:
		// benchserve listens there, and botd hands Codex this URL.
		e := rtWorker(b, filepath.Join(dir, "dm"), map[string]string{
			"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image,
			"MODEL_UPSTREAM_URL": "http://127.0.0.1:18080/v1", "MODEL_API_KEY": scriptedKey,
		}, nil)
		c, err := e.w.Store.GetComputer(b.Context(), e.computer)
		require.NoError(b, err)
		ref := c.ProviderRef
		out, err = exec.Command("docker", "cp", ms+"/.", ref+":/opt/benchserve/").CombinedOutput()
		require.NoError(b, err, "docker cp: %s", out)
		out, err = exec.Command("docker", "exec", "-d", ref, "/opt/benchserve/benchserve", "-key-file", "/opt/benchserve/key",
			"-calls", fmt.Sprint(rtCalls), "-exchanges", "/tmp/benchserve/exchanges").CombinedOutput()
		require.NoError(b, err, "docker exec benchserve: %s", out)
		waitFor(b, "benchserve in the container", 30*time.Second, func() bool {
			return exec.Command("docker", "exec", ref, "test", "-d", "/tmp/benchserve").Run() == nil
		})
		exchanges := func() []mockmodel.Exchange {
			out, err := exec.Command("docker", "exec", ref, "cat", "/tmp/benchserve/exchanges").Output()
			if err != nil {
				return nil // none yet
			}
			var all []mockmodel.Exchange
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				var ex mockmodel.Exchange
				require.NoError(b, json.Unmarshal(sc.Bytes(), &ex), "%s", sc.Text())
				all = append(all, ex)
			}
			return all
		}
		f := rtMeasure(b, e, providers.RuntimeMachine, exchanges)
		figs["docker-machine"] = f
		report(b, f)
	})
	b.Run("e2b-desktop-worker", func(b *testing.B) {
		emu := emutest.Start(b, map[string]emulator.Template{
			e2b.DefaultTemplate: {Image: emutest.Image(), User: "root"},
			e2b.DesktopTemplate: emutest.DesktopTemplate(),
		}, nil)
		model := mockmodel.New(mockmodel.ToolLoop("shell", map[string]any{"argv": []string{"true"}}, rtCalls)).RequireKey(scriptedKey)
		srv := httptest.NewServer(model)
		b.Cleanup(srv.Close)
		// The emulator itself, not the spec checker's proxy (as
		// BenchmarkE2BVsDocker): the figures are the worker's and the
		// emulator's, not the checker's validation.
		e := rtWorker(b, filepath.Join(dir, "ew"), map[string]string{
			"WORKER_PROVIDER": providers.KindE2B, "E2B_API_KEY": emu.APIKey,
			"E2B_API_URL": emu.URL, "E2B_SANDBOX_URL": emu.URL, "E2B_TEMPLATE": e2b.DefaultTemplate,
			"MODEL_UPSTREAM_URL": srv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		}, map[string]any{"template": e2b.DesktopTemplate})
		// Codex in the machine is not offered on a stock desktop: a run
		// asking for it is refused before anything starts.
		var refused struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		status := e.do(b, "POST", "/runs", map[string]string{"botId": "alice", "prompt": "hello", "runtime": providers.RuntimeMachine}, &refused)
		require.Equal(b, http.StatusNotImplemented, status)
		require.Equal(b, "unavailable", refused.Error.Code)
		refusal = fmt.Sprintf("not offered: POST /runs runtime machine -> %d %s", status, refused.Error.Code)
		f := rtMeasure(b, e, providers.RuntimeWorker, model.Exchanges)
		require.Equal(b, []string{providers.RuntimeWorker}, f.offered)
		figs["e2b-desktop-worker"] = f
		report(b, f)
	})
	b.Run("ratios", func(b *testing.B) {
		base := figs["docker-worker"]
		if base == nil || len(figs) < 3 {
			b.Skip("a backend above did not run")
		}
		x := func(f *runtimeFigures, pick func(*runtimeFigures) []float64) float64 {
			return rtPct(pick(f), 0.5) / rtPct(pick(base), 0.5)
		}
		first := func(f *runtimeFigures) []float64 { return f.first }
		trip := func(f *runtimeFigures) []float64 { return f.trip }
		b.ReportMetric(x(figs["docker-machine"], first), "docker-machine/worker-first-x")
		b.ReportMetric(x(figs["docker-machine"], trip), "docker-machine/worker-trip-x")
		b.ReportMetric(x(figs["e2b-desktop-worker"], first), "e2b-desktop/docker-worker-first-x")
		b.ReportMetric(x(figs["e2b-desktop-worker"], trip), "e2b-desktop/docker-worker-trip-x")
		b.Logf("runtime-table: %-13s %-8s %9s %9s %9s %9s %9s %8s %8s %9s", "backend", "runtime", "first p50", "first p90", "trip p50", "trip p90", "cold 1st", "first x", "trip x", "tool p50")
		row := func(backend, runtime, key string) {
			f := figs[key]
			b.Logf("runtime-table: %-13s %-8s %9.1f %9.1f %9.1f %9.1f %9.1f %7.2fx %7.2fx %9.1f", backend, runtime,
				rtPct(f.first, 0.5), rtPct(f.first, 0.9), rtPct(f.trip, 0.5), rtPct(f.trip, 0.9), f.cold, x(f, first), x(f, trip), rtPct(f.tool, 0.5))
		}
		row("docker", "worker", "docker-worker")
		row("docker", "machine", "docker-machine")
		row("e2b-desktop", "worker", "e2b-desktop-worker")
		b.Logf("runtime-table: %-13s %-8s %s", "e2b-desktop", "machine", refusal)
	})
}

// rtWorker is a worker served in-process (its log discarded: the figures
// are not the log's) on env's provider, with one Team computer made with
// extra in its create body and bot alice added; the computer is destroyed
// before the worker closes.
func rtWorker(b testing.TB, dir string, env map[string]string, extra map[string]any) *workerEnv {
	b.Helper()
	require.NoError(b, os.MkdirAll(dir, 0o755))
	e := serveOnProvider(b, filepath.Join(dir, "data"), filepath.Join(dir, "machines"), "scripted-model", env, zerolog.Nop())
	body := map[string]any{"scope": map[string]string{"team": "t1"}}
	for k, v := range extra {
		body[k] = v
	}
	var created createdComputer
	require.Equal(b, http.StatusCreated, post(b, e.url+"/v1/computers", e.token, body, &created), "%+v", created.Error)
	require.Equal(b, "running", created.Computer.State, created.Computer.LastError)
	e.computer, e.capa = created.Computer.ID, created.Capability
	require.Equal(b, http.StatusCreated, e.do(b, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	return e
}

// rtMeasure runs one warm-up run and rtRuns measured runs of runtime on
// e's computer for bot alice, one after the other, each to its end, and
// takes the figures from the model's exchanges (exchanges returns all so
// far, in order); then rtRuns*rtCalls direct shell `true` calls.
func rtMeasure(b testing.TB, e *workerEnv, runtime string, exchanges func() []mockmodel.Exchange) *runtimeFigures {
	b.Helper()
	f := &runtimeFigures{}
	var view struct {
		Computer struct {
			Runtimes []string `json:"runtimes"`
		} `json:"computer"`
	}
	require.Equal(b, http.StatusOK, e.do(b, "GET", "", nil, &view))
	f.offered = view.Computer.Runtimes
	prompt := fmt.Sprintf("Run `true` with the shell tool %d times, one call at a time, then say done.", rtCalls)
	for i := 0; i <= rtRuns; i++ {
		before := len(exchanges())
		t0 := time.Now()
		id := e.startRunOn(b, "alice", prompt, runtime)
		final, _ := waitRun(b, e, id, 5*time.Minute)
		require.Equal(b, runs.StatusCompleted, final.Status, "run %d: %s", i, final.Error)
		require.Len(b, final.ToolCalls, rtCalls)
		for _, tc := range final.ToolCalls {
			require.True(b, tc.Success, "%+v", tc)
			require.Equal(b, "shell", tc.Tool)
		}
		ex := exchanges()
		require.Len(b, ex, before+rtCalls+1, "one model request per call and one after the last")
		ex = ex[before:]
		require.Empty(b, ex[0].Outputs, "the run's first request carries no tool output")
		first := rtMs(ex[0].Read.Sub(t0))
		require.Positive(b, first)
		if i == 0 {
			f.cold = first
		} else {
			f.first = append(f.first, first)
		}
		for j := range rtCalls {
			require.Equal(b, "shell", ex[j].Tool)
			require.Contains(b, ex[j+1].Outputs, ex[j].CallID, "request %d carries call %s's output", j+1, ex[j].CallID)
			trip := rtMs(ex[j+1].Read.Sub(ex[j].Answered))
			require.Positive(b, trip)
			if i > 0 {
				f.trip = append(f.trip, trip)
			}
		}
		require.Empty(b, ex[rtCalls].Tool, "the last answer is a message")
	}
	for range rtRuns * rtCalls {
		var res struct {
			Success bool `json:"success"`
		}
		t0 := time.Now()
		status := e.do(b, "POST", "/tools/shell", map[string]any{"botId": "alice", "args": map[string]any{"argv": []string{"true"}}}, &res)
		f.tool = append(f.tool, rtMs(time.Since(t0)))
		require.Equal(b, http.StatusOK, status)
		require.True(b, res.Success)
	}
	return f
}

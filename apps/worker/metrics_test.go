package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/metrics"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// scrapeMetrics GETs url's series (with bearer when set) as a map from
// each sample's name and labels, as the text format prints them, to its
// value.
func scrapeMetrics(t testing.TB, url, bearer string) (map[string]float64, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	out := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		require.Positive(t, i, "a sample line: %q", l)
		v, err := strconv.ParseFloat(l[i+1:], 64)
		require.NoError(t, err, "%q", l)
		out[l[:i]] = v
	}
	return out, string(b)
}

// TestMetricsMoveWithARun: the operator's metrics listener, scraped before
// and after a run of the worker runtime on a local computer (a scripted
// model asks for one file_write, then answers): the run's end, its tool
// call by tool and provider, its two model requests, the API requests by
// route (the pattern, never the ids), the checkpoint at the run's end and
// the computers by provider and state all move; no token, capability or
// computer id is in the scrape.
func TestMetricsMoveWithARun(t *testing.T) {
	requireIntegration(t, "Xvfb", "chromium", "x11vnc", "xfwm4")
	dir := openDir(t, "wire-metrics-")
	model := newHostModel(t, scriptedKey)
	const bot = "bob"
	model.play(func(outs []mockmodel.Output) mockmodel.Step {
		if len(outs) == 0 {
			return mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": "bots/" + bot + "/metrics.txt", "content": "counted\n"}}
		}
		return mockmodel.Step{Message: "done"}
	})
	env := model.env(map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
	})
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ln, err := serveMetrics(ctx, "127.0.0.1:0", "", e.w.Metrics, testLog(t))
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/metrics"

	before, _ := scrapeMetrics(t, url, "")
	id := e.startRunOn(t, bot, "Write the file.", providers.RuntimeWorker)
	final, _ := waitRun(t, e, id, 5*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, "%+v", final)
	after, text := scrapeMetrics(t, url, "")

	moved := func(series string) float64 { return after[series] - before[series] }
	require.Equal(t, 1.0, moved(`openbot_worker_runs_ended_total{state="completed"}`), "the run's end")
	require.Equal(t, 1.0, moved(`openbot_worker_tool_call_duration_seconds_count{outcome="ok",provider="local",tool="file_write"}`), "its tool call")
	require.Equal(t, 2.0, moved(`openbot_worker_model_request_duration_seconds_count{outcome="ok"}`), "a model request per step")
	require.Equal(t, 1.0, moved(`openbot_worker_http_requests_total{route="POST /v1/computers/{id}/runs",status="201"}`), "the start, by its route")
	require.GreaterOrEqual(t, moved(`openbot_worker_checkpoint_duration_seconds_count{outcome="ok"}`), 1.0, "the run's end checkpointed")
	require.Equal(t, 1.0, after[`openbot_worker_computers{provider="local",state="running"}`])
	require.Equal(t, 0.0, after[`openbot_worker_runs{state="running"}`])
	require.Contains(t, after, `openbot_worker_runs{state="running"}`, "live runs are counted, zero too")
	require.Equal(t, 0.0, after["openbot_worker_scrape_store_errors"])
	for _, secret := range []string{e.token, e.capa, e.computer, scriptedKey, id} {
		require.NotContains(t, text, secret, "a credential or an id in the metrics")
	}
}

// TestMetricsListenerIsTheOperators: a non-loopback metrics address needs
// the operator's token, and with one every scrape must present it.
func TestMetricsListenerIsTheOperators(t *testing.T) {
	m := metrics.New()
	_, err := serveMetrics(t.Context(), "0.0.0.0:0", "", m, testLog(t))
	require.ErrorContains(t, err, "WORKER_OPERATOR_TOKEN")
	const op = "operator-token-0123456789abcdef"
	ln, err := serveMetrics(t.Context(), "127.0.0.1:0", op, m, testLog(t))
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/metrics"
	for _, bearer := range []string{"", "not-the-operator-token-0123456789"} {
		req, _ := http.NewRequest("GET", url, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "bearer %q", bearer)
	}
	got, _ := scrapeMetrics(t, url, op)
	require.Contains(t, got, "go_goroutines", "the operator's scrape")
}

// Package metrics is the worker's Prometheus metrics (issue 33), served
// on the operator's listener (WORKER_METRICS_LISTEN) and nowhere else.
// Labels are bounded sets: a route is the API's pattern, never a path with
// ids in it; a tool is a name from the tool table; a provider is a kind.
// Nothing a caller sends (ids, tokens, prompts) becomes a label value.
//
// A nil *Metrics takes every observation and does nothing, so a worker
// without the listener pays nothing and callers need no checks.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Source is what a scrape reads of the worker's state.
type Source interface {
	// Computers counts the computers by provider kind and observed state.
	Computers(ctx context.Context) (map[[2]string]int, error)
	// LiveRuns counts the runs in each live state (queued, running,
	// waiting_takeover).
	LiveRuns(ctx context.Context) (map[string]int, error)
	// PoolReady counts the ready machines of the warm pool by kind.
	PoolReady() map[string]int
}

// Metrics holds the worker's series.
type Metrics struct {
	reg               *prometheus.Registry
	requests          *prometheus.CounterVec
	requestSeconds    *prometheus.HistogramVec
	toolSeconds       *prometheus.HistogramVec
	runsEnded         *prometheus.CounterVec
	poolHandout       *prometheus.HistogramVec
	checkpointBytes   prometheus.Histogram
	checkpointSeconds *prometheus.HistogramVec
	modelSeconds      *prometheus.HistogramVec
	ownership         *prometheus.CounterVec
	relaySeconds      *prometheus.HistogramVec
}

// New makes the series; Watch adds the ones read at each scrape.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "openbot_worker_http_requests_total", Help: "API requests by route (the API's pattern) and status.",
	}, []string{"route", "status"})
	m.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "openbot_worker_http_request_duration_seconds", Help: "API request duration by route (websockets: until they close).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"route"})
	m.toolSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "openbot_worker_tool_call_duration_seconds", Help: "Tool calls the worker made (the API, MCP and the worker runtime's loop) by tool, provider and outcome.",
		Buckets: prometheus.ExponentialBuckets(0.005, 3, 10),
	}, []string{"tool", "provider", "outcome"})
	m.runsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "openbot_worker_runs_ended_total", Help: "Runs this worker saw end, by final state.",
	}, []string{"state"})
	m.poolHandout = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "openbot_worker_pool_handout_duration_seconds", Help: "A create served from the warm pool: taking the machine to the answer, by provider.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"provider"})
	m.checkpointBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "openbot_worker_checkpoint_bytes", Help: "Size of each checkpoint written (the exported home, or the revision marker's record).",
		Buckets: prometheus.ExponentialBuckets(1024, 8, 10),
	})
	m.checkpointSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "openbot_worker_checkpoint_duration_seconds", Help: "Checkpoints by outcome.",
		Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
	}, []string{"outcome"})
	m.modelSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "openbot_worker_model_request_duration_seconds", Help: "The worker runtime's model upstream requests by outcome.",
		Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
	}, []string{"outcome"})
	m.ownership = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "openbot_worker_group_ownership_changes_total", Help: "A worker group's computer ownership changes on this worker: gained (created, claimed from a lost owner) or lost (fenced, stale, let go).",
	}, []string{"change"})
	m.relaySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "openbot_worker_group_relay_duration_seconds", Help: "Requests this worker relayed to the computer's owner in its group, by outcome (websockets: until they close).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"outcome"})
	m.reg.MustRegister(m.requests, m.requestSeconds, m.toolSeconds, m.runsEnded, m.poolHandout,
		m.checkpointBytes, m.checkpointSeconds, m.modelSeconds, m.ownership, m.relaySeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Watch reads src at each scrape (once: a second Watch panics).
func (m *Metrics) Watch(src Source) {
	m.reg.MustRegister(&stateCollector{src: src})
}

// Handler serves the series in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Request counts an API request.
func (m *Metrics) Request(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.requestSeconds.WithLabelValues(route).Observe(d.Seconds())
}

// ToolCall records one tool call.
func (m *Metrics) ToolCall(tool, provider string, ok bool, d time.Duration) {
	if m == nil {
		return
	}
	m.toolSeconds.WithLabelValues(tool, provider, outcome(ok)).Observe(d.Seconds())
}

// RunEnded counts a run's end in state.
func (m *Metrics) RunEnded(state string) {
	if m == nil {
		return
	}
	m.runsEnded.WithLabelValues(state).Inc()
}

// PoolHandout records a create served from the pool.
func (m *Metrics) PoolHandout(provider string, d time.Duration) {
	if m == nil {
		return
	}
	m.poolHandout.WithLabelValues(provider).Observe(d.Seconds())
}

// Checkpoint records a checkpoint: its size when written.
func (m *Metrics) Checkpoint(size int64, ok bool, d time.Duration) {
	if m == nil {
		return
	}
	if ok {
		m.checkpointBytes.Observe(float64(size))
	}
	m.checkpointSeconds.WithLabelValues(outcome(ok)).Observe(d.Seconds())
}

// ModelRequest records one request to the model upstream.
func (m *Metrics) ModelRequest(ok bool, d time.Duration) {
	if m == nil {
		return
	}
	m.modelSeconds.WithLabelValues(outcome(ok)).Observe(d.Seconds())
}

// Ownership counts a group ownership change: "gained" or "lost".
func (m *Metrics) Ownership(change string) {
	if m == nil {
		return
	}
	m.ownership.WithLabelValues(change).Inc()
}

// Relay records one request relayed to a peer.
func (m *Metrics) Relay(ok bool, d time.Duration) {
	if m == nil {
		return
	}
	m.relaySeconds.WithLabelValues(outcome(ok)).Observe(d.Seconds())
}

func outcome(ok bool) string {
	if ok {
		return "ok"
	}
	return "error"
}

var (
	computersDesc = prometheus.NewDesc("openbot_worker_computers", "Computers in the store by provider and observed state (destroyed ones left out).", []string{"provider", "state"}, nil)
	runsDesc      = prometheus.NewDesc("openbot_worker_runs", "Live runs in the store by state.", []string{"state"}, nil)
	poolDesc      = prometheus.NewDesc("openbot_worker_pool_ready", "Ready machines in the warm pool by provider.", []string{"provider"}, nil)
	scrapeErrDesc = prometheus.NewDesc("openbot_worker_scrape_store_errors", "1 when this scrape could not read the store (the store-backed series are missing then).", nil, nil)
)

// stateCollector reads the store and the pool at each scrape.
type stateCollector struct{ src Source }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- computersDesc
	ch <- runsDesc
	ch <- poolDesc
	ch <- scrapeErrDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := 0.0
	if comps, err := c.src.Computers(ctx); err != nil {
		failed = 1
	} else {
		for k, n := range comps {
			ch <- prometheus.MustNewConstMetric(computersDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
		}
	}
	if runs, err := c.src.LiveRuns(ctx); err != nil {
		failed = 1
	} else {
		for state, n := range runs {
			ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(n), state)
		}
	}
	for kind, n := range c.src.PoolReady() {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(n), kind)
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, failed)
}

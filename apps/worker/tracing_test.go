package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// Where TestTracesFollowAToolCallAndARun's botd runs.
const (
	traceDisplayBase  = 1540
	traceViewPortBase = 34800
)

// otlpReceiver is a loopback OTLP/HTTP trace receiver, as a collector
// is one: every export's raw bytes and its decoded spans are kept.
type otlpReceiver struct {
	srv *httptest.Server
	// mu guards everything below.
	mu       sync.Mutex
	raw      [][]byte
	spans    []*tracepb.Span
	services []string
}

func newOTLPReceiver(t testing.TB) *otlpReceiver {
	o := &otlpReceiver{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			t.Errorf("OTLP receiver: %s %s, want POST /v1/traces", r.Method, r.URL.Path)
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("OTLP receiver: not an ExportTraceServiceRequest: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.raw = append(o.raw, b)
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					o.services = append(o.services, a.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				o.spans = append(o.spans, ss.Spans...)
			}
		}
		o.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// got returns the spans and raw exports so far.
func (o *otlpReceiver) got() ([]*tracepb.Span, []byte, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*tracepb.Span{}, o.spans...), bytes.Join(o.raw, nil), append([]string{}, o.services...)
}

// spanAttrs is a span's attributes as strings (ints in decimal).
func spanAttrs(s *tracepb.Span) map[string]any {
	out := map[string]any{}
	for _, a := range s.Attributes {
		switch v := a.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[a.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[a.Key] = v.IntValue
		default:
			out[a.Key] = a.GetValue().String()
		}
	}
	return out
}

// tracedWorker serves a worker in-process whose env is env over the
// process's (the model's, the OTLP endpoint), its log into logs.
func tracedWorker(t testing.TB, env map[string]string, logs io.Writer) *workerEnv {
	t.Helper()
	e := &workerEnv{token: "worker-token-trace-" + randHex(8), op: "operator-token-trace-" + randHex(8), dataDir: t.TempDir(), logs: logs,
		tweak: func(cfg *serveConfig) {
			cfg.Getenv = func(k string) string {
				if v, ok := env[k]; ok {
					return v
				}
				return os.Getenv(k)
			}
		}}
	e.serve(t, "scripted-model")
	return e
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// logLines is the worker's JSON log lines.
func logLines(t testing.TB, s string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "a log line: %s", sc.Text())
		out = append(out, m)
	}
	return out
}

// TestTracesFollowAToolCallAndARun: with OTEL_EXPORTER_OTLP_ENDPOINT set
// to a loopback OTLP/HTTP receiver, one direct tool call (file_write)
// against a real botd is one trace: the API request's server span, its
// tool span, and the botd client span of the file's PUT under the tool
// span; a run of the worker runtime that makes the same call is a run
// span under its start request's span, its tool span under the run span
// and the botd calls under those. The access log line and the run's log
// line carry their trace ids; the exported bytes carry no token,
// capability, key, prompt, file name or content.
func TestTracesFollowAToolCallAndARun(t *testing.T) {
	rec := newOTLPReceiver(t)
	model := newHostModel(t, scriptedKey)
	marker := randHex(8)
	const bot = "alice"
	file := "bots/" + bot + "/trace-" + marker + ".txt"
	content := "content-" + marker
	model.play(func(outs []mockmodel.Output) mockmodel.Step {
		if len(outs) == 0 {
			return mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": file, "content": content}}
		}
		return mockmodel.Step{Message: "done"}
	})
	c := startComputer(t, "http://127.0.0.1:1", traceDisplayBase, fmt.Sprintf("VIEW_PORT_BASE=%d", traceViewPortBase))
	var logs syncBuffer
	e := tracedWorker(t, model.env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rec.srv.URL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_SERVICE_NAME": "",
	}), &logs)
	require.NotNil(t, e.w.Tracing, "tracing on with an endpoint")
	e = e.addComputer(t, c, map[string]any{"team": "t1"}, bot)

	st, res := e.tool(t, bot, "file_write", map[string]any{"path": file, "content": content})
	require.Equal(t, http.StatusOK, st, "%+v", res)
	require.True(t, res.Success, res.text())
	prompt := "Write the file, prompt-" + marker
	id := e.startRunOn(t, bot, prompt, providers.RuntimeWorker)
	final, _ := waitRun(t, e, id, 3*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, "%+v", final)

	// The request and run spans end after their answers went out: flush
	// until both are in.
	const toolRoute, startRoute = "POST /v1/computers/{id}/tools/{name}", "POST /v1/computers/{id}/runs"
	named := func(spans []*tracepb.Span, name string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	var spans []*tracepb.Span
	var raw []byte
	var services []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		require.NoError(t, e.w.Tracing.Flush(t.Context()))
		spans, raw, services = rec.got()
		if len(named(spans, toolRoute)) == 1 && len(named(spans, "run")) == 1 && len(named(spans, startRoute)) == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "spans so far: %v", spanNames(spans))
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, services, "open-bot-worker")
	byParent := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byParent[hex.EncodeToString(s.ParentSpanId)] = append(byParent[hex.EncodeToString(s.ParentSpanId)], s)
	}
	children := func(p *tracepb.Span, name string) []*tracepb.Span {
		return named(byParent[hex.EncodeToString(p.SpanId)], name)
	}
	sameTrace := func(root *tracepb.Span, ss ...*tracepb.Span) {
		t.Helper()
		for _, s := range ss {
			require.Equal(t, hex.EncodeToString(root.TraceId), hex.EncodeToString(s.TraceId), "span %q in %q's trace", s.Name, root.Name)
		}
	}

	// The direct tool call.
	req := named(spans, toolRoute)[0]
	require.Empty(t, req.ParentSpanId, "the request's span is its trace's root")
	require.Equal(t, tracepb.Span_SPAN_KIND_SERVER, req.Kind)
	require.Equal(t, map[string]any{"http.request.method": "POST", "http.route": toolRoute, "http.response.status_code": int64(200)}, spanAttrs(req))
	tools := children(req, "tool file_write")
	require.Len(t, tools, 1, "the tool span under the request's; spans: %v", spanNames(spans))
	tool := tools[0]
	require.Equal(t, map[string]any{"openbot.tool": "file_write", "openbot.provider": "attach", "openbot.computer_id": e.computer}, spanAttrs(tool))
	require.NotEqual(t, tracepb.Status_STATUS_CODE_ERROR, tool.GetStatus().GetCode())
	puts := children(tool, "botd PUT")
	require.NotEmpty(t, puts, "the file's PUT to botd under the tool span; spans: %v", spanNames(spans))
	require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, puts[0].Kind)
	put := spanAttrs(puts[0])
	require.Equal(t, "PUT", put["http.request.method"])
	require.Equal(t, "/files", put["url.path"], "the path without its query (the file's name)")
	require.Contains(t, []int64{200, 204}, put["http.response.status_code"])
	require.Len(t, put, 3, "%v", put)
	sameTrace(req, tool)
	sameTrace(req, puts...)

	// The run.
	start := named(spans, startRoute)[0]
	runSpan := named(spans, "run")[0]
	require.Equal(t, hex.EncodeToString(start.SpanId), hex.EncodeToString(runSpan.ParentSpanId), "the run's span under its start request's")
	require.Equal(t, map[string]any{"openbot.run_id": id, "openbot.bot_id": bot, "openbot.runtime": providers.RuntimeWorker,
		"openbot.computer_id": e.computer, "openbot.run_state": "completed"}, spanAttrs(runSpan))
	runTools := children(runSpan, "tool file_write")
	require.Len(t, runTools, 1, "the run's tool call under its span; spans: %v", spanNames(spans))
	runPuts := children(runTools[0], "botd PUT")
	require.NotEmpty(t, runPuts, "its PUT to botd under the tool span")
	own := 0
	for _, s := range byParent[hex.EncodeToString(runSpan.SpanId)] {
		if strings.HasPrefix(s.Name, "botd ") {
			own++
		}
	}
	require.Positive(t, own, "the run's own botd calls (its folder) under its span; spans: %v", spanNames(spans))
	sameTrace(start, runSpan, runTools[0])
	sameTrace(start, runPuts...)
	require.NotEqual(t, hex.EncodeToString(req.TraceId), hex.EncodeToString(start.TraceId), "two traces")

	// Nothing a caller sends or holds is in a span.
	for _, secret := range []string{e.token, e.op, e.capa, c.token, scriptedKey, marker, "Bearer", "Cookie"} {
		require.False(t, bytes.Contains(raw, []byte(secret)), "%q in the exported spans", secret)
	}

	// The log lines carry the trace ids.
	var reqLine, runLine map[string]any
	for _, l := range logLines(t, logs.String()) {
		if l["message"] == "request" && l["path"] == "/v1/computers/"+e.computer+"/tools/file_write" {
			reqLine = l
		}
		if l["message"] == "run ended" && l["run"] == id {
			runLine = l
		}
	}
	require.NotNil(t, reqLine, "the tool call's access log line")
	require.Equal(t, hex.EncodeToString(req.TraceId), reqLine["trace_id"])
	require.Equal(t, hex.EncodeToString(req.SpanId), reqLine["span_id"])
	require.NotNil(t, runLine, "the run's end in the log")
	require.Equal(t, hex.EncodeToString(runSpan.TraceId), runLine["trace_id"])
	require.Equal(t, hex.EncodeToString(runSpan.SpanId), runLine["span_id"])
}

func spanNames(spans []*tracepb.Span) []string {
	out := make([]string, 0, len(spans))
	for _, s := range spans {
		out = append(out, s.Name+"("+hex.EncodeToString(s.SpanId)[:6]+"<"+hex.EncodeToString(s.ParentSpanId)+")")
	}
	return out
}

// TestTracesOffExportNothing: without an OTLP endpoint the worker has no
// tracing, a receiver that is up hears nothing, and its log lines carry
// no trace id, even with the other OTEL_* settings present.
func TestTracesOffExportNothing(t *testing.T) {
	rec := newOTLPReceiver(t)
	var logs syncBuffer
	e := tracedWorker(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
		"OTEL_SERVICE_NAME": "open-bot-worker-off", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
	}, &logs)
	require.Nil(t, e.w.Tracing, "no endpoint, no tracing")
	for range 3 {
		st, body := raw(t, "GET", e.url+"/v1/computers", e.token, "", nil)
		require.Equal(t, http.StatusOK, st, body)
	}
	require.NoError(t, e.w.Tracing.Flush(context.Background()))
	time.Sleep(200 * time.Millisecond)
	spans, b, _ := rec.got()
	require.Empty(t, spans)
	require.Empty(t, b)
	n := 0
	for _, l := range logLines(t, logs.String()) {
		if l["message"] == "request" {
			n++
			require.NotContains(t, l, "trace_id")
			require.NotContains(t, l, "span_id")
		}
	}
	require.Equal(t, 3, n, "the access log lines")
}

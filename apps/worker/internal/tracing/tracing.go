// Package tracing is the worker's OpenTelemetry traces (issue 33): spans
// for API requests, runs, tool calls and the calls to a machine's botd,
// sent with the OTLP/HTTP exporter. It is off unless the standard
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set.
//
// A nil *Tracing takes every call and does nothing (the context comes
// back as it went in), so a worker without an endpoint pays nothing and
// callers need no checks.
//
// What goes into a span is a name from a bounded set (a route pattern, a
// tool name, botd's method) and a few attributes: ids, kinds, statuses,
// paths without their query. Never a header, query string, body, token,
// cookie, capability, prompt or error text.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/open-bot/computer/pkg/shared/client"
)

// ServiceName is the service.name of the worker's spans unless
// OTEL_SERVICE_NAME names another.
const ServiceName = "open-bot-worker"

// Span names (docs/operations.md, Traces, lists them). A request's span
// is named by its route pattern ("POST /v1/computers/{id}/tools/{name}").
const (
	// SpanRun is a run's whole life.
	SpanRun = "run"
	// SpanToolPrefix + the tool's name is one tool call ("tool file_write").
	SpanToolPrefix = "tool "
	// SpanBotdPrefix + the method is one call to a machine's botd
	// ("botd PUT").
	SpanBotdPrefix = "botd "
	// SpanRelayPrefix + the method is a request this worker relayed to the
	// computer's owner in its worker group ("relay POST"); the owner's
	// server span is its child.
	SpanRelayPrefix = "relay "
)

// Tracing makes the worker's spans and sends them to the collector.
type Tracing struct {
	tp      *sdktrace.TracerProvider
	tr      trace.Tracer
	service string
}

// Service is the spans' service.name.
func (t *Tracing) Service() string { return t.service }

// Endpoint is the OTLP/HTTP traces URL getenv configures: the traces
// endpoint as it is, else the general one with /v1/traces; "" when
// neither is set (tracing off).
func Endpoint(getenv func(string) string) string {
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); v != "" {
		return v
	}
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); v != "" {
		return strings.TrimRight(v, "/") + "/v1/traces"
	}
	return ""
}

// FromEnv returns the worker's tracing as getenv configures it, or nil
// (off) when no endpoint is set. Other OTEL_EXPORTER_OTLP_* settings
// (headers, timeout, compression) and OTEL_TRACES_SAMPLER are read from
// the process's env by the exporter and the SDK.
func FromEnv(ctx context.Context, getenv func(string) string) (*Tracing, error) {
	ep := Endpoint(getenv)
	if ep == "" {
		return nil, nil
	}
	if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT: want an http:// or https:// URL (OTLP/HTTP), got %q", ep)
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(ep))
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	name := strings.TrimSpace(getenv("OTEL_SERVICE_NAME"))
	if name == "" {
		name = ServiceName
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tp: tp, tr: tp.Tracer("github.com/open-bot/computer/apps/worker"), service: name}, nil
}

// Flush sends the spans ended so far.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown sends what is left and stops; spans started after it are
// dropped. Safe twice.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Relay starts the span of a request relayed to a peer of the worker
// group (peer is the computer, never a credential) and puts its W3C trace
// context into h, the relayed request's headers, after removing any the
// caller sent: only a peer's trace context is ever taken as a parent.
func (t *Tracing) Relay(ctx context.Context, method, computer string, h http.Header) func(status int) {
	h.Del("traceparent")
	h.Del("tracestate")
	if t == nil {
		return noopStatus
	}
	ctx, span := t.tr.Start(ctx, SpanRelayPrefix+method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", method), attribute.String("computer", computer)))
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	return func(status int) {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 || status == 0 {
			span.SetStatus(codes.Error, "relay failed")
		}
		span.End()
	}
}

// FromPeer is ctx under the trace context a peer of the worker group sent
// in h (a relayed request, its group token already checked): the owner's
// spans join the relaying worker's trace. Nothing else takes a parent
// from a request.
func FromPeer(ctx context.Context, h http.Header) context.Context {
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(h))
}

// noop is what an off tracing hands back to end a span.
var (
	noopStatus = func(int) {}
	noopTool   = func(bool, string) {}
	noopRun    = func(string) {}
)

// Request starts the server span of one API request, named by route (the
// mux's pattern; "unmatched" for none). The returned func ends it with
// the answer's status.
func (t *Tracing) Request(ctx context.Context, method, route string) (context.Context, func(status int)) {
	if t == nil {
		return ctx, noopStatus
	}
	if route == "" {
		route = "unmatched"
	}
	ctx, span := t.tr.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", method), attribute.String("http.route", route)))
	return t.hook(ctx), func(status int) {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
}

// Tool starts the span of one tool call on computer (of provider kind
// provider). The returned func ends it: ok false marks it failed, with
// code (the tool's error code, never its text).
func (t *Tracing) Tool(ctx context.Context, tool, provider, computer string) (context.Context, func(ok bool, code string)) {
	if t == nil {
		return ctx, noopTool
	}
	ctx, span := t.tr.Start(ctx, SpanToolPrefix+tool, trace.WithAttributes(
		attribute.String("openbot.tool", tool), attribute.String("openbot.provider", provider),
		attribute.String("openbot.computer_id", computer)))
	return t.hook(ctx), func(ok bool, code string) {
		if !ok {
			if code == "" {
				code = "failed"
			}
			span.SetAttributes(attribute.String("openbot.error_code", code))
			span.SetStatus(codes.Error, code)
		}
		span.End()
	}
}

// Run starts the span of one run; its tool calls (and their calls to
// botd) are its children. The returned func ends it with the run's final
// state.
func (t *Tracing) Run(ctx context.Context, run, bot, runtime, computer string) (context.Context, func(state string)) {
	if t == nil {
		return ctx, noopRun
	}
	ctx, span := t.tr.Start(ctx, SpanRun, trace.WithAttributes(
		attribute.String("openbot.run_id", run), attribute.String("openbot.bot_id", bot),
		attribute.String("openbot.runtime", runtime), attribute.String("openbot.computer_id", computer)))
	return t.hook(ctx), func(state string) {
		span.SetAttributes(attribute.String("openbot.run_state", state))
		if state == "failed" {
			span.SetStatus(codes.Error, state)
		}
		span.End()
	}
}

// Detach is a fresh context (no deadline, no values) under ctx's span: a
// run outlives the request that started it, yet belongs to its trace.
func (t *Tracing) Detach(ctx context.Context) context.Context {
	if t == nil {
		return context.Background()
	}
	return t.hook(trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx)))
}

// Under is ctx under parent's span when ctx has none of its own (a
// machine-runtime tool call arrives on the agent connection's context).
func (t *Tracing) Under(ctx context.Context, parent trace.SpanContext) context.Context {
	if t == nil || !parent.IsValid() || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return t.hook(trace.ContextWithSpanContext(ctx, parent))
}

// hook makes the botd client's calls under ctx spans of their own.
func (t *Tracing) hook(ctx context.Context) context.Context {
	return client.WithCallHook(ctx, t.botdCall)
}

// botdCall is the client span of one call to botd: its method and the
// path without the query, a lease id in it left out. The W3C trace
// context goes with the call (botd ignores it).
func (t *Tracing) botdCall(ctx context.Context, method, path string, h http.Header) func(int, error) {
	ctx, span := t.tr.Start(ctx, SpanBotdPrefix+method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", method), attribute.String("url.path", redactPath(path))))
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	return func(status int, err error) {
		if status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		switch {
		case err != nil && errors.Is(err, context.DeadlineExceeded):
			span.SetStatus(codes.Error, "deadline exceeded")
		case err != nil:
			span.SetStatus(codes.Error, "no answer")
		case status >= 400:
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
}

// redactPath is a botd path as a span keeps it: the segment after
// "lease" (a lease id, which acts on a screen) becomes "{lease}".
func redactPath(p string) string {
	parts := strings.Split(p, "/")
	for i := 1; i < len(parts); i++ {
		if parts[i-1] == "lease" && parts[i] != "" {
			parts[i] = "{lease}"
		}
	}
	return strings.Join(parts, "/")
}

// SpanContext is ctx's span (invalid when tracing is off).
func SpanContext(ctx context.Context) trace.SpanContext {
	return trace.SpanContextFromContext(ctx)
}

// Log adds ctx's trace_id and span_id to a log line; with tracing off
// (no span in ctx) it adds nothing.
func Log(ctx context.Context, ev *zerolog.Event) *zerolog.Event {
	return LogSpan(trace.SpanContextFromContext(ctx), ev)
}

// Logger is Log for a sub-logger's context: every line it writes carries
// ctx's trace_id and span_id.
func Logger(ctx context.Context, c zerolog.Context) zerolog.Context {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return c
	}
	return c.Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String())
}

// LogSpan is Log for a span held apart from a context (a run's).
func LogSpan(sc trace.SpanContext, ev *zerolog.Event) *zerolog.Event {
	if !sc.IsValid() {
		return ev
	}
	return ev.Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String())
}

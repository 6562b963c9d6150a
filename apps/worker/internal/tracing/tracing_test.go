package tracing

import (
	"context"
	"net/http"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestEndpoint: the traces endpoint wins as it is; the general one gets
// /v1/traces; neither is off.
func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		general, traces, want string
	}{
		{"", "", ""},
		{"http://collector:4318", "", "http://collector:4318/v1/traces"},
		{"http://collector:4318/", "", "http://collector:4318/v1/traces"},
		{"http://collector:4318", "https://other/x/traces", "https://other/x/traces"},
		{"", " http://c:4318/v1/traces ", "http://c:4318/v1/traces"},
	} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": tc.general, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": tc.traces}
		require.Equal(t, tc.want, Endpoint(func(k string) string { return env[k] }), "%+v", tc)
	}
}

// TestFromEnv: off without an endpoint (nil, no error), refused with one
// that is not an http(s) URL, on with one.
func TestFromEnv(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	tr, err := FromEnv(t.Context(), get)
	require.NoError(t, err)
	require.Nil(t, tr)
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "collector:4317"
	_, err = FromEnv(t.Context(), get)
	require.ErrorContains(t, err, "http:// or https://")
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:1"
	env["OTEL_SERVICE_NAME"] = "w2"
	tr, err = FromEnv(t.Context(), get)
	require.NoError(t, err)
	require.Equal(t, "w2", tr.Service())
	require.NoError(t, tr.Shutdown(context.Background()))
	require.NoError(t, tr.Shutdown(context.Background()), "safe twice")
}

// TestRedactPath: a lease id in a botd path is left out.
func TestRedactPath(t *testing.T) {
	for in, want := range map[string]string{
		"/screens/alice/lease/0123abcd": "/screens/alice/lease/{lease}",
		"/screens/alice/lease":          "/screens/alice/lease",
		"/files":                        "/files",
		"/health":                       "/health",
	} {
		require.Equal(t, want, redactPath(in))
	}
}

// TestOffCostsNothing: a nil Tracing hands the context back as it came
// and allocates nothing; log lines get no trace fields.
func TestOffCostsNothing(t *testing.T) {
	var tr *Tracing
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, end := tr.Request(ctx, http.MethodGet, "GET /v1/computers")
		end(200)
		c2, endTool := tr.Tool(c, "screenshot", "docker", "c1")
		endTool(true, "")
		c3, endRun := tr.Run(c2, "r", "b", "worker", "c1")
		endRun("completed")
		if c3 != ctx || tr.Under(ctx, SpanContext(ctx)) != ctx {
			t.Fatal("a new context with tracing off")
		}
	})
	require.Zero(t, allocs)
	require.NoError(t, tr.Flush(ctx))
	require.NoError(t, tr.Shutdown(ctx))
	var buf []byte
	w := zerolog.New(&sliceWriter{&buf})
	Log(ctx, w.Info()).Msg("x")
	require.NotContains(t, string(buf), "trace_id")
}

type sliceWriter struct{ b *[]byte }

func (s *sliceWriter) Write(p []byte) (int, error) { *s.b = append(*s.b, p...); return len(p), nil }

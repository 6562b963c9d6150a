package openapitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadIsOpenAPI31(t *testing.T) {
	v, err := Shared()
	require.NoError(t, err)
	require.Equal(t, "3.1.0", v.Doc().OpenAPI)
	for _, name := range []string{"workerToken", "operatorToken", "computerCapability"} {
		require.Contains(t, v.Doc().Components.SecuritySchemes, name)
	}
	require.Equal(t, "X-Computer-Capability", v.Doc().Components.SecuritySchemes["computerCapability"].Value.Name)
}

// TestRoutesAndCompare: the patterns are read from a real mux, and Compare
// names a route the document lacks and documented operations the mux lacks.
func TestRoutesAndCompare(t *testing.T) {
	ok := func(http.ResponseWriter, *http.Request) {}
	mux := http.NewServeMux()
	for _, p := range []string{"GET /healthz", "GET /v1/tools", "POST /v1/computers/{id}/bots", "POST /v1/computers/{id}/reboot", "/v1/anything/", "/"} {
		mux.HandleFunc(p, ok)
	}
	routes, err := Routes(mux)
	require.NoError(t, err)
	require.Equal(t, []string{"/", "/v1/anything/", "GET /healthz", "GET /v1/tools", "POST /v1/computers/{id}/bots", "POST /v1/computers/{id}/reboot"}, routes)
	v, err := Shared()
	require.NoError(t, err)
	undocumented, unrouted := Compare(v.Doc(), routes)
	require.Equal(t, []string{" /v1/anything/", "POST /v1/computers/{id}/reboot"}, undocumented)
	require.Contains(t, unrouted, "POST /v1/computers")
	require.Contains(t, unrouted, "GET /v1/openapi.json")
	require.NotContains(t, unrouted, "GET /v1/tools")
	require.NotContains(t, unrouted, "POST /v1/computers/{id}/bots")
}

// TestCheckerReports: the checker reports an answer the document does not
// describe, a request it refuses that was answered 2xx, and a route it
// lacks that was answered; a documented exchange passes. (The handler here
// stands in for a worker that breaks its document.)
func TestCheckerReports(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/tools":
			if r.URL.Query().Get("extra") != "" {
				_, _ = io.WriteString(w, `{"tools":[],"next":"x"}`)
				return
			}
			_, _ = io.WriteString(w, `{"tools":[{"name":"shell","description":"d","inputSchema":{"type":"object"}}]}`)
		case "/v1/computers":
			_, _ = io.WriteString(w, `{"computers":[]}`)
		default:
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	var got []string
	v, err := Shared()
	require.NoError(t, err)
	c := &Checker{V: v, Report: func(err error) { got = append(got, err.Error()) }}
	client := &http.Client{Transport: c}
	do := func(method, path, tok string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	do("GET", "/v1/tools", "t")
	require.Empty(t, got, "a documented exchange")
	do("GET", "/v1/tools?extra=1", "t")
	require.Len(t, got, 1)
	require.Contains(t, got[0], `property "next" is unsupported`)
	do("GET", "/v1/computers", "")
	require.Len(t, got, 2)
	require.Contains(t, got[1], "must be answered 4xx")
	do("GET", "/v1/nowhere", "t")
	require.Len(t, got, 3)
	require.Contains(t, got[2], "not in the document")
	require.True(t, strings.Contains(got[2], "answered 200"), got[2])
	do("GET", "/healthz", "")
	require.Len(t, got, 3, "paths outside /v1 are not checked")
	require.Len(t, c.Seen(), 4)
}

// TestCheckerEvents: a run's event stream is checked as it is read: an
// event whose data is not a RunEvent, and an end event whose data is not a
// Run, are reported; keepalive comments are not events.
func TestCheckerEvents(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, ": keepalive\n\n")
		_, _ = io.WriteString(w, "id: 1\nevent: status\ndata: {\"seq\":1,\"at\":\"2026-12-02T00:00:00Z\",\"type\":\"status\",\"data\":{\"status\":\"running\"}}\n\n")
		_, _ = io.WriteString(w, "id: 2\nevent: status\ndata: {\"seq\":2,\"type\":\"status\"}\n\n")
		_, _ = io.WriteString(w, "event: end\ndata: {\"id\":\"r1\",\"status\":\"done\"}\n\n")
	}))
	defer srv.Close()
	var got []string
	v, err := Shared()
	require.NoError(t, err)
	client := &http.Client{Transport: &Checker{V: v, Report: func(err error) { got = append(got, err.Error()) }}}
	req, _ := http.NewRequest("GET", srv.URL+"/v1/computers/c_1/runs/r1/events", nil)
	req.Header.Set("Authorization", "Bearer t")
	req.Header.Set("X-Computer-Capability", "c")
	resp, err := client.Do(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, got, 2, "%q", got)
	require.Contains(t, got[0], `event "status"`)
	require.Contains(t, got[0], "missing property 'at'")
	require.Contains(t, got[1], `event "end"`)
}

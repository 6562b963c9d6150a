package main

// The worker's OpenAPI document (internal/openapi/openapi.json) against the
// real worker: its router walked for every registered /v1 pattern, and
// every exchange the API tests of this package make with a worker they
// serve checked by openapitest.Checker (checkAPI below, installed under
// http.DefaultClient, which those tests use).

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/openapi"
	"github.com/open-bot/computer/apps/worker/internal/openapi/openapitest"
)

// apiChecks routes each request to the Checker of the worker it is for
// (by host); requests to anything else (botd, model servers, vendors'
// emulators) pass through unchecked.
type apiChecks struct {
	// mu guards byHost.
	mu     sync.Mutex
	byHost map[string]*openapitest.Checker
}

var checks = &apiChecks{byHost: map[string]*openapitest.Checker{}}

func init() {
	// The API tests here call the worker with http.DefaultClient: its
	// requests go through the checks (a nil Transport was the default one).
	http.DefaultClient.Transport = checks
}

func (a *apiChecks) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	c := a.byHost[req.URL.Host]
	a.mu.Unlock()
	if c == nil {
		return http.DefaultTransport.RoundTrip(req)
	}
	return c.RoundTrip(req)
}

// checkAPI holds every exchange with the worker served at base to the
// document, until t ends; a violation fails t.
func checkAPI(t testing.TB, base string) *openapitest.Checker {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	c := openapitest.NewChecker(t)
	var mu sync.Mutex
	done := false
	c.Report = func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !done { // a late answer after the test ended is not reported
			t.Errorf("openapi: %v", err)
		}
	}
	checks.mu.Lock()
	checks.byHost[u.Host] = c
	checks.mu.Unlock()
	t.Cleanup(func() {
		checks.mu.Lock()
		delete(checks.byHost, u.Host)
		checks.mu.Unlock()
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return c
}

// TestOpenAPIDocumentsEveryRoute walks the real worker's router (every
// pattern registered on it, read from the mux) and fails on a /v1 route the
// document lacks or a documented operation the router lacks; GET
// /v1/openapi.json serves the document byte for byte, with the bearer token.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	data := t.TempDir()
	w, err := newWorker(t.Context(), serveConfig{DataDir: data, MachinesDir: filepath.Join(data, "machines"), Provider: "attach", Token: "openapi-test-token-0123456789",
		Approvals: "decline"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	require.NotNil(t, w.apiMux)
	routes, err := openapitest.Routes(w.apiMux)
	require.NoError(t, err)
	v, err := openapitest.Shared()
	require.NoError(t, err)
	undocumented, unrouted := openapitest.Compare(v.Doc(), routes)
	require.Empty(t, undocumented, "routes the document (internal/openapi/openapi.json) lacks")
	require.Empty(t, unrouted, "documented operations the worker's router lacks")
	n := 0
	for _, r := range routes {
		if strings.Contains(r, " /v1/") {
			n++
		}
	}
	t.Logf("%d /v1 routes on the router, all documented; %d patterns in all", n, len(routes))
	require.Contains(t, routes, "POST /v1/dashboard/login-link", "a route mounted by serve.go is walked too")

	srv := httptest.NewServer(w.Handler)
	t.Cleanup(srv.Close)
	chk := checkAPI(t, srv.URL)
	get := func(tok string) (int, []byte, string) {
		req, _ := http.NewRequest("GET", srv.URL+openapi.Path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header.Get("Content-Type")
	}
	st, body, ct := get("openapi-test-token-0123456789")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "application/json", ct)
	require.Equal(t, string(openapi.Document), string(body), "served byte for byte")
	var doc struct{ OpenAPI string }
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	st, _, _ = get("")
	require.Equal(t, http.StatusUnauthorized, st, "served with the worker's token, like every /v1 route")
	require.Equal(t, []string{"GET /v1/openapi.json 200", "GET /v1/openapi.json 401"}, chk.Seen())
}

package spec

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckerFlagsViolations: the checker passes exchanges the description
// publishes and reports each kind of violation (an unpublished route, a
// body field the description does not name, a timeout over 60 s, an
// answer with a field too many, an error envelope without its requestId or
// with a status other than the HTTP one, a key that is not a box_ key).
func TestCheckerFlagsViolations(t *testing.T) {
	answers := map[string]string{
		"GET /api/box/v1/boxes/bx_abcdefgh":           `{"ok":true,"type":"box","box":{"id":"bx_abcdefgh","status":"running","ttlSeconds":3600,"createdAt":"2026-01-01T00:00:00Z","expiresAt":"2026-01-01T01:00:00Z"}}`,
		"GET /api/box/v1/boxes/bx_extrafld":           `{"ok":true,"type":"box","box":{"id":"bx_extrafld","status":"running","ttlSeconds":3600,"createdAt":"2026-01-01T00:00:00Z","ip":"10.0.0.1"}}`,
		"GET /api/box/v1/boxes/bx_noreqidx":           `{"ok":false,"type":"box.error","status":404,"code":"box_not_found","message":"no"}`,
		"GET /api/box/v1/boxes/bx_wrongsta":           `{"ok":false,"type":"box.error","status":400,"code":"box_not_found","message":"no","requestId":"r1"}`,
		"POST /api/box/v1/boxes/bx_abcdefgh/commands": `{"ok":true,"type":"box.command","exitCode":0,"stdout":"","stderr":"","timedOut":false}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "bx_noreqidx"), strings.HasSuffix(r.URL.Path, "bx_wrongsta"):
			w.WriteHeader(http.StatusNotFound)
		}
		_, _ = w.Write([]byte(answers[r.Method+" "+r.URL.Path]))
	}))
	defer srv.Close()
	var got []string
	c, err := NewChecker(nil, func(err error) { got = append(got, err.Error()) })
	require.NoError(t, err)
	hc := &http.Client{Transport: c}
	call := func(method, path, key, body string) []string {
		t.Helper()
		got = nil
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return got
	}
	require.Empty(t, call("GET", "/api/box/v1/boxes/bx_abcdefgh", "box_k", ""), "a published exchange passes")
	require.Empty(t, call("POST", "/api/box/v1/boxes/bx_abcdefgh/commands", "box_k", `{"command":"true","timeoutSeconds":60}`))
	for _, bad := range []struct {
		name, method, path, key, body, want string
	}{
		{"unpublished route", "POST", "/api/box/v1/boxes/bx_abcdefgh/snapshot", "box_k", "", "no matching operation"},
		{"bad id", "GET", "/api/box/v1/boxes/box-1", "box_k", "", "regular expression"},
		{"unnamed request field", "POST", "/api/box/v1/boxes/bx_abcdefgh/commands", "box_k", `{"command":"true","shell":"bash"}`, "shell"},
		{"timeout over 60 s", "POST", "/api/box/v1/boxes/bx_abcdefgh/commands", "box_k", `{"command":"true","timeoutSeconds":61}`, "timeoutSeconds"},
		{"unnamed answer field", "GET", "/api/box/v1/boxes/bx_extrafld", "box_k", "", "ip"},
		{"error without requestId", "GET", "/api/box/v1/boxes/bx_noreqidx", "box_k", "", "requestId"},
		{"envelope status not the HTTP one", "GET", "/api/box/v1/boxes/bx_wrongsta", "box_k", "", "the envelope says status 400"},
		{"not a box_ key", "GET", "/api/box/v1/boxes/bx_abcdefgh", "sk_other", "", "Bearer box_"},
	} {
		errs := call(bad.method, bad.path, bad.key, bad.body)
		require.NotEmpty(t, errs, "%s: no violation reported", bad.name)
		require.Contains(t, strings.Join(errs, "\n"), bad.want, bad.name)
	}
}

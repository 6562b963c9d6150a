package daytona

// The API client's retries and error mapping, against an httptest server
// reached through the spec Checker: every request the adapter sends and
// every scripted answer is validated against the vendor's api-openapi.yaml
// (errors against the API's error envelope, which the description does not
// publish), so the adapter cannot send a field or route Daytona does not
// publish, and the scripted answers are ones Daytona may give.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/spec"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

const testKey = "dtn_0123456789abcdef0123456789abcdef"

type scripted struct {
	mu    sync.Mutex
	calls []string
}

func (s *scripted) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.calls) }

func apiError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(spec.ErrorBody{StatusCode: status, Message: msg, Error: http.StatusText(status), Path: r.URL.Path, Method: r.Method})
}

func sandboxJSON(id, state string) map[string]any {
	return map[string]any{
		"id": id, "organizationId": "org", "name": "c1-00000000", "user": "root", "env": map[string]string{},
		"labels": map[string]string{labelMarker: "computer", labelComputer: "c1"}, "public": false,
		"networkBlockAll": false, "target": "us", "cpu": 2, "gpu": 0, "memory": 4, "disk": 10, "state": state,
		"snapshot": "open-bot", "toolboxProxyUrl": "http://127.0.0.1:1/toolbox",
	}
}

// testProvider is a provider on srv through the Checker (a violation fails
// the test), with retries that do not wait.
func testProvider(t *testing.T, script func(w http.ResponseWriter, r *http.Request)) (*Provider, *scripted) {
	s := &scripted{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls = append(s.calls, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			apiError(w, r, http.StatusUnauthorized, "Unauthorized")
			return
		}
		script(w, r)
	}))
	t.Cleanup(srv.Close)
	checker, err := spec.NewChecker(http.DefaultTransport, func(err error) { t.Errorf("SPEC VIOLATION: %v", err) })
	require.NoError(t, err)
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(testKey, sealer)
	require.NoError(t, err)
	p, err := New(Options{APIURL: srv.URL, Key: k, HTTPClient: &http.Client{Transport: checker}, Transport: checker, ReadyTimeout: 5 * time.Second})
	require.NoError(t, err)
	p.api.retry.Sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	t.Cleanup(p.Close)
	return p, s
}

func TestAPIErrorMapping(t *testing.T) {
	spec1 := Spec{ComputerID: "c1", BotdToken: "0123456789abcdef"}
	ref := Ref{SandboxID: "sbx1", Snapshot: "open-bot"}.String()
	tests := []struct {
		name   string
		script func(w http.ResponseWriter, r *http.Request)
		call   func(ctx context.Context, p *Provider) error
		is     error
		says   string
		calls  int
	}{
		{
			name:   "bad key",
			script: func(w http.ResponseWriter, r *http.Request) { apiError(w, r, 401, "Invalid API key") },
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Provision(ctx, spec1)
				return err
			},
			is: ErrUnauthorized, says: "check DAYTONA_API_KEY", calls: 1,
		},
		{
			name:   "unknown snapshot",
			script: func(w http.ResponseWriter, r *http.Request) { apiError(w, r, 404, "Snapshot nope not found") },
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Provision(ctx, Spec{ComputerID: "c1", BotdToken: "0123456789abcdef", Snapshot: "nope"})
				return err
			},
			is: ErrUnknownSnapshot, says: `unknown snapshot "nope"`, calls: 1,
		},
		{
			name: "gone on reconnect",
			script: func(w http.ResponseWriter, r *http.Request) {
				apiError(w, r, 404, "Sandbox with ID or name sbx1 not found")
			},
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Reconnect(ctx, ref, spec1)
				return err
			},
			is: ErrNotFound, says: "404", calls: 1,
		},
		{
			name:   "gone on stop",
			script: func(w http.ResponseWriter, r *http.Request) { apiError(w, r, 404, "Sandbox not found") },
			call:   func(ctx context.Context, p *Provider) error { return p.Stop(ctx, ref) },
			is:     ErrNotFound, calls: 1,
		},
		{
			name: "in error and not recoverable",
			script: func(w http.ResponseWriter, r *http.Request) {
				sb := sandboxJSON("sbx1", "error")
				sb["errorReason"], sb["recoverable"] = "disk lost", false
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(sb)
			},
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Reconnect(ctx, ref, spec1)
				return err
			},
			says: "in error and cannot be recovered: disk lost", calls: 1,
		},
		{
			name:   "a create that failed inside is not sent again",
			script: func(w http.ResponseWriter, r *http.Request) { apiError(w, r, 500, "boom") },
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Provision(ctx, spec1)
				return err
			},
			says: "500", calls: 1,
		},
		{
			name:   "5xx retries are bounded",
			script: func(w http.ResponseWriter, r *http.Request) { apiError(w, r, 503, "no capacity") },
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.api.get(ctx, "sbx1")
				return err
			},
			says: "gave up after 5 attempts", calls: 5,
		},
		{
			name: "429 retries are bounded",
			script: func(w http.ResponseWriter, r *http.Request) {
				apiError(w, r, 429, "ThrottlerException: Too Many Requests")
			},
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.List(ctx)
				return err
			},
			says: "429 Too Many Requests", calls: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, s := testProvider(t, tc.script)
			p.api.retry.Sleep = vendorkit.SleepCtx
			p.api.retry.Backoff, p.api.retry.MaxBackoff = time.Millisecond, time.Millisecond
			err := tc.call(t.Context(), p)
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			require.Contains(t, err.Error(), tc.says)
			require.NotContains(t, err.Error(), testKey)
			require.Equal(t, tc.calls, s.count(), "calls: %v", s.calls)
		})
	}
}

func TestAPIRetriesThenSucceeds(t *testing.T) {
	n := 0
	p, s := testProvider(t, func(w http.ResponseWriter, r *http.Request) {
		n++
		if n < 3 {
			w.Header().Set("Retry-After", "0")
			apiError(w, r, 429, "Too Many Requests")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		item := func(id, state string) map[string]any {
			sb := sandboxJSON(id, state)
			delete(sb, "env") // a list item has neither
			delete(sb, "networkBlockAll")
			return sb
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"items": []any{item("sbx1", "started"), item("sbx2", "stopped")}, "nextCursor": nil})
	})
	p.api.retry.Sleep = vendorkit.SleepCtx
	ls, err := p.List(t.Context())
	require.NoError(t, err)
	require.Equal(t, 3, s.count())
	require.Equal(t, []Listed{
		{Ref: Ref{SandboxID: "sbx1", Snapshot: "open-bot"}.String(), ComputerID: "c1", Running: true},
		{Ref: Ref{SandboxID: "sbx2", Snapshot: "open-bot"}.String(), ComputerID: "c1", Running: false},
	}, ls)
}

func TestStopAndDestroyIdempotent(t *testing.T) {
	p, s := testProvider(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(sandboxJSON("sbx1", "stopped"))
		default:
			apiError(w, r, 404, "Sandbox not found")
		}
	})
	ref := Ref{SandboxID: "sbx1", Snapshot: "open-bot"}.String()
	require.NoError(t, p.Stop(t.Context(), ref), "stopping a stopped sandbox is fine")
	require.NoError(t, p.Destroy(t.Context(), ref), "deleting a gone sandbox is fine")
	require.Equal(t, []string{"GET /sandbox/sbx1", "DELETE /sandbox/sbx1"}, s.calls)
}

func TestKeyNeverRendered(t *testing.T) {
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(testKey, sealer)
	require.NoError(t, err)
	p, err := New(Options{APIURL: "http://127.0.0.1:1", Key: k})
	require.NoError(t, err)
	defer p.Close()
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%v %+v %#v %s", k, p, p.o, k)
	b, _ := json.Marshal(p.o)
	buf.Write(b)
	require.NotContains(t, buf.String(), testKey)
	got, err := k.Open()
	require.NoError(t, err)
	require.Equal(t, testKey, got)
	p.api.retry.Retries = 1
	p.api.retry.Sleep = func(ctx context.Context, d time.Duration) error { return nil }
	_, err = p.api.get(t.Context(), "sbx1")
	require.Error(t, err)
	require.NotContains(t, err.Error(), testKey)
	require.False(t, errors.Is(err, ErrNotFound))
}

func TestKeyFromEnv(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(f, []byte(testKey+"\n"), 0o644))
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	_, err := KeyFromEnv(env(map[string]string{"DAYTONA_API_KEY_FILE": f}))
	require.ErrorContains(t, err, "mode 0644")
	require.NotContains(t, err.Error(), testKey)
	require.NoError(t, os.Chmod(f, 0o600))
	got, err := KeyFromEnv(env(map[string]string{"DAYTONA_API_KEY_FILE": f}))
	require.NoError(t, err)
	require.Equal(t, testKey, got)
	got, err = KeyFromEnv(env(map[string]string{"DAYTONA_API_KEY": " " + testKey + " "}))
	require.NoError(t, err)
	require.Equal(t, testKey, got)
	got, err = KeyFromEnv(env(nil))
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestCheckerRefuses: the Checker is not a rubber stamp — a field the spec
// does not name, an unpublished route and a malformed error are reported.
func TestCheckerRefuses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/bad-error") || r.URL.Path == "/sandbox/sbx1" {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"oops":true}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	var got []string
	checker, err := spec.NewChecker(http.DefaultTransport, func(err error) { got = append(got, err.Error()) })
	require.NoError(t, err)
	hc := &http.Client{Transport: checker}
	do := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer x")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	do(http.MethodPost, "/sandbox", `{"snapshot":"s","labels":{},"bogus":1}`)
	do(http.MethodGet, "/sandbox/sbx1", "")
	do(http.MethodPost, "/nope", "")
	do(http.MethodPost, "/toolbox/sbx1/process/execute", `{"command":"ls","shell":true}`)
	all := strings.Join(got, "\n")
	require.Contains(t, all, "bogus", "an unknown request field")
	require.Contains(t, all, "not the error envelope", "a malformed error")
	require.Contains(t, all, "/nope", "an unpublished route")
	require.Contains(t, all, "shell", "an unknown toolbox field")
}

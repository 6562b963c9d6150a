package e2b

// The control-plane client's retries and error mapping, against an
// httptest server whose every request and answer is validated against the
// vendor's openapi.yml (spec package): the adapter cannot send a field or
// route E2B does not publish, and the scripted answers are ones E2B may give.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/spec"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef"

// specServer answers with script and fails the test on any request or
// answer the published spec does not allow. unpublished names statuses the
// vendor sends on every route but publishes on few (429): their answers are
// checked to be refused by the validator, so the exemption stays honest.
type specServer struct {
	t           *testing.T
	v           *spec.Validator
	script      func(w http.ResponseWriter, r *http.Request, body []byte)
	unpublished map[int]bool

	// mu guards calls.
	mu    sync.Mutex
	calls []string
}

func newSpecServer(t *testing.T, script func(w http.ResponseWriter, r *http.Request, body []byte)) (*specServer, *httptest.Server) {
	v, err := spec.ControlPlane()
	require.NoError(t, err)
	s := &specServer{t: t, v: v, script: script, unpublished: map[int]bool{http.StatusTooManyRequests: true}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *specServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.calls = append(s.calls, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	if r.Header.Get("X-API-Key") != testKey {
		s.t.Errorf("%s %s: no or the wrong X-API-Key", r.Method, r.URL.Path)
	}
	if err := s.v.ValidateRequest(r, body); err != nil {
		s.t.Errorf("the adapter sent what the spec does not publish: %v", err)
	}
	rec := httptest.NewRecorder()
	s.script(rec, r, body)
	err := s.v.ValidateResponse(r, body, rec.Code, rec.Header(), rec.Body.Bytes())
	switch {
	case s.unpublished[rec.Code]:
		if err == nil {
			s.t.Errorf("status %d is exempted as unpublished but the spec publishes it for %s %s", rec.Code, r.Method, r.URL.Path)
		}
	case err != nil:
		s.t.Errorf("the scripted answer is not one the spec allows: %v", err)
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (s *specServer) count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func apiError(w http.ResponseWriter, status int, msg string) {
	answer(w, status, map[string]any{"code": status, "message": msg})
}

func sandboxAnswer(id string) map[string]any {
	return map[string]any{"templateID": "open-bot", "sandboxID": id, "clientID": "c", "envdVersion": "0.2.0",
		"envdAccessToken": "envd-tok", "trafficAccessToken": "traffic-tok", "domain": nil}
}

// testProvider is a provider on srv whose backoff waits are recorded, not
// slept.
func testProvider(t *testing.T, srv *httptest.Server) (*Provider, *[]time.Duration) {
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(testKey, sealer)
	require.NoError(t, err)
	p, err := New(Options{APIURL: srv.URL, Key: k, Retries: 3, Backoff: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	var mu sync.Mutex
	waits := &[]time.Duration{}
	p.api.retry.Sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		*waits = append(*waits, d)
		mu.Unlock()
		return ctx.Err()
	}
	return p, waits
}

func TestAPIErrorMapping(t *testing.T) {
	tests := []struct {
		name   string
		script func(w http.ResponseWriter, r *http.Request, body []byte)
		call   func(ctx context.Context, p *Provider) error
		is     error
		says   string
		calls  int
	}{
		{
			name:   "bad key",
			script: func(w http.ResponseWriter, r *http.Request, _ []byte) { apiError(w, 401, "Invalid API key") },
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Provision(ctx, Spec{ComputerID: "c1", BotdToken: "0123456789abcdef"})
				return err
			},
			is: ErrUnauthorized, says: "check E2B_API_KEY", calls: 1,
		},
		{
			name: "unknown template",
			script: func(w http.ResponseWriter, r *http.Request, _ []byte) {
				apiError(w, 400, "template 'nope' not found")
			},
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Provision(ctx, Spec{ComputerID: "c1", BotdToken: "0123456789abcdef", Template: "nope"})
				return err
			},
			is: ErrUnknownTemplate, says: `unknown template "nope"`, calls: 1,
		},
		{
			name:   "gone on connect",
			script: func(w http.ResponseWriter, r *http.Request, _ []byte) { apiError(w, 404, "sandbox \"sbx1\" not found") },
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Reconnect(ctx, Ref{SandboxID: "sbx1", Template: "open-bot"}.String(), Spec{ComputerID: "c1", BotdToken: "0123456789abcdef"})
				return err
			},
			is: ErrNotFound, says: "404", calls: 1,
		},
		{
			name:   "gone on stop",
			script: func(w http.ResponseWriter, r *http.Request, _ []byte) { apiError(w, 404, "sandbox not found") },
			call: func(ctx context.Context, p *Provider) error {
				return p.Stop(ctx, Ref{SandboxID: "sbx1", Template: "open-bot"}.String())
			},
			is: ErrNotFound, calls: 1,
		},
		{
			name:   "a create that failed inside is not sent again",
			script: func(w http.ResponseWriter, r *http.Request, _ []byte) { apiError(w, 500, "boom") },
			call: func(ctx context.Context, p *Provider) error {
				_, err := p.Provision(ctx, Spec{ComputerID: "c1", BotdToken: "0123456789abcdef"})
				return err
			},
			says: "500", calls: 1,
		},
		{
			name:   "5xx retries are bounded",
			script: func(w http.ResponseWriter, r *http.Request, _ []byte) { apiError(w, 503, "no capacity") },
			call: func(ctx context.Context, p *Provider) error {
				_, _, err := p.api.connect(ctx, "sbx1", time.Minute)
				return err
			},
			says: "gave up after 4 attempts", calls: 4,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := newSpecServer(t, tc.script)
			p, _ := testProvider(t, srv)
			err := tc.call(t.Context(), p)
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			require.Contains(t, err.Error(), tc.says)
			require.NotContains(t, err.Error(), testKey)
			require.Equal(t, tc.calls, len(s.calls), "calls: %v", s.calls)
		})
	}
}

func TestAPIRetriesThenSucceeds(t *testing.T) {
	var mu sync.Mutex
	n := 0
	s, srv := newSpecServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		switch {
		case r.URL.Path == "/sandboxes" && i == 1:
			w.Header().Set("Retry-After", "2")
			apiError(w, 429, "rate limited")
		case r.URL.Path == "/sandboxes":
			var ns map[string]any
			require.NoError(t, json.Unmarshal(body, &ns))
			md := ns["metadata"].(map[string]any)
			require.Equal(t, "c1", md[metaComputer], "the metadata names the computer")
			answer(w, 201, sandboxAnswer("sbx1"))
		case strings.HasSuffix(r.URL.Path, "/connect") && i < 5:
			apiError(w, 504, "backend timeout")
		case strings.HasSuffix(r.URL.Path, "/connect"):
			answer(w, 201, sandboxAnswer("sbx1"))
		}
	})
	p, waits := testProvider(t, srv)
	ref, err := p.Provision(t.Context(), Spec{ComputerID: "c1", BotdToken: "0123456789abcdef"})
	require.NoError(t, err)
	r, err := ParseRef(ref)
	require.NoError(t, err)
	require.Equal(t, Ref{SandboxID: "sbx1", Template: "open-bot"}, r)
	require.Equal(t, 2, s.count("POST /sandboxes"), "a 429 on create is sent again")
	require.Equal(t, []time.Duration{2 * time.Second}, *waits, "Retry-After is honoured")

	sb, resumed, err := p.api.connect(t.Context(), "sbx1", time.Minute)
	require.NoError(t, err)
	require.True(t, resumed, "201 on connect is a resume")
	require.Equal(t, "envd-tok", sb.EnvdAccessToken)
	require.Equal(t, 3, s.count("POST /sandboxes/sbx1/connect"))
	w := (*waits)[1:]
	require.Len(t, w, 2)
	for i, d := range w {
		require.LessOrEqual(t, d, 10*time.Second, "backoff is capped")
		require.Greater(t, d, time.Duration(0), "wait %d", i)
	}
}

func TestStopAndDestroyIdempotent(t *testing.T) {
	s, srv := newSpecServer(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/pause"):
			apiError(w, 409, "sandbox is already paused")
		case r.Method == http.MethodGet:
			answer(w, 200, map[string]any{"templateID": "open-bot", "sandboxID": "sbx1", "clientID": "c",
				"startedAt": time.Now().UTC().Format(time.RFC3339), "endAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
				"cpuCount": 2, "memoryMB": 2048, "diskSizeMB": 10240, "state": "paused", "envdVersion": "0.2.0"})
		case r.Method == http.MethodDelete:
			apiError(w, 404, "sandbox not found")
		}
	})
	p, _ := testProvider(t, srv)
	ref := Ref{SandboxID: "sbx1", Template: "open-bot"}.String()
	require.NoError(t, p.Stop(t.Context(), ref), "pausing a paused sandbox is fine")
	require.NoError(t, p.Destroy(t.Context(), ref), "killing a gone sandbox is fine")
	require.NoError(t, p.Destroy(t.Context(), "not a ref"), "a malformed ref has nothing to destroy")
	require.Equal(t, 1, s.count("POST /sandboxes/sbx1/pause"))
	require.Equal(t, 1, s.count("DELETE /sandboxes/sbx1"))
}

func TestListByMetadataPages(t *testing.T) {
	s, srv := newSpecServer(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		q := r.URL.Query()
		require.Equal(t, metaMarker+"=computer", q.Get("metadata"), "the metadata filter is key=value, URL-encoded")
		require.Equal(t, "running,paused", q.Get("state"))
		item := func(id, comp, state string) map[string]any {
			return map[string]any{"templateID": "open-bot", "sandboxID": id, "clientID": "c",
				"startedAt": time.Now().UTC().Format(time.RFC3339), "endAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
				"cpuCount": 2, "memoryMB": 2048, "diskSizeMB": 10240, "state": state, "envdVersion": "0.2.0",
				"metadata": map[string]string{metaMarker: "computer", metaComputer: comp, metaTemplate: "open-bot"}}
		}
		if q.Get("nextToken") == "" {
			w.Header().Set("X-Next-Token", "page2")
			answer(w, 200, []any{item("sbx1", "c1", "running")})
			return
		}
		require.Equal(t, "page2", q.Get("nextToken"))
		answer(w, 200, []any{item("sbx2", "c2", "paused")})
	})
	p, _ := testProvider(t, srv)
	ls, err := p.List(t.Context())
	require.NoError(t, err)
	require.Equal(t, []Listed{
		{Ref: Ref{SandboxID: "sbx1", Template: "open-bot"}.String(), ComputerID: "c1", Running: true},
		{Ref: Ref{SandboxID: "sbx2", Template: "open-bot"}.String(), ComputerID: "c2", Running: false},
	}, ls)
	require.Equal(t, 2, s.count("GET /v2/sandboxes"))
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
	_, err = p.api.get(t.Context(), "sbx1")
	require.Error(t, err)
	require.NotContains(t, err.Error(), testKey)
	require.False(t, errors.Is(err, ErrNotFound))
}

package httpapi

// The API's rules that need no machine: bearer token, operator credential,
// capability gate, input validation, attach checks, the access log, and a
// database that stops answering. The whole flow against a real botd is in
// apps/worker/controlplane_test.go.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/openapi/openapitest"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

const (
	token   = "api-test-token-0123456789"
	opToken = "api-test-operator-0123456789"
	botdTok = "botd-secret-token-abcdef0123"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type fixture struct {
	url  string
	st   store.Store
	logs *lockedBuf
	dir  string
	botd *httptest.Server // a "botd" that refuses every token
	// client holds every exchange to the OpenAPI document (openapitest).
	client *http.Client
}

func newFixture(t *testing.T) *fixture {
	dir := t.TempDir()
	st, err := store.OpenSQLite(t.Context(), filepath.Join(dir, "worker.db"))
	require.NoError(t, err)
	return newFixtureOn(t, dir, st)
}

func newFixtureOn(t *testing.T, dir string, st store.Store) *fixture {
	t.Cleanup(func() { st.Close() })
	sealer, err := secret.LoadOrCreate(filepath.Join(dir, "secret.key"))
	require.NoError(t, err)
	logs := &lockedBuf{}
	log := zerolog.New(logs)
	comps, err := computers.New(computers.Options{Store: st, Providers: map[string]providers.Provider{providers.KindAttach: providers.NewAttach()},
		DefaultProvider: providers.KindAttach, Sealer: sealer, Caps: capability.NewSet(), Log: log})
	require.NoError(t, err)
	m := runs.NewManager(runs.Options{Store: st, Computers: comps, Log: log})
	srv := httptest.NewServer(Handler(Options{Token: token, OperatorToken: opToken, Computers: comps, Runs: m, Log: log}))
	t.Cleanup(srv.Close)
	botd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"code":"unauthorized","message":"bad token"}}`)
	}))
	t.Cleanup(botd.Close)
	client, _ := openapitest.Client(t)
	return &fixture{url: srv.URL, st: st, logs: logs, dir: dir, botd: botd, client: client}
}

func (f *fixture) req(t *testing.T, method, path, tok, capa string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, f.url+path, rd)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if capa != "" {
		req.Header.Set(capability.Header, capa)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// create makes a computer as the operator (the fixture's default provider
// is attach).
func (f *fixture) create(t *testing.T, body any) (int, string, string) {
	t.Helper()
	st, out := f.req(t, "POST", "/v1/computers", opToken, "", body)
	var c struct {
		Computer   struct{ ID string } `json:"computer"`
		Capability string
	}
	_ = json.Unmarshal([]byte(out), &c)
	return st, c.Computer.ID, c.Capability
}

func TestAuthAndCapabilities(t *testing.T) {
	f := newFixture(t)
	st, _ := f.req(t, "GET", "/v1/computers", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, st)
	st, _ = f.req(t, "GET", "/v1/tools", "nope-nope-nope-nope", "", nil)
	require.Equal(t, http.StatusUnauthorized, st)
	st, _ = f.req(t, "GET", "/healthz", "", "", nil)
	require.Equal(t, http.StatusOK, st)

	attach := map[string]any{"url": f.botd.URL, "token": botdTok}
	st, id1, cap1 := f.create(t, map[string]any{"scope": map[string]any{"team": "t1"}, "attach": attach})
	require.Equal(t, http.StatusCreated, st)
	require.Len(t, cap1, 43)
	st, id2, cap2 := f.create(t, map[string]any{"scope": map[string]any{}, "kind": "private", "attach": attach})
	require.Equal(t, http.StatusCreated, st)

	// The botd refused its token: the computer says so, without the token.
	st, body := f.req(t, "GET", "/v1/computers/"+id1, token, cap1, nil)
	require.Equal(t, http.StatusOK, st)
	require.Contains(t, body, `"state":"error"`)
	require.Contains(t, body, "refused the token")
	require.NotContains(t, body, "botd-secret-token")

	st, body = f.req(t, "GET", "/v1/computers", token, "", nil)
	require.Equal(t, http.StatusOK, st)
	require.Contains(t, body, id1)
	require.Contains(t, body, `"session":"s_`, "a computer per session by default")
	for _, secret := range []string{cap1, cap2, "botd-secret-token"} {
		require.NotContains(t, body, secret)
	}
	for _, c := range []string{"", "garbage", cap2} {
		st, body = f.req(t, "GET", "/v1/computers/"+id1, token, c, nil)
		require.Equal(t, http.StatusNotFound, st)
		require.Contains(t, body, "no such computer")
	}
	st, _ = f.req(t, "POST", "/v1/computers/"+id2+"/bots", token, cap1, map[string]string{"id": "a"})
	require.Equal(t, http.StatusNotFound, st, "one computer's capability does not open another")
	st, _ = f.req(t, "GET", "/v1/computers/c_doesnotexist", token, cap1, nil)
	require.Equal(t, http.StatusNotFound, st)
	st, _ = f.req(t, "POST", "/v1/computers/c_doesnotexist/adopt", opToken, "", nil)
	require.Equal(t, http.StatusNotFound, st)
	// adopt is the operator's: WORKER_TOKEN gets the same 403 for a real
	// computer and an unknown one, and no capability.
	for _, id := range []string{id1, "c_doesnotexist"} {
		st, body = f.req(t, "POST", "/v1/computers/"+id+"/adopt", token, "", nil)
		require.Equal(t, http.StatusForbidden, st, body)
		require.Contains(t, body, "operator")
		require.NotContains(t, body, "capability\":")
	}
	st, _ = f.req(t, "GET", "/v1/computers/"+id1, token, cap1, nil)
	require.Equal(t, http.StatusOK, st, "a refused adopt leaves the capability working")

	st, body = f.req(t, "POST", "/v1/computers/"+id1+"/adopt", opToken, "", nil)
	require.Equal(t, http.StatusOK, st)
	var ad struct{ Capability string }
	require.NoError(t, json.Unmarshal([]byte(body), &ad))
	st, _ = f.req(t, "GET", "/v1/computers/"+id1, token, cap1, nil)
	require.Equal(t, http.StatusNotFound, st, "the adopted-away capability stops working")
	st, _ = f.req(t, "GET", "/v1/computers/"+id1, token, ad.Capability, nil)
	require.Equal(t, http.StatusOK, st)

	// Runs and tools name a bot of the computer.
	st, body = f.req(t, "POST", "/v1/computers/"+id1+"/runs", token, ad.Capability, map[string]string{"botId": "ghost", "prompt": "go"})
	require.Equal(t, http.StatusNotFound, st, body)
	st, _ = f.req(t, "POST", "/v1/computers/"+id1+"/runs", token, ad.Capability, map[string]string{"botId": "ghost", "prompt": strings.Repeat("p", runs.MaxPrompt+1)})
	require.Equal(t, http.StatusRequestEntityTooLarge, st)
	st, _ = f.req(t, "POST", "/v1/computers/"+id1+"/tools/shell", token, ad.Capability, map[string]any{"botId": "../x", "args": map[string]any{}})
	require.Equal(t, http.StatusBadRequest, st)
	st, _ = f.req(t, "GET", "/v1/computers/"+id1+"/runs/zzz", token, ad.Capability, nil)
	require.Equal(t, http.StatusNotFound, st)
	st, _ = f.req(t, "GET", "/v1/nothing", token, "", nil)
	require.Equal(t, http.StatusNotFound, st)

	// The access log: method, path, status, duration; never a credential.
	logs := f.logs.String()
	require.Contains(t, logs, `"method":"GET","path":"/v1/computers"`)
	require.Contains(t, logs, `"duration_ms"`)
	for _, secret := range []string{token, opToken, cap1, cap2, ad.Capability, "botd-secret-token"} {
		require.NotContains(t, logs, secret)
	}
}

func TestCreateBadInput(t *testing.T) {
	f := newFixture(t)
	// A file the worker's user owns, 0600, holding a token: the old
	// tokenFile form named such files; the worker reads none.
	tfile := filepath.Join(f.dir, "botd-token")
	require.NoError(t, os.WriteFile(tfile, []byte(botdTok+"\n"), 0o600))
	good := map[string]any{"url": f.botd.URL, "token": botdTok}
	cases := []struct {
		name string
		body any
		want string
	}{
		{"two scopes", map[string]any{"scope": map[string]any{"team": "t", "account": true}, "attach": good}, "one of session, team or account"},
		{"bad scope id", map[string]any{"scope": map[string]any{"team": "../t"}, "attach": good}, "scope"},
		{"bad kind", map[string]any{"kind": "public", "attach": good}, "kind"},
		{"unknown provider", map[string]any{"provider": "e2b"}, "unknown kind"},
		{"attach missing", map[string]any{}, "attach"},
		{"url with path", map[string]any{"attach": map[string]any{"url": f.botd.URL + "/x?y", "token": botdTok}}, "url must be"},
		{"url scheme", map[string]any{"attach": map[string]any{"url": "file:///etc/passwd", "token": botdTok}}, "url must be"},
		{"no token", map[string]any{"attach": map[string]any{"url": f.botd.URL}}, "token must be"},
		{"not a token", map[string]any{"attach": map[string]any{"url": f.botd.URL, "token": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"}}, "token must be"},
		{"tokenFile (the old form)", map[string]any{"attach": map[string]any{"url": f.botd.URL, "tokenFile": tfile}}, "tokenFile is not accepted"},
		{"tokenFile beside a token", map[string]any{"attach": map[string]any{"url": f.botd.URL, "token": botdTok, "tokenFile": tfile}}, "tokenFile is not accepted"},
		{"unknown field", map[string]any{"attach": good, "capability": "x"}, "unknown field"},
	}
	for _, tc := range cases {
		st, body := f.req(t, "POST", "/v1/computers", opToken, "", tc.body)
		require.Equal(t, http.StatusBadRequest, st, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.want, tc.name)
		require.NotContains(t, body, "OPENSSH", tc.name)
		require.NotContains(t, body, "botd-secret-token", tc.name)
	}
	// With WORKER_TOKEN, every attach is refused as the operator's, before
	// its body is looked at (the default provider here is attach).
	for _, tc := range cases[:len(cases)-1] {
		if tc.name == "unknown provider" {
			continue
		}
		st, body := f.req(t, "POST", "/v1/computers", token, "", tc.body)
		require.Equal(t, http.StatusForbidden, st, "%s: %s", tc.name, body)
		require.Contains(t, body, "operator", tc.name)
	}
}

// TestDatabaseGone: a store that stops answering is 503, never a 500 with
// internals.
func TestDatabaseGone(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.st.Close())
	st, body := f.req(t, "GET", "/v1/computers", token, "", nil)
	require.Equal(t, http.StatusServiceUnavailable, st)
	require.Contains(t, body, "database is unavailable")
	require.NotContains(t, body, "sql")
	st, _ = f.req(t, "POST", "/v1/computers", opToken, "", map[string]any{"attach": map[string]any{"url": f.botd.URL, "token": botdTok}})
	require.Equal(t, http.StatusServiceUnavailable, st)
}

// TestInternalErrorCauseLogged: a 500 tells the caller only "internal
// error" and the access log its cause (at error level), with a URL's query
// dropped: CI once saw a bare status=500 and nothing to explain it.
func TestInternalErrorCauseLogged(t *testing.T) {
	logs := &lockedBuf{}
	a := &api{o: Options{Log: zerolog.New(logs)}, mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /boom", func(w http.ResponseWriter, r *http.Request) {
		fail(w, errors.New(`exec on the machine: Get "http://127.0.0.1:1/exec?token=`+botdTok+`": connection refused`))
	})
	a.mux.HandleFunc("GET /fine", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, "ok") })
	srv := httptest.NewServer(a.accessLog(a.mux))
	defer srv.Close()
	for _, p := range []string{"/boom", "/fine"} {
		resp, err := http.Get(srv.URL + p)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NotContains(t, string(body), "connection refused", "the cause reached the caller")
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `"level":"error"`)
	require.Contains(t, lines[0], `"status":500`)
	require.Contains(t, lines[0], `connection refused`)
	require.Contains(t, lines[0], `http://127.0.0.1:1/exec?…`)
	require.NotContains(t, logs.String(), botdTok, "a URL's query reached the log")
	require.NotContains(t, lines[1], "cause", "a request that did not fail logged a cause")
}

package main

// Red team, position "a caller with only WORKER_TOKEN" (THREAT-MODEL.md,
// the control plane; issue 20, requirement 1): a harness whose environment
// a prompt-injected agent read. With the callers' token alone it must not
// adopt a computer, mint a dashboard sign-in link, or make the worker
// attach to a URL of its choosing — by value or with the old tokenFile
// form, which made the worker read any 0600 file its user owns and send it
// as a bearer token. A loopback listener stands in for the attacker's URL:
// it must receive nothing. Each row was seen to fail against the previous
// build (issue 20's note).

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/store"
)

// trap is a loopback HTTP listener standing in for an attacker's server
// (ports 16000-16099): it records every request and answers 401, like a
// botd refusing the token.
type trap struct {
	url  string
	mu   sync.Mutex
	seen []string // "METHOD path auth=<Authorization>"
}

var trapNext atomic.Int32

func newTrap(t testing.TB) *trap {
	t.Helper()
	var ln net.Listener
	for range 100 {
		p := 16000 + int(trapNext.Add(1))%100
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			ln = l
			break
		}
	}
	require.NotNil(t, ln, "no free loopback port in 16000-16099")
	tr := &trap{url: "http://" + ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.seen = append(tr.seen, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		tr.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"bad token"}}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return tr
}

func (tr *trap) requests() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.seen...)
}

func TestRedTeamCallerTokenOnly(t *testing.T) {
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir()}
	e.serve(t, "scripted-model") // default provider: attach
	// A computer someone else made and holds the capability of.
	const victim = "c_00000000victim01"
	require.NoError(t, e.w.Store.CreateComputer(t.Context(), store.Computer{ID: victim, ScopeKind: store.ScopeTeam, ScopeID: "victims",
		Kind: "team", Provider: "attach", ProviderRef: `{"url":"http://127.0.0.1:9"}`,
		DesiredState: store.StateStopped, ObservedState: store.StateStopped, HomeKey: victim}))
	held, err := e.w.Computers.Caps().Mint(victim)
	require.NoError(t, err)

	// A secret on the worker's host that the worker's user owns, 0600, one
	// token-like line: what the model key or S3 secret file looks like.
	var b [16]byte
	_, _ = rand.Read(b[:])
	secret := "host-secret-" + hex.EncodeToString(b[:])
	secretFile := filepath.Join(t.TempDir(), "model_api_key")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\n"), 0o600))

	rows := []struct {
		name         string
		method, path string
		body         func(tr *trap) any
		// leak is what the answer must not carry.
		leak []string
	}{
		{"adopt a listed computer", "POST", "/v1/computers/" + victim + "/adopt", nil, []string{`"capability"`}},
		{"mint a dashboard sign-in link", "POST", "/v1/dashboard/login-link", func(*trap) any { return struct{}{} }, []string{"/dashboard/login", `"url"`}},
		{"attach a URL of the caller's choosing, token by value", "POST", "/v1/computers", func(tr *trap) any {
			return map[string]any{"scope": map[string]any{"team": "attacker"}, "provider": "attach",
				"attach": map[string]any{"url": tr.url, "token": "caller-chosen-token-0123456789"}}
		}, []string{`"capability"`}},
		{"attach with the old tokenFile form", "POST", "/v1/computers", func(tr *trap) any {
			return map[string]any{"scope": map[string]any{"team": "attacker"}, "provider": "attach",
				"attach": map[string]any{"url": tr.url, "tokenFile": secretFile}}
		}, []string{`"capability"`, secret}},
		{"attach through the default provider, tokenFile form", "POST", "/v1/computers", func(tr *trap) any {
			return map[string]any{"scope": map[string]any{"session": "attacker2"},
				"attach": map[string]any{"url": tr.url, "tokenFile": secretFile}}
		}, []string{`"capability"`, secret}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			tr := newTrap(t)
			var body any
			if row.body != nil {
				body = row.body(tr)
			}
			st, answer := raw(t, row.method, e.url+row.path, e.token, "", body)
			// Nothing left the worker: the attacker's listener saw no
			// request at all, let alone one with the host's secret.
			for _, req := range tr.requests() {
				assert.NotContains(t, req, secret, "the worker sent a file's content to the caller's URL")
			}
			assert.Empty(t, tr.requests(), "the worker dialed the caller's URL")
			assert.Equal(t, http.StatusForbidden, st, "WORKER_TOKEN alone must be refused as an operator action; got %d %s", st, answer)
			assert.Contains(t, answer, "operator")
			for _, l := range row.leak {
				assert.NotContains(t, answer, l)
			}
		})
	}
	// The rightful holder's capability still works, and no attacker
	// computer exists.
	st, _ := raw(t, "GET", e.url+"/v1/computers/"+victim, e.token, held, nil)
	require.Equal(t, http.StatusOK, st, "the held capability must keep working")
	st, list := raw(t, "GET", e.url+"/v1/computers", e.token, "", nil)
	require.Equal(t, http.StatusOK, st)
	var listed struct {
		Computers []struct{ ID string } `json:"computers"`
	}
	require.NoError(t, json.Unmarshal([]byte(list), &listed))
	require.Len(t, listed.Computers, 1, "only the victim's computer: %s", list)
	require.False(t, strings.Contains(list, "attacker"), list)
}

package main

// Red team, position "a caller with only WORKER_TOKEN" (issue 36, row 1): a
// team's home kept after its computer was destroyed with keepHome=true
// (its files, browser profiles and sign-in jar) used to be restored into
// the next computer anyone made for the same scope name, and scope names
// are easy to collect (GET /v1/computers lists them). Naming a scope must
// not reach its kept home: the destroy answers a restore key once, to the
// capability holder, and a create restores the home only with that key
// (X-Restore-Key), single-use; after a restart, which forgets keys like
// capabilities, the operator mints a fresh one (`worker computers
// restore-key SCOPE`). Each row was seen to fail against the previous
// build (the report of issue 36, row 1).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/progress"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// Displays 1600-1607 and loopback ports 26600-26621 (local machines: 2
// slots) are this file's alone: below Linux's ephemeral range (32768 on),
// where any connection's own port could take one (a CI run found both
// slots' port 4 taken at 35604 and 35614).
const (
	scopeHomeDisplayBase = 1600
	scopeHomePortBase    = 26600
)

// scopeHomeWorker is a worker on the local provider, served in-process,
// that can be restarted on the same DATA_DIR and machines directory.
type scopeHomeWorker struct {
	env        map[string]string
	dataDir    string
	machines   string
	url, token string
	op         string
	w          *worker
	close      func()
	mu         sync.Mutex
	made       []string // computers to destroy at the end
}

// start serves a worker on sw's directories (a restart when one ran),
// until life (the whole test) ends.
func (sw *scopeHomeWorker) start(t, life *testing.T) {
	t.Helper()
	w, err := newWorker(life.Context(), serveConfig{DataDir: sw.dataDir, Provider: providers.KindLocal, Token: sw.token,
		OperatorToken: sw.op, Model: "scripted-model", ModelProvider: "botd", Approvals: "decline", MachinesDir: sw.machines,
		Getenv: envMap(sw.env)}, testLog(t))
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler)
	checkAPI(life, srv.URL)
	var once sync.Once
	sw.close = func() {
		once.Do(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sw.mu.Lock()
			made := sw.made
			sw.made = nil
			sw.mu.Unlock()
			for _, id := range made {
				_, _ = w.Computers.Destroy(ctx, id)
			}
			w.Close()
		})
	}
	life.Cleanup(sw.close)
	sw.url, sw.w = srv.URL, w
}

// capValue is a capability's value in an answer.
var capValue = regexp.MustCompile(`"capability":"[^"]*"`)

// scopeCreated is POST /v1/computers' answer.
type scopeCreated struct {
	Computer struct {
		ID, State, LastError string
	} `json:"computer"`
	Capability string `json:"capability"`
	Restored   *bool  `json:"restored"`
}

// create asks for a computer of scope with token, and the restore key
// when key is not "" (in X-Restore-Key); the status, the raw answer and
// the computer (as a workerEnv when one was made).
func (sw *scopeHomeWorker) create(t *testing.T, token, key string, scope map[string]any) (int, string, scopeCreated, *workerEnv) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"scope": scope})
	req, _ := http.NewRequest("POST", sw.url+"/v1/computers", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-Restore-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out scopeCreated
	_ = json.Unmarshal(body, &out)
	// The answer as messages may show it: never a capability's value.
	shown := capValue.ReplaceAllString(string(body), `"capability":"(redacted)"`)
	if out.Computer.ID == "" {
		return resp.StatusCode, shown, out, nil
	}
	sw.mu.Lock()
	sw.made = append(sw.made, out.Computer.ID)
	sw.mu.Unlock()
	return resp.StatusCode, shown, out, &workerEnv{url: sw.url, token: token, computer: out.Computer.ID, capa: out.Capability, w: sw.w, dataDir: sw.dataDir}
}

// destroy destroys e's computer (keepHome when keep) and returns the
// answer's restoreKey ("" when none).
func (sw *scopeHomeWorker) destroy(t *testing.T, e *workerEnv, keep bool) string {
	t.Helper()
	q := ""
	if keep {
		q = "?keepHome=true"
	}
	var out struct {
		Computer struct{ State, LastError string } `json:"computer"`
		// RestoreKey is the kept home's restore key (keepHome only).
		RestoreKey string `json:"restoreKey"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "DELETE", q, nil, &out))
	require.Equal(t, "destroyed", out.Computer.State, out.Computer.LastError)
	sw.mu.Lock()
	for i, id := range sw.made {
		if id == e.computer {
			sw.made = append(sw.made[:i], sw.made[i+1:]...)
			break
		}
	}
	sw.mu.Unlock()
	return out.RestoreKey
}

// readSecret adds bot alice to e's computer and reads her secret file:
// whether the read succeeded, and what it gave (a missing file is 404).
func readSecret(t *testing.T, e *workerEnv) (bool, string) {
	t.Helper()
	st := e.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil)
	require.True(t, st == http.StatusCreated || st == http.StatusConflict, "add alice: %d", st)
	st, res := e.tool(t, "alice", "file_read", map[string]any{"path": "bots/alice/secret.txt"})
	return st == http.StatusOK && res.Success, fmt.Sprintf("%d %s", st, res.text())
}

// liveIn is the ids of the live computers of team scope.
func (sw *scopeHomeWorker) liveIn(t *testing.T, team string) []string {
	t.Helper()
	st, body := raw(t, "GET", sw.url+"/v1/computers?scope=team:"+team, sw.token, "", nil)
	require.Equal(t, http.StatusOK, st, body)
	var out struct {
		Computers []struct{ ID string } `json:"computers"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	var ids []string
	for _, c := range out.Computers {
		ids = append(ids, c.ID)
	}
	return ids
}

// stdoutOf runs fn with the process's stdout captured (the CLI prints there).
func stdoutOf(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	err = fn()
	os.Stdout = old
	w.Close()
	out := <-done
	r.Close()
	return string(out), err
}

func TestRedTeamScopeHome(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	dir := openDir(t, "wire-scopehome-")
	sw := &scopeHomeWorker{dataDir: t.TempDir(), machines: filepath.Join(dir, "machines"),
		token: "worker-token-0123456789", op: "operator-token-0123456789", env: map[string]string{
			"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
			"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(scopeHomeDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(scopeHomePortBase),
			"WORKER_LOCAL_SLOTS": "2",
		}}
	sw.start(t, t)
	top := t
	victim := map[string]any{"team": "victim", "share": true}

	// Team victim writes a secret, checkpoints, and is destroyed keeping
	// its home; the destroy answers the restore key to the capability
	// holder alone.
	var sb [16]byte
	_, _ = rand.Read(sb[:])
	secret := "victim-secret-" + hex.EncodeToString(sb[:])
	st, body, _, v := sw.create(t, sw.token, "", victim)
	require.Equal(t, http.StatusCreated, st, body)
	require.Equal(t, http.StatusCreated, v.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	st, res := v.tool(t, "alice", "file_write", map[string]any{"path": "bots/alice/secret.txt", "content": secret + "\n"})
	require.Equal(t, http.StatusOK, st)
	require.True(t, res.Success, res.text())
	require.Equal(t, http.StatusOK, v.do(t, "POST", "/checkpoint", nil, nil))
	key := sw.destroy(t, v, true)

	t.Run("the caller's token alone does not inherit the destroyed team's home", func(t *testing.T) {
		st, body, out, a := sw.create(t, sw.token, "", victim)
		require.Equal(t, http.StatusCreated, st, "a create without a key still makes an empty computer: %s", body)
		assert.NotContains(t, body, secret)
		ok, text := readSecret(t, a)
		assert.False(t, ok, "WORKER_TOKEN alone read the destroyed team's file: %s", text)
		assert.NotContains(t, text, secret, "WORKER_TOKEN alone read the destroyed team's file")
		if assert.NotNil(t, out.Restored, "the create says whether it restored: %s", body) {
			assert.False(t, *out.Restored, "restored without a key")
		}
		sw.destroy(t, a, false)
	})

	t.Run("a wrong restore key is refused and makes nothing", func(t *testing.T) {
		for _, wrong := range []string{"not-the-key", strings.Repeat("A", 43)} {
			st, body, _, a := sw.create(t, sw.token, wrong, victim)
			if a != nil {
				ok, text := readSecret(t, a)
				assert.False(t, ok && strings.Contains(text, secret), "a wrong key restored the home: %s", text)
				sw.destroy(t, a, false)
			}
			assert.Equal(t, http.StatusForbidden, st, "a wrong key: %s", body)
			assert.Contains(t, body, `"forbidden"`)
			assert.NotContains(t, body, `"capability"`)
			assert.Empty(t, sw.liveIn(t, "victim"), "a refused create made a computer")
		}
	})

	t.Run("the destroyer's restore key restores the home, once", func(t *testing.T) {
		require.NotEmpty(t, key, "the keepHome destroy answers a restoreKey")
		assert.GreaterOrEqual(t, len(key), 43, "at least 32 random bytes")
		st, body, out, b := sw.create(t, sw.token, key, victim)
		require.Equal(t, http.StatusCreated, st, body)
		require.NotNil(t, out.Restored, body)
		assert.True(t, *out.Restored, body)
		ok, text := readSecret(t, b)
		assert.True(t, ok, "the key holder's computer holds the home: %s", text)
		assert.Contains(t, text, secret)
		sw.destroy(t, b, false)
		// Single-use: the same key again is refused.
		st, body, _, c := sw.create(t, sw.token, key, victim)
		if c != nil {
			sw.destroy(t, c, false)
		}
		assert.Equal(t, http.StatusForbidden, st, "a used key: %s", body)
	})

	var live *workerEnv // the scope's computer the operator's key restored
	t.Run("after a restart the operator mints a key that restores the home", func(t *testing.T) {
		sw.close()
		sw.start(t, top)
		// WORKER_TOKEN is not the operator.
		st, body := raw(t, "POST", sw.url+"/v1/scopes/team:victim/restore-key", sw.token, "", nil)
		assert.Equal(t, http.StatusForbidden, st, body)
		assert.NotContains(t, body, "restoreKey")
		// The operator, through the CLI as adopt is used.
		t.Setenv("WORKER_URL", sw.url)
		t.Setenv("WORKER_OPERATOR_TOKEN", sw.op)
		t.Setenv("WORKER_TOKEN", "")
		t.Setenv("WORKER_TOKEN_FILE", "")
		t.Setenv("WORKER_OPERATOR_TOKEN_FILE", "")
		printed, err := stdoutOf(t, func() error {
			return runComputersWith(t.Context(), []string{"restore-key", "--json", "team:victim"}, progress.New(io.Discard, false))
		})
		require.NoError(t, err, printed)
		var minted struct {
			RestoreKey string `json:"restoreKey"`
		}
		require.NoError(t, json.Unmarshal([]byte(printed), &minted), printed)
		require.NotEmpty(t, minted.RestoreKey)
		st, body, out, d := sw.create(t, sw.token, minted.RestoreKey, victim)
		require.Equal(t, http.StatusCreated, st, body)
		require.NotNil(t, out.Restored, body)
		assert.True(t, *out.Restored, body)
		ok, text := readSecret(t, d)
		assert.True(t, ok, "the operator's key restores the home: %s", text)
		assert.Contains(t, text, secret)
		live = d
	})

	t.Run("the CLI prints a kept home's key once and restores with it from a file", func(t *testing.T) {
		if live == nil {
			t.Skip("no live computer of the scope (the row before failed)")
		}
		t.Setenv("WORKER_URL", sw.url)
		t.Setenv("WORKER_TOKEN", sw.token)
		t.Setenv("WORKER_OPERATOR_TOKEN", "")
		cli := func(args ...string) string {
			printed, err := stdoutOf(t, func() error {
				return runComputersWith(t.Context(), args, progress.New(io.Discard, false))
			})
			require.NoError(t, err, "worker computers %s", args[0])
			return printed
		}
		// Its home into the home store: a kept home is its checkpoint.
		require.Equal(t, http.StatusOK, live.do(t, "POST", "/checkpoint", nil, nil))
		var destroyed struct {
			Computer   struct{ State string } `json:"computer"`
			RestoreKey string                 `json:"restoreKey"`
		}
		require.NoError(t, json.Unmarshal([]byte(cli("destroy", "--json", "--keep-home", "--capability", live.capa, live.computer)), &destroyed))
		require.Equal(t, "destroyed", destroyed.Computer.State)
		require.NotEmpty(t, destroyed.RestoreKey)
		sw.mu.Lock()
		sw.made = nil
		sw.mu.Unlock()
		keyFile := filepath.Join(t.TempDir(), "restore-key")
		require.NoError(t, os.WriteFile(keyFile, []byte(destroyed.RestoreKey+"\n"), 0o600))
		var created scopeCreated
		require.NoError(t, json.Unmarshal([]byte(cli("create", "--json", "--team", "victim", "--restore-key-file", keyFile)), &created))
		require.NotEmpty(t, created.Computer.ID)
		e := &workerEnv{url: sw.url, token: sw.token, computer: created.Computer.ID, capa: created.Capability, w: sw.w}
		sw.mu.Lock()
		sw.made = append(sw.made, e.computer)
		sw.mu.Unlock()
		require.NotNil(t, created.Restored)
		assert.True(t, *created.Restored)
		ok, text := readSecret(t, e)
		assert.True(t, ok, "the CLI's create with the key restores the home: %s", text)
		assert.Contains(t, text, secret)
		sw.destroy(t, e, false)
	})
}

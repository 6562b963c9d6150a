package main

// The operator's credential (issue 20, requirements 1 and 8): the operator
// socket (modes, SO_PEERCRED, a stale socket, a second worker) and
// WORKER_OPERATOR_TOKEN; the token files the worker refuses unless they are
// its own and 0600.

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/httpapi"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// socketClient is an HTTP client over the unix socket at path.
func socketClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

func socketPost(t testing.TB, hc *http.Client, path string) (int, string) {
	t.Helper()
	resp, err := hc.Post("http://operator"+path, "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOperatorSocket(t *testing.T) {
	requireIntegration(t, "setpriv", "curl")
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir()}
	e.serve(t, "scripted-model")
	const id = "c_00000000operat01"
	require.NoError(t, e.w.Store.CreateComputer(t.Context(), store.Computer{ID: id, ScopeKind: store.ScopeTeam, ScopeID: "ops",
		Kind: "team", Provider: "attach", ProviderRef: `{"url":"http://127.0.0.1:9"}`,
		DesiredState: store.StateStopped, ObservedState: store.StateStopped, HomeKey: id}))
	old, err := e.w.Computers.Caps().Mint(id)
	require.NoError(t, err)

	// DATA_DIR made by someone else with a looser mode: tightened.
	dir, err := os.MkdirTemp("", "opsock-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	sock := httpapi.OperatorSocket(dir)
	stop, err := httpapi.ServeOperator(t.Context(), sock, e.url, false, e.w.Handler, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(stop)
	fi, err := os.Lstat(sock)
	require.NoError(t, err)
	require.True(t, fi.Mode()&os.ModeSocket != 0)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the socket is 0600")
	fi, err = os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "its directory is 0700")

	// Root (this test) on the socket, no token: the operator.
	hc := socketClient(sock)
	st, body := socketPost(t, hc, "/v1/dashboard/login-link")
	require.Equal(t, http.StatusOK, st, body)
	var link struct{ URL string }
	require.NoError(t, json.Unmarshal([]byte(body), &link))
	require.True(t, strings.HasPrefix(link.URL, e.url+"/dashboard/login?code="), "a link on the worker's TCP address: %s", link.URL)
	st, body = socketPost(t, hc, "/v1/computers/"+id+"/adopt")
	require.Equal(t, http.StatusOK, st, body)
	var adopted struct{ Capability string }
	require.NoError(t, json.Unmarshal([]byte(body), &adopted))
	st, _ = raw(t, "GET", e.url+"/v1/computers/"+id, e.token, old, nil)
	require.Equal(t, http.StatusNotFound, st, "the adopted-away capability stops working")
	st, _ = raw(t, "GET", e.url+"/v1/computers/"+id, e.token, adopted.Capability, nil)
	require.Equal(t, http.StatusOK, st)
	// The operator token over TCP is the operator too; WORKER_TOKEN is not.
	st, _ = raw(t, "POST", e.url+"/v1/computers/"+id+"/adopt", e.op, "", nil)
	require.Equal(t, http.StatusOK, st)
	st, _ = raw(t, "POST", e.url+"/v1/computers/"+id+"/adopt", e.token, "", nil)
	require.Equal(t, http.StatusForbidden, st)

	// Another user on this host: even with the file modes opened up (so
	// only SO_PEERCRED stands in the way), its connection is closed
	// unserved. The same curl as root gets a link, so the command works.
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(sock, 0o666))
	curl := []string{"curl", "-sS", "--max-time", "10", "--unix-socket", sock, "-X", "POST", "-d", "{}", "http://operator/v1/dashboard/login-link"}
	out, err := exec.Command(curl[0], curl[1:]...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "/dashboard/login?code=")
	nobody := append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups"}, curl...)
	out, err = exec.Command("setpriv", nobody...).CombinedOutput()
	require.Error(t, err, "uid 65534 was served on the operator socket: %s", out)
	require.NotContains(t, string(out), "/dashboard/login", "uid 65534 got a sign-in link")

	// One worker per socket: a second is refused while the first serves.
	_, err = httpapi.ServeOperator(t.Context(), sock, e.url, false, e.w.Handler, zerolog.Nop())
	require.ErrorContains(t, err, "served by another worker")
	stop()
	_, err = os.Lstat(sock)
	require.ErrorIs(t, err, os.ErrNotExist, "a stopped worker removes its socket")

	// A killed worker's stale socket is replaced; a file that is not a
	// socket is left alone.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	require.NoError(t, err)
	l.SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	stop2, err := httpapi.ServeOperator(t.Context(), sock, e.url, false, e.w.Handler, zerolog.Nop())
	require.NoError(t, err, "over a stale socket")
	t.Cleanup(stop2)
	st, _ = socketPost(t, socketClient(sock), "/v1/dashboard/login-link")
	require.Equal(t, http.StatusOK, st)
	stop2()
	require.NoError(t, os.WriteFile(sock, []byte("notes\n"), 0o600))
	_, err = httpapi.ServeOperator(t.Context(), sock, e.url, false, e.w.Handler, zerolog.Nop())
	require.ErrorContains(t, err, "is not a socket")
	b, _ := os.ReadFile(sock)
	require.Equal(t, "notes\n", string(b))
}

// TestTokenFileModes: WORKER_TOKEN_FILE and WORKER_OPERATOR_TOKEN_FILE must
// be the worker's own and 0600 (or stricter); otherwise the worker refuses
// to start, before it opens anything, with the fix in the message.
func TestTokenFileModes(t *testing.T) {
	requireIntegration(t) // root: the files are chowned
	// A start that got past the checks ends at once (it must not serve).
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range []string{"WORKER_TOKEN", "WORKER_OPERATOR_TOKEN"} {
		t.Run(name, func(t *testing.T) {
			data := t.TempDir()
			t.Setenv("DATA_DIR", data)
			t.Setenv("WORKER_MACHINES_DIR", filepath.Join(data, "machines"))
			t.Setenv("WORKER_LISTEN", "127.0.0.1:0")
			t.Setenv("WORKER_PROVIDER", "attach")
			t.Setenv("WORKER_TOKEN", "")
			t.Setenv("WORKER_TOKEN_FILE", "")
			t.Setenv("WORKER_OPERATOR_TOKEN", "")
			t.Setenv("WORKER_OPERATOR_TOKEN_FILE", "")
			if name == "WORKER_OPERATOR_TOKEN" {
				t.Setenv("WORKER_TOKEN", "serve-test-token-0123456789")
			}
			f := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(f, []byte("file-token-0123456789abcdef\n"), 0o600))
			t.Setenv(name+"_FILE", f)
			for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
				require.NoError(t, os.Chmod(f, mode))
				err := runServe(done, nil)
				require.ErrorContains(t, err, name+"_FILE "+f+" is mode", "mode %04o", mode)
				require.ErrorContains(t, err, "fix: chmod 600 "+f)
			}
			require.NoError(t, os.Chmod(f, 0o600))
			require.NoError(t, os.Chown(f, 65534, 65534))
			err := runServe(done, nil)
			require.ErrorContains(t, err, "not by the worker's user")
			require.ErrorContains(t, err, "chmod 600 "+f)
			_, err = os.Stat(filepath.Join(data, "worker.db"))
			require.ErrorIs(t, err, os.ErrNotExist, "refused before the store was opened")

			require.NoError(t, os.Chown(f, os.Geteuid(), os.Getegid()))
			for _, mode := range []os.FileMode{0o600, 0o400} {
				require.NoError(t, os.Chmod(f, mode))
				var got string
				if name == "WORKER_TOKEN" {
					got, _, err = workerToken(data)
				} else {
					got, err = operatorToken("serve-test-token-0123456789")
				}
				require.NoError(t, err, "mode %04o", mode)
				require.Equal(t, "file-token-0123456789abcdef", got)
			}
		})
	}
	// The operator's token is never the callers'.
	t.Setenv("WORKER_OPERATOR_TOKEN_FILE", "")
	t.Setenv("WORKER_OPERATOR_TOKEN", "same-token-0123456789")
	_, err := operatorToken("same-token-0123456789")
	require.ErrorContains(t, err, "must differ from WORKER_TOKEN")
	t.Setenv("WORKER_OPERATOR_TOKEN", "short")
	_, err = operatorToken("serve-test-token-0123456789")
	require.ErrorContains(t, err, "at least 16 characters")
}

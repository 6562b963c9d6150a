package e2b

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// desktopSandbox is a provider of the desktop template with maxScreens on
// an emulator (every exchange through the spec Checker) and one sandbox of
// it provisioned for computer id; both go at cleanup.
func desktopSandbox(ctx context.Context, t testing.TB, id string, maxScreens int) (*Provider, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		emutest.Unavailable(t, "needs root (the Docker engine)")
	}
	srv := emutest.Start(t, map[string]emulator.Template{DesktopTemplate: emutest.DesktopTemplate()}, nil)
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(srv.APIKey, sealer)
	require.NoError(t, err)
	p, err := New(Options{APIURL: srv.URL, SandboxURL: srv.URL, Key: k, Template: DesktopTemplate, MaxScreens: maxScreens,
		ReadyTimeout: 4 * time.Minute, HTTPClient: &http.Client{Transport: srv.Checker, Timeout: time.Minute}, Transport: srv.Checker})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	ref, err := p.Provision(ctx, Spec{ComputerID: id, BotdToken: strings.Repeat("t", 24)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	return p, ref
}

// TestEnvdDesktopBackend drives the desktop template's sandbox through the
// envd backend (the emulator, every exchange through the spec Checker):
// exec with stdin and an output cap, a streamed process killed by Close,
// files as the sandbox's user, and a port reached through its forwarder.
func TestEnvdDesktopBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	p, ref := desktopSandbox(ctx, t, "e2b-desk", 3)
	r, err := ParseRef(ref)
	require.NoError(t, err)
	require.Equal(t, DesktopTemplate, r.Template)
	_, err = p.Reconnect(ctx, ref, Spec{ComputerID: "e2b-desk", BotdToken: strings.Repeat("t", 24)})
	require.Error(t, err, "a desktop sandbox has no botd to reconnect to")
	m, err := p.ReconnectDesktop(ctx, ref)
	require.NoError(t, err)
	m2, err := p.ReconnectDesktop(ctx, ref)
	require.NoError(t, err)
	require.Same(t, m, m2, "one machine per session")
	sb, _, err := p.api.connect(ctx, r.SandboxID, p.o.Timeout)
	require.NoError(t, err)
	sess, err := p.session(sb)
	require.NoError(t, err)
	b := &envdBackend{s: sess, user: desktopUser, screens: p.o.MaxScreens}
	require.Equal(t, 3, b.MaxScreens())

	t.Run("exec", func(t *testing.T) {
		res, err := b.Exec(ctx, desktop.Cmd{Argv: []string{"sh", "-c", `id -un; pwd; echo "$X"; echo oops >&2; exit 3`}, Env: map[string]string{"X": "env-ok"}, Cwd: "/tmp"})
		require.NoError(t, err)
		require.Equal(t, 3, res.ExitCode)
		require.Equal(t, "user\n/tmp\nenv-ok\n", string(res.Stdout))
		require.Equal(t, "oops\n", string(res.Stderr))
		require.False(t, res.Truncated)
		res, err = b.Exec(ctx, desktop.Cmd{Argv: []string{"id", "-un"}, User: "root"})
		require.NoError(t, err)
		require.Equal(t, "root\n", string(res.Stdout))
	})
	t.Run("exec stdin", func(t *testing.T) {
		in := strings.Repeat("0123456789abcdef", 8<<10) // 128 KiB: several SendInputs
		res, err := b.Exec(ctx, desktop.Cmd{Argv: []string{"sh", "-c", "wc -c; cat >/dev/null"}, Stdin: strings.NewReader(in)})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, string(res.Stderr))
		require.Equal(t, "131072", strings.TrimSpace(string(res.Stdout)), "all of stdin arrives and ends (CloseStdin)")
	})
	t.Run("exec output cap", func(t *testing.T) {
		res, err := b.Exec(ctx, desktop.Cmd{Argv: []string{"sh", "-c", "head -c 5000 /dev/zero; head -c 10 /dev/zero >&2"}, MaxOutput: 100})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode)
		require.Len(t, res.Stdout, 100)
		require.Len(t, res.Stderr, 10)
		require.True(t, res.Truncated)
	})
	t.Run("start streams and Close kills", func(t *testing.T) {
		proc, err := b.Start(ctx, desktop.Cmd{Argv: []string{"sh", "-c", `echo $$ >/tmp/desk-proc.pid; while read l; do echo "got $l"; done; echo bye`}})
		require.NoError(t, err)
		br := bufio.NewReader(proc.Stdout())
		_, err = proc.Stdin().Write([]byte("one\n"))
		require.NoError(t, err)
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "got one\n", line)
		require.NoError(t, proc.Stdin().Close())
		rest, err := io.ReadAll(br)
		require.NoError(t, err)
		require.Equal(t, "bye\n", string(rest), "stdin's end reaches the process")
		code, err := proc.Wait()
		require.NoError(t, err)
		require.Equal(t, 0, code)
		require.NoError(t, proc.Close())

		long, err := b.Start(ctx, desktop.Cmd{Argv: []string{"sh", "-c", `echo $$ >/tmp/desk-long.pid; echo ready; exec sleep 600`}})
		require.NoError(t, err)
		line, err = bufio.NewReader(long.Stdout()).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		require.NoError(t, long.Close())
		res, err := b.Exec(ctx, desktop.Cmd{Argv: []string{"sh", "-c", `kill -0 "$(cat /tmp/desk-long.pid)" 2>/dev/null && echo alive || echo gone`}})
		require.NoError(t, err)
		require.Equal(t, "gone\n", string(res.Stdout), "Close kills the process in the sandbox")
	})
	t.Run("files", func(t *testing.T) {
		require.NoError(t, b.WriteFile(ctx, "/home/user/desk-note.txt", "", []byte("hello desktop")))
		res, err := b.Exec(ctx, desktop.Cmd{Argv: []string{"stat", "-c", "%U", "/home/user/desk-note.txt"}})
		require.NoError(t, err)
		require.Equal(t, "user\n", string(res.Stdout), "written as the sandbox's user")
		got, err := b.ReadFile(ctx, "/home/user/desk-note.txt", 1<<20)
		require.NoError(t, err)
		require.Equal(t, "hello desktop", string(got))
		got, err = b.ReadFile(ctx, "/home/user/desk-note.txt", 5)
		require.NoError(t, err)
		require.Equal(t, "hello", string(got), "at most max bytes")
		_, err = b.ReadFile(ctx, "/home/user/no-such-file", 10)
		require.True(t, errors.Is(err, fs.ErrNotExist), "a missing file: %v", err)
	})
	t.Run("port", func(t *testing.T) {
		// The machine's first screen serves noVNC on port 6080.
		_, err := m.StartScreen(ctx, "a")
		require.NoError(t, err)
		u, hc, err := b.PortURL(ctx, 6080)
		require.NoError(t, err)
		_, err = http.Get(u + "/vnc.html")
		require.Error(t, err, "the port's URL is reached only through its forwarder's client (no listener)")
		// websockify starts in the background: wait (≤ 30 s) until it serves.
		var (
			resp *http.Response
			body []byte
		)
		for i := 0; i < 60; i++ {
			resp, err = hc.Get(u + "/vnc.html")
			require.NoError(t, err)
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Contains(t, string(body), "noVNC")
	})
}

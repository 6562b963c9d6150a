package daytona

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator/emutest"
)

// TestDesktopUseCountsAsActivity: in desktop mode the machine's toolbox
// traffic — a computer-use screenshot, a process/execute command, a session
// process while it runs — is use of the computer, what the activity
// refresher keeps auto-stop away for (mode 1's refresher, the same
// session's: TestAutoStopSparesInUse); an idle session is not in use.
func TestDesktopUseCountsAsActivity(t *testing.T) {
	env := emutest.Start(t, emutest.Options{Snapshots: map[string]emulator.Snapshot{DesktopSnapshot: emutest.DesktopSnapshot()}})
	p := emuProvider(t, env, Options{Snapshot: DesktopSnapshot, AutoStop: DefaultAutoStop})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	ref, err := p.Provision(ctx, Spec{ComputerID: "desk", BotdToken: testToken()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	_, err = p.ReconnectDesktop(ctx, ref)
	require.NoError(t, err)
	r, _ := ParseRef(ref)
	p.mu.Lock()
	sess := p.sessions[r.SandboxID]
	p.mu.Unlock()
	require.NotNil(t, sess)
	b := &toolboxBackend{s: sess, user: "user", home: "/home/user", screens: 1}

	const idle = 500 * time.Millisecond
	quiet := func(what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for sess.inUse(time.Now(), idle) {
			require.True(t, time.Now().Before(deadline), "the session never went idle before %s", what)
			time.Sleep(100 * time.Millisecond)
		}
	}

	quiet("the screenshot")
	img, _, err := b.Screenshot(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, img)
	require.True(t, sess.inUse(time.Now(), idle), "a computer-use screenshot is use")

	quiet("the command")
	res, err := b.Exec(ctx, desktop.Cmd{Argv: []string{"printf", "%s", "hi"}})
	require.NoError(t, err)
	require.Equal(t, "hi", string(res.Stdout))
	require.True(t, sess.inUse(time.Now(), idle), "a process/execute command is use")

	quiet("the session process")
	proc, err := b.Start(ctx, desktop.Cmd{Argv: []string{"sh", "-c", "read x; sleep 2; echo \"got $x\""}})
	require.NoError(t, err)
	defer proc.Close()
	_, err = proc.Stdin().Write([]byte("it\n"))
	require.NoError(t, err)
	require.NoError(t, proc.Stdin().Close())
	time.Sleep(idle + 200*time.Millisecond)
	require.True(t, sess.inUse(time.Now(), idle), "a session process that runs is use (its logs are followed)")
	out, err := io.ReadAll(proc.Stdout())
	require.NoError(t, err)
	require.Equal(t, "got it\n", string(out))
	code, err := proc.Wait()
	require.NoError(t, err)
	require.Zero(t, code)

	// A viewer's port (the computer-use noVNC on 6080 here) through its
	// preview forwarder is use too.
	u, hc, err := b.PortURL(ctx, 6080)
	require.NoError(t, err)
	quiet("the viewer request")
	resp, err := hc.Get(u + "/vnc.html")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "noVNC answers through the preview URL")
	require.True(t, sess.inUse(time.Now(), idle), "a request through a port's forwarder is use")
}

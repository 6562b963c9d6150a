package daytona

// The adapter against the emulator (real containers of the computer
// image), every exchange with the API and the toolbox through the spec
// Checker.

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/pkg/shared/client"
)

func emuProvider(t *testing.T, env *emutest.Server, o Options) *Provider {
	t.Helper()
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(env.APIKey, sealer)
	require.NoError(t, err)
	o.APIURL, o.Key = env.URL, k
	o.HTTPClient = &http.Client{Transport: env.Checker, Timeout: time.Minute}
	o.Transport = env.Checker
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 4 * time.Minute
	}
	p, err := New(o)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func state(t *testing.T, p *Provider, ref string) string {
	t.Helper()
	r, err := ParseRef(ref)
	require.NoError(t, err)
	s, err := p.api.get(t.Context(), r.SandboxID)
	require.NoError(t, err)
	return s.State
}

func testToken() string { return "tok-" + strings.Repeat("0123456789", 3) }

// TestEmulatorOpenBotLifecycle: provision, botd through the preview URL,
// the machine lost behind the API's back (its container killed: the
// sandbox is in error) and recovered by the next Reconnect, stop and start,
// archived and started, delete, and a deleted sandbox is ErrNotFound.
func TestEmulatorOpenBotLifecycle(t *testing.T) {
	env := emutest.Start(t, emutest.Options{})
	p := emuProvider(t, env, Options{AutoStop: DefaultAutoStop})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	spec := Spec{ComputerID: "life", BotdToken: testToken()}
	ref, err := p.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	ls, err := p.List(ctx)
	require.NoError(t, err)
	require.Equal(t, []Listed{{Ref: ref, ComputerID: "life", Running: true}}, ls, "listed by its labels")

	c, err := p.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	exec := func(c *client.Client) string {
		r, err := c.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "echo up; id -un"}})
		require.NoError(t, err)
		require.Equal(t, 0, r.ExitCode, r.Stderr)
		return r.Stdout
	}
	require.Equal(t, "up\nbot\n", exec(c), "botd answers through the preview URL")
	r, err := ParseRef(ref)
	require.NoError(t, err)
	p.mu.Lock()
	sess := p.sessions[r.SandboxID]
	p.mu.Unlock()
	mode, err := sess.tb.sh(ctx, "stat -c %a "+tokenPath+" "+secretsDir, nil, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "600\n700\n", mode.Result, "botd's token is root's alone")

	// The machine lost behind the API's back.
	_, err = env.Docker.ContainerKill(ctx, "daytona-emu-"+r.SandboxID, dockerclient.ContainerKillOptions{Signal: "KILL"})
	require.NoError(t, err)
	require.Equal(t, "error", state(t, p, ref))
	c, err = p.Reconnect(ctx, ref, spec)
	require.NoError(t, err, "Reconnect recovers a sandbox in error")
	require.Equal(t, "up\nbot\n", exec(c))

	// Stop, then a request to botd is explained; Reconnect starts it.
	require.NoError(t, p.Stop(ctx, ref))
	require.Equal(t, "stopped", state(t, p, ref))
	require.NoError(t, p.Stop(ctx, ref), "stopping a stopped sandbox is fine")
	c, err = p.Reconnect(ctx, ref, spec)
	require.NoError(t, err, "Reconnect starts a stopped sandbox")
	require.Equal(t, "up\nbot\n", exec(c))

	// Archived (what auto-archive does to a sandbox stopped long): the
	// next Reconnect starts it from the archive, the home kept.
	_, err = c.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "echo kept > archived.txt"}})
	require.NoError(t, err)
	require.NoError(t, p.Stop(ctx, ref))
	_, err = p.api.lifecycle(ctx, r.SandboxID, "archive")
	require.NoError(t, err)
	require.Equal(t, "archived", state(t, p, ref))
	c, err = p.Reconnect(ctx, ref, spec)
	require.NoError(t, err, "Reconnect starts an archived sandbox")
	got, err := c.Exec(ctx, client.ExecRequest{Argv: []string{"cat", "archived.txt"}})
	require.NoError(t, err)
	require.Equal(t, "kept\n", got.Stdout)

	require.NoError(t, p.Destroy(ctx, ref))
	require.NoError(t, p.Destroy(ctx, ref), "deleting a deleted sandbox is fine")
	_, err = p.Reconnect(ctx, ref, spec)
	require.ErrorIs(t, err, ErrNotFound)
	ls, err = p.List(ctx)
	require.NoError(t, err)
	require.Empty(t, ls)
}

// TestAutoStopSparesInUse: with an auto-stop interval of one (emulated)
// minute, a computer in use — here a reconnect held open, with no traffic
// to the sandbox at all — is marked active and not stopped for several
// intervals; released, it is stopped by the vendor's auto-stop.
func TestAutoStopSparesInUse(t *testing.T) {
	// 8 s: the first Reconnect (creating the container, starting botd)
	// must fit in one emulated minute on a loaded CI machine (3 s did not).
	const minute = 8 * time.Second
	env := emutest.Start(t, emutest.Options{Minute: minute})
	p := emuProvider(t, env, Options{AutoStop: 1, ActivityEvery: minute / 4})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	spec := Spec{ComputerID: "busy", BotdToken: testToken()}
	ref, err := p.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	c, err := p.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	r, _ := ParseRef(ref)
	p.mu.Lock()
	sess := p.sessions[r.SandboxID]
	p.mu.Unlock()
	release := sess.hold()
	// Four intervals in use, nothing sent to the sandbox but the
	// refresher's last-activity marks.
	deadline := time.Now().Add(4 * minute)
	for time.Now().Before(deadline) {
		require.Equal(t, "started", state(t, p, ref), "a computer in use was stopped by auto-stop")
		time.Sleep(minute / 3)
	}
	release()
	// Idle now (the session's last use ages past the refresher's window):
	// the vendor's auto-stop takes it.
	for i := 0; ; i++ {
		if state(t, p, ref) == "stopped" {
			break
		}
		require.Less(t, i, 600, "an idle computer was never auto-stopped")
		time.Sleep(200 * time.Millisecond)
	}
	// botd's client is told why it gets no answer.
	_, err = c.Health(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "idle past its auto-stop interval")
}

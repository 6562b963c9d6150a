package e2b

// The adapter against the emulator (real containers of the computer image
// on the local Docker engine), every exchange validated against the
// vendor's spec by e2btest's front.

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	dockerclient "github.com/moby/moby/client"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/pkg/shared/client"
)

// emulated starts the emulator (template open-bot: the computer image) and
// returns provider options that reach it through the spec Checker: every
// control-plane and envd exchange is validated against the vendor's spec.
func emulated(t *testing.T) (*emutest.Server, Options) {
	t.Helper()
	if os.Geteuid() != 0 {
		emutest.Unavailable(t, "needs root (the Docker engine)")
	}
	srv := emutest.Start(t, nil, nil)
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(srv.APIKey, sealer)
	require.NoError(t, err)
	return srv, Options{APIURL: srv.URL, SandboxURL: srv.URL, Key: k, ReadyTimeout: 4 * time.Minute,
		HTTPClient: &http.Client{Transport: srv.Checker, Timeout: time.Minute}, Transport: srv.Checker}
}

// seen reports whether the Checker validated an exchange of kind with
// method, a path ending in suffix and status.
func seen(srv *emutest.Server, kind, method, suffix string, status int) bool {
	for _, s := range srv.Checker.Seen() {
		f := strings.Fields(s)
		if len(f) == 4 && f[0] == kind && f[1] == method && strings.HasSuffix(f[2], suffix) && f[3] == strconv.Itoa(status) {
			return true
		}
	}
	return false
}

func TestEmulatorOpenBotLifecycle(t *testing.T) {
	env, o := emulated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	o.Env, o.Log = []string{"MODEL_API_KEY=model-key-sentinel-0123456789"}, &log
	p, err := New(o)
	require.NoError(t, err)
	defer p.Close()
	token := "botd-token-sentinel-" + strings.Repeat("x", 16)
	spec := Spec{ComputerID: "e2b-life", BotdToken: token}

	ref, err := p.Provision(ctx, spec)
	require.NoError(t, err)
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			_ = p.Destroy(context.Background(), ref)
		}
	})
	r, err := ParseRef(ref)
	require.NoError(t, err)

	c, err := p.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	h, err := c.Health(ctx)
	require.NoError(t, err)
	require.True(t, h.OK, "botd in the sandbox is healthy")
	firstBoot := h.BootedAt

	res, err := c.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "echo $((6*7)); id -un"}})
	require.NoError(t, err)
	require.Equal(t, "42\nbot\n", res.Stdout, res.Stderr)

	// The secrets are root's, 0600, in a 0700 directory; the model key
	// is a file, not botd's environment.
	p.mu.Lock()
	sess := p.sessions[r.SandboxID]
	p.mu.Unlock()
	require.NotNil(t, sess)
	st, err := sess.envd.run(ctx, rootUser, "/bin/sh", []string{"-c",
		"stat -c '%a %U' /run/secrets /run/secrets/botd_token /run/secrets/model_api_key; " +
			"tr '\\0' '\\n' </proc/$(pgrep -xo botd)/environ | grep -c '^MODEL_API_KEY=' || true"}, nil)
	require.NoError(t, err)
	require.Equal(t, 0, st.ExitCode, string(st.Stderr))
	require.Equal(t, "700 root\n600 root\n600 root\n0\n", string(st.Stdout))
	denied, err := sess.envd.run(ctx, "bot", "/bin/cat", []string{tokenPath}, nil)
	require.NoError(t, err)
	require.NotEqual(t, 0, denied.ExitCode, "the bot user cannot read botd's token")

	// Stop pauses: botd stops answering; Reconnect resumes (201) and
	// starts botd again.
	require.NoError(t, p.Stop(ctx, ref))
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = c.Health(hctx)
	hcancel()
	require.Error(t, err, "a paused sandbox does not answer")
	require.NoError(t, p.Stop(ctx, ref), "stopping a stopped sandbox is fine")

	c, err = p.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	h, err = c.Health(ctx)
	require.NoError(t, err)
	require.True(t, h.OK)
	require.False(t, h.BootedAt.Equal(firstBoot), "a resumed sandbox runs a botd started again")
	secondBoot := h.BootedAt

	// A restarted worker (a new provider) reaches the running botd.
	p2, err := New(o)
	require.NoError(t, err)
	defer p2.Close()
	c2, err := p2.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	h, err = c2.Health(ctx)
	require.NoError(t, err)
	require.True(t, h.BootedAt.Equal(secondBoot), "reconnect does not start another botd")

	ls, err := p.List(ctx)
	require.NoError(t, err)
	require.Contains(t, ls, Listed{Ref: ref, ComputerID: spec.ComputerID, Running: true})

	require.NoError(t, p.Destroy(ctx, ref))
	destroyed = true
	_, err = p.Reconnect(ctx, ref, spec)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorIs(t, p.Stop(ctx, ref), ErrNotFound)
	require.NoError(t, p.Destroy(ctx, ref), "destroying twice is fine")

	for _, x := range []struct {
		kind, method, suffix string
		status               int
	}{
		{"control-plane", "POST", "/sandboxes", 201},
		{"control-plane", "POST", "/connect", 200}, // running
		{"control-plane", "POST", "/connect", 201}, // resumed
		{"control-plane", "POST", "/pause", 204},
		{"control-plane", "POST", "/timeout", 204},
		{"control-plane", "DELETE", "/sandboxes/" + r.SandboxID, 204},
		{"control-plane", "GET", "/v2/sandboxes", 200},
		{"envd", "POST", "/files", 200},
		{"envd-rpc", "POST", "/process.Process/Start", 200},
		{"envd-rpc", "POST", "/process.Process/List", 200},
	} {
		require.True(t, seen(env, x.kind, x.method, x.suffix, x.status), "validated: %+v", x)
	}

	for _, secret := range []string{mustOpen(t, o.Key), token, "model-key-sentinel"} {
		require.NotContains(t, logs.String(), secret, "the provider's log carries no secret")
	}
}

// TestEmulatorTimeoutLapses: while botd is used the refresher keeps the
// sandbox alive past its timeout; left idle, the timeout lapses into a
// pause, a call then says so, and Reconnect resumes the sandbox.
func TestEmulatorTimeoutLapses(t *testing.T) {
	env, o := emulated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const timeout = 6 * time.Second
	o.Timeout = timeout
	p, err := New(o)
	require.NoError(t, err)
	defer p.Close()
	spec := Spec{ComputerID: "e2b-lapse", BotdToken: "botd-token-" + strings.Repeat("y", 16)}
	ref, err := p.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	r, err := ParseRef(ref)
	require.NoError(t, err)
	c, err := p.Reconnect(ctx, ref, spec)
	require.NoError(t, err)

	// In use for three timeouts: still running.
	for end := time.Now().Add(3 * timeout); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		_, err := c.Screens(ctx)
		require.NoError(t, err, "a sandbox in use does not lapse")
	}
	d, err := p.api.get(ctx, r.SandboxID)
	require.NoError(t, err)
	require.Equal(t, "running", d.State)

	// Idle: the timeout lapses (autoPause).
	for {
		d, err := p.api.get(ctx, r.SandboxID)
		require.NoError(t, err)
		if d.State == "paused" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("an idle sandbox never lapsed")
		case <-time.After(500 * time.Millisecond):
		}
	}
	_, err = c.Screens(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "the E2B sandbox is paused (its timeout lapsed", "a call to a lapsed sandbox says why")

	// The emulator answers "paused" as soon as its timer fires, and stops
	// the container after; a connect before the stop is done races it
	// (an emulator race, reported): wait for the container to stop.
	for {
		cs, err := env.Docker.ContainerList(ctx, dockerclient.ContainerListOptions{All: true,
			Filters: dockerclient.Filters{}.Add("label", emulator.Label+"="+r.SandboxID)})
		require.NoError(t, err)
		require.Len(t, cs.Items, 1)
		if cs.Items[0].State != container.StateRunning {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the lapsed sandbox's container never stopped")
		case <-time.After(200 * time.Millisecond):
		}
	}
	c, err = p.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	_, err = c.Screens(ctx)
	require.NoError(t, err, "reconnect resumes a lapsed sandbox")
}

func mustOpen(t *testing.T, k *Key) string {
	v, err := k.Open()
	require.NoError(t, err)
	return v
}

// TestReconnectOutlivesShortTimeout: a Timeout about as long as botd's start
// does not pause the sandbox under a reconnect (the session holds it, and
// envd calls count as use), neither after Provision nor after a lapse.
func TestReconnectOutlivesShortTimeout(t *testing.T) {
	_, o := emulated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o.Timeout = 4 * time.Second
	p, err := New(o)
	require.NoError(t, err)
	defer p.Close()
	spec := Spec{ComputerID: "e2b-short", BotdToken: "botd-token-" + strings.Repeat("s", 16)}
	ref, err := p.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	r, err := ParseRef(ref)
	require.NoError(t, err)
	c, err := p.Reconnect(ctx, ref, spec)
	require.NoError(t, err, "botd starts on a sandbox whose timeout is shorter than its start")
	_, err = c.Screens(ctx)
	require.NoError(t, err)

	// Left idle it lapses; a reconnect resumes it and starts botd again.
	for {
		d, err := p.api.get(ctx, r.SandboxID)
		require.NoError(t, err)
		if d.State == "paused" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("an idle sandbox never lapsed")
		case <-time.After(300 * time.Millisecond):
		}
	}
	c, err = p.Reconnect(ctx, ref, spec)
	require.NoError(t, err, "a reconnect after a lapse outlives a short timeout")
	_, err = c.Screens(ctx)
	require.NoError(t, err)
}

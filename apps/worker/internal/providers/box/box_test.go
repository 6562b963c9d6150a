package box_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/box"
	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

func newProvider(t *testing.T, env *emutest.Server, key string, mod func(*box.Options)) *box.Provider {
	t.Helper()
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := box.NewKey(key, sealer)
	require.NoError(t, err)
	o := box.Options{APIURL: env.URL, Key: k, HTTPClient: &http.Client{Transport: env.Checker, Timeout: 2 * time.Minute},
		Transport: env.Checker, Backoff: 50 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	p, err := box.New(o)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func root(t *testing.T) {
	if os.Geteuid() != 0 {
		emutest.Unavailable(t, "needs root (the Docker engine)")
	}
}

// TestBoxMachine: a box's desktop machine runs commands (short ones, and
// one past the 60 s call limit's wait window, polled), moves files in
// chunks, streams a process's stdin and stdout (tar both ways), and
// observes display :0.
func TestBoxMachine(t *testing.T) {
	root(t)
	env := emutest.Start(t)
	// One call waits 1 s for a command: anything longer is polled.
	p := newProvider(t, env, env.APIKey, func(o *box.Options) { o.CommandWait = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ref, err := p.Provision(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	m, err := p.Reconnect(ctx, ref)
	require.NoError(t, err)

	before := env.Emulator.Commands()
	r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "sleep 3; echo slept"}, TimeoutMs: 60000})
	require.NoError(t, err)
	require.Equal(t, "slept\n", r.Stdout)
	require.GreaterOrEqual(t, env.Emulator.Commands()-before, 2, "a command past one call's wait is polled with further calls")

	r, err = m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "id -un; echo \"$X\" >&2; exit 3"}, Env: map[string]string{"X": "it's"}})
	require.NoError(t, err)
	require.Equal(t, 3, r.ExitCode)
	require.Equal(t, "user\n", r.Stdout)
	require.Equal(t, "it's\n", r.Stderr)
	// Past Box's 60 s limit of one call (BOX_LONG_TEST=1: 70 s more).
	if os.Getenv("BOX_LONG_TEST") != "" {
		r, err = m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "sleep 70; echo slept"}, TimeoutMs: 120000})
		require.NoError(t, err)
		require.Equal(t, "slept\n", r.Stdout)
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 100_000) // 1.6 MB: several chunks
	require.NoError(t, m.WriteFile(ctx, "dir/big.bin", big))
	got, err := m.ReadFile(ctx, "dir/big.bin", 1<<30)
	require.NoError(t, err)
	require.Equal(t, big, got)
	_, err = m.ReadFile(ctx, "dir/none", 10)
	require.Error(t, err)

	// Export and import through the streaming process.
	rc, err := m.ExportWorkspace(ctx, 0)
	require.NoError(t, err)
	var tarball bytes.Buffer
	_, err = tarball.ReadFrom(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.NoError(t, m.WriteFile(ctx, "dir/big.bin", []byte("changed")))
	sum, err := m.ImportWorkspace(ctx, bytes.NewReader(tarball.Bytes()))
	require.NoError(t, err)
	require.Positive(t, sum.Files)
	got, err = m.ReadFile(ctx, "dir/big.bin", 1<<30)
	require.NoError(t, err)
	require.Equal(t, big, got, "the import restored the exported file")

	_, err = m.StartScreen(ctx, "alice")
	require.NoError(t, err)
	l, err := m.AcquireLease(ctx, "alice", "agent", "alice", time.Minute)
	require.NoError(t, err)
	obs, err := m.Observe(ctx, "alice", l.LeaseID)
	require.NoError(t, err)
	require.Equal(t, 1280, obs.Width)
	require.NotEmpty(t, obs.Image)
	_, err = m.StartScreen(ctx, "bob")
	require.Error(t, err, "a second screen on a one-desktop box")
	require.Equal(t, shared.CodeMultiScreen, client.CodeOf(err))
}

// TestBoxErrors: each failure ends in a clear state and message.
func TestBoxErrors(t *testing.T) {
	root(t)
	env := emutest.Start(t)
	p := newProvider(t, env, env.APIKey, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ref, err := p.Provision(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	m, err := p.Reconnect(ctx, ref)
	require.NoError(t, err)

	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"bad key", func(t *testing.T) {
			bad := newProvider(t, env, "box_not-the-key", nil)
			_, err := bad.Reconnect(ctx, ref)
			require.ErrorIs(t, err, box.ErrUnauthorized)
			require.Contains(t, err.Error(), "401 unauthorized")
			require.Contains(t, err.Error(), "check BOX_API_KEY")
			require.NotContains(t, err.Error(), env.APIKey)
		}},
		{"429 then success", func(t *testing.T) {
			env.Emulator.FailNext(http.StatusTooManyRequests, http.StatusTooManyRequests)
			r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"echo", "after 429"}})
			require.NoError(t, err)
			require.Equal(t, "after 429\n", r.Stdout)
		}},
		{"5xx then success", func(t *testing.T) {
			env.Emulator.FailNext(http.StatusInternalServerError)
			b, err := p.Get(ctx, ref)
			require.NoError(t, err, "a GET is repeated after a 5xx")
			require.Equal(t, "running", b.Status)
		}},
		{"5xx on a command is not repeated", func(t *testing.T) {
			before := env.Emulator.Commands()
			env.Emulator.FailNext(http.StatusInternalServerError)
			_, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"true"}})
			require.Error(t, err)
			require.Contains(t, err.Error(), "500 internal")
			require.Equal(t, before, env.Emulator.Commands(), "the command did not run")
		}},
		{"5xx persisting", func(t *testing.T) {
			env.Emulator.FailNext(503, 503, 503, 503)
			_, err := p.Get(ctx, ref)
			require.Error(t, err)
			require.Contains(t, err.Error(), "503 unavailable")
		}},
		{"expired TTL, then reconnect resumes the same id", func(t *testing.T) {
			env.Emulator.Expire(ref)
			require.Eventually(t, func() bool {
				b, err := p.Get(ctx, ref)
				return err == nil && b.Status == "archived"
			}, time.Minute, 100*time.Millisecond)
			b, err := p.Get(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, "ttl_expired", b.ArchivedReason)
			_, err = m.Exec(ctx, client.ExecRequest{Argv: []string{"true"}})
			require.ErrorIs(t, err, box.ErrNotRunning)
			require.Contains(t, err.Error(), "its TTL ran out")
			m2, err := p.Reconnect(ctx, ref)
			require.NoError(t, err)
			r, err := m2.Exec(ctx, client.ExecRequest{Argv: []string{"echo", "back"}})
			require.NoError(t, err)
			require.Equal(t, "back\n", r.Stdout)
			m = m2
		}},
		{"archived box reconnected", func(t *testing.T) {
			require.NoError(t, m.WriteFile(ctx, "kept.txt", []byte("kept")))
			require.NoError(t, p.Stop(ctx, ref))
			b, err := p.Get(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, "archived", b.Status)
			require.Equal(t, "stopped", b.ArchivedReason)
			m2, err := p.Reconnect(ctx, ref)
			require.NoError(t, err)
			got, err := m2.ReadFile(ctx, "kept.txt", 100)
			require.NoError(t, err)
			require.Equal(t, "kept", string(got), "the archived box kept its filesystem")
			m = m2
		}},
		{"timeout over 60 s refused", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, env.URL+box.Base+"/boxes/"+ref+"/commands", strings.NewReader(`{"command":"true","timeoutSeconds":61}`))
			req.Header.Set("Authorization", "Bearer "+env.APIKey)
			req.Header.Set("Content-Type", "application/json")
			// Straight to the emulator: the checker would (rightly) flag the request.
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		}},
		{"box gone", func(t *testing.T) {
			require.NoError(t, p.Destroy(ctx, ref))
			_, err := p.Reconnect(ctx, ref)
			require.ErrorIs(t, err, box.ErrNotFound)
			require.Contains(t, err.Error(), "box_not_found")
			require.True(t, errors.Is(p.Destroy(ctx, ref), box.ErrNotFound))
			_, err = m.ReadFile(ctx, "kept.txt", 100)
			require.Error(t, err)
			require.False(t, errors.Is(err, fs.ErrNotExist), "a gone box is not a missing file: %v", err)
		}},
	}
	for _, c := range cases {
		if !t.Run(c.name, c.run) {
			return
		}
	}
	t.Logf("exchanges checked against box-openapi.yaml: %v", env.Checker.Counts())
}

// TestBoxTTLRefresh: while the computer is used, the refresher keeps
// moving the box's TTL end; idle, it leaves it, and the box lapses (the
// emulator archives it, ttl_expired). Every wait is on the emulator's state,
// bounded by a deadline; none is a fixed sleep.
func TestBoxTTLRefresh(t *testing.T) {
	root(t)
	env := emutest.Start(t)
	const ttl, every = time.Minute, 300 * time.Millisecond
	p := newProvider(t, env, env.APIKey, func(o *box.Options) {
		o.TTL = ttl // the shortest a box takes
		o.RefreshEvery = every
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ref, err := p.Provision(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	m, err := p.Reconnect(ctx, ref)
	require.NoError(t, err)
	first := env.Emulator.ExpiresAt(ref)
	require.False(t, first.IsZero())

	// In use: commands keep coming; the TTL's end moves past the first.
	waitUntil(t, ctx, 30*time.Second, "the refresher to give a box in use a new TTL", func() bool {
		_, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"true"}})
		require.NoError(t, err)
		return env.Emulator.ExpiresAt(ref).After(first)
	})
	lastUse := time.Now()

	// Idle: the refresher leaves the box to its TTL, so the emulator's
	// reaper archives it at that end (a refresher that kept renewing an
	// idle box, every 300 ms, would keep it running past this deadline).
	var end time.Time // the last TTL end the box had while running
	waitUntil(t, ctx, ttl+time.Minute, "the idle box to lapse at the end of its TTL", func() bool {
		at := env.Emulator.ExpiresAt(ref)
		if !at.IsZero() {
			end = at
		}
		return at.IsZero()
	})
	b, err := p.Get(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, "archived", b.Status)
	require.Equal(t, "ttl_expired", b.ArchivedReason, "the idle box lapsed: its TTL ran out")
	// Its last renewal came from the use (the refresher looks back one
	// period), not from later idle looks; 15 s of slack for a loaded host.
	require.True(t, end.Add(-ttl).Before(lastUse.Add(every+15*time.Second)),
		"an idle box's TTL was renewed: its last TTL end %s is %s after the last use", end.Format(time.RFC3339Nano), end.Sub(lastUse))
}

// waitUntil polls cond on the test's goroutine (so cond may use require)
// every 100 ms until it holds, failing the test when within (or ctx) ends
// first.
func waitUntil(t *testing.T, ctx context.Context, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waited for %s: %v", what, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

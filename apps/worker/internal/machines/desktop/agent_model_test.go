package desktop

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
)

// TestDesktopAgentNoModelKey: with the worker's model configured (the
// providers pass MODEL_UPSTREAM_URL and MODEL_API_KEY), DialAgent on a
// desktop machine whose image has codex answers 501 unavailable and
// writes and starts nothing: no agent directory, no file holding the key
// anywhere the sandbox's user reads, no codex process, and the key in no
// process's environment or command line. machines.NoAgentOf gives a run
// the same refusal before it starts. (The worker-level attack is
// TestRedTeamDesktopModelKey.)
func TestDesktopAgentNoModelKey(t *testing.T) {
	cli, id := sandbox(t, 1)
	b := NewDockerBackend(cli, id, 1)
	const key = "sk-desktop-agent-model-0123456789"
	m, err := New(Options{Backend: b, Model: &Model{BaseURL: "http://127.0.0.1:18080/v1", Key: key}})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	ctx := ctxFor(t, 8*time.Minute)

	conn, err := m.DialAgent(ctx, nil)
	require.Nil(t, conn)
	requireCode(t, err, shared.CodeUnavailable)
	require.Contains(t, err.Error(), "model key never enters")
	nerr := machines.NoAgentOf(m)
	require.Error(t, nerr)
	var ae *shared.APIError
	require.ErrorAs(t, nerr, &ae)
	require.Equal(t, http.StatusNotImplemented, ae.Status)
	require.Equal(t, shared.CodeUnavailable, ae.Code)

	root := func(argv ...string) string {
		t.Helper()
		r, err := b.Exec(ctx, Cmd{Argv: argv, User: "root"})
		require.NoError(t, err)
		require.Equal(t, 0, r.ExitCode, "%v: %s", argv, r.Stderr)
		return strings.TrimSpace(string(r.Stdout))
	}
	require.Equal(t, "absent", root("sh", "-c", "test -e /home/user/.open-bot-agent && echo present || echo absent"))
	require.Empty(t, root("sh", "-c", "pgrep -f '[c]odex app-server' || true"), "a codex app-server was started")
	require.NotContains(t, root("ps", "-eo", "args"), key, "the key is in a command line")
	// Split so this hunt's own command line never holds the key whole.
	half := len(key) / 2
	hunt := `k="$1$2"
for f in /proc/[0-9]*/environ; do tr '\0' '\n' <"$f" 2>/dev/null | grep -qF -- "$k" && echo "environ $f"; done
grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -- "$k" / 2>/dev/null
true`
	r, err := b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", hunt, "sh", key[:half], key[half:]}, User: "user", MaxOutput: 64 << 10})
	require.NoError(t, err)
	require.Equal(t, 0, r.ExitCode, "%s", r.Stderr)
	require.Empty(t, strings.TrimSpace(string(r.Stdout)), "the sandbox's user finds the key")
}

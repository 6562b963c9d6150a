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

// TestDesktopAgentNoModelKey: DialAgent on a desktop machine whose image
// has codex answers 501 unavailable and writes and starts nothing: no
// agent directory, no codex process. machines.NoAgentOf gives a run the
// same refusal before it starts. A desktop machine takes no model at all
// (Options has no such field, so no provider can hand it the key); the
// worker-level attack, with MODEL_API_KEY set and the whole sandbox
// searched for it, is TestRedTeamDesktopModelKey.
func TestDesktopAgentNoModelKey(t *testing.T) {
	cli, id := sandbox(t, 1)
	b := NewDockerBackend(cli, id, 1)
	m, err := New(Options{Backend: b})
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
}

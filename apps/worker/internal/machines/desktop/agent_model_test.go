package desktop

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
)

// TestDesktopAgentModel: with a model configured, DialAgent's codex gets
// the model's base URL in its managed config and the key as a file only
// the sandbox's user reads (0600 in a 0700 directory outside the
// workspace), in no process's command line: codex holds it in its own
// environment, read from the file inside the sandbox. (That codex reaches
// the model with it is TestAcceptanceE2BDesktop's run.)
func TestDesktopAgentModel(t *testing.T) {
	cli, id := sandbox(t, 1)
	b := NewDockerBackend(cli, id, 1)
	const key = "sk-desktop-agent-model-0123456789"
	m, err := New(Options{Backend: b, Model: &Model{BaseURL: "http://127.0.0.1:18080/v1", Key: key}})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	ctx := ctxFor(t, 3*time.Minute)

	conn, err := m.DialAgent(ctx, nil)
	require.NoError(t, err)
	defer conn.Close()
	var init map[string]any
	require.NoError(t, conn.Call(ctx, codexrpc.MethodInitialize, codexrpc.InitializeParams{ClientInfo: codexrpc.ClientInfo{Name: "desktop-agent-test", Version: "0"}}, &init))
	require.Contains(t, init, "userAgent", "codex app-server answered initialize: %v", init)

	root := func(argv ...string) string {
		t.Helper()
		r, err := b.Exec(ctx, Cmd{Argv: argv, User: "root"})
		require.NoError(t, err)
		require.Equal(t, 0, r.ExitCode, "%v: %s", argv, r.Stderr)
		return strings.TrimSpace(string(r.Stdout))
	}
	dir := "/home/user/.open-bot-agent"
	require.Equal(t, "700 user", root("stat", "-c", "%a %U", dir))
	require.Equal(t, "700 user", root("stat", "-c", "%a %U", dir+"/codex"))
	require.Equal(t, "600 user", root("stat", "-c", "%a %U", dir+"/model_api_key"), "the key file is the user's alone")
	require.Equal(t, key, root("cat", dir+"/model_api_key"))
	cfg := root("cat", dir+"/codex/config.toml")
	require.Contains(t, cfg, `model_provider = "botd"`)
	require.Contains(t, cfg, `base_url = "http://127.0.0.1:18080/v1"`)
	require.Contains(t, cfg, `env_key = "OPEN_BOT_MODEL_TOKEN"`)
	require.NotContains(t, cfg, key, "the config names the variable, never the key")

	// No command line in the sandbox carries the key; the app-server's
	// environment does (CODEX_HOME pointing at the managed config).
	require.NotContains(t, root("ps", "-eo", "args"), key, "the key is in a command line")
	pids := strings.Fields(root("sh", "-c", "pgrep -u user -f 'codex app-server' || true"))
	require.NotEmpty(t, pids, "codex app-server runs as user")
	found := false
	for _, pid := range pids {
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		// The process's own user reads its environment (root in the
		// container lacks CAP_SYS_PTRACE for another user's).
		r, err := b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "tr '\\0' '\\n' </proc/" + pid + "/environ 2>/dev/null || true"}, User: "user"})
		require.NoError(t, err)
		env := string(r.Stdout)
		if strings.Contains(env, "OPEN_BOT_MODEL_TOKEN="+key) {
			require.Contains(t, env, "CODEX_HOME="+dir+"/codex")
			found = true
		}
	}
	require.True(t, found, "no codex app-server process holds the key in its environment")

	// Without a model the app-server starts as before, and nothing is
	// written for it.
	_ = conn.Close()
	root("rm", "-rf", dir)
	bare := newMachine(t, b)
	conn2, err := bare.DialAgent(ctx, nil)
	require.NoError(t, err)
	defer conn2.Close()
	require.NoError(t, conn2.Call(ctx, codexrpc.MethodInitialize, codexrpc.InitializeParams{ClientInfo: codexrpc.ClientInfo{Name: "desktop-agent-test", Version: "0"}}, &init))
	require.Equal(t, "absent", root("sh", "-c", "test -e "+dir+" && echo present || echo absent"))
}

package main

// Red team, position "a bot on a vendor's stock desktop" (issue 36, row
// 4; issue 30 requirement 2): on an E2B `desktop` template (likewise
// Daytona's `desktop` snapshot and a Box) there is no botd and no root
// between the bot and the model: the worker used to write MODEL_API_KEY
// into the sandbox as a file of its one user and start codex with it in
// its environment, so the bot's own shell could read the worker's model
// key. The key must never enter such a machine: Codex there (runtime
// machine) is refused (501 unavailable) before anything is written; a run
// with the worker runtime keeps the key in the worker, and after it the
// key is nowhere in the sandbox, searched as root.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// keyHunt is the bot's shell hunting for the key ($1$2, split so that no
// command line or file this hunt makes holds it whole): every process
// environment it can read, every file it can read outside /proc, /sys and
// /dev, and the file the worker used to write. It prints where it found
// the key (paths, never the key).
const keyHunt = `k="$1$2"
for f in /proc/[0-9]*/environ; do
  tr '\0' '\n' <"$f" 2>/dev/null | grep -qF -- "$k" && echo "environ $f"
done
grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -- "$k" / 2>/dev/null | sed 's/^/file /'
test -e /home/user/.open-bot-agent && echo "dir /home/user/.open-bot-agent"
true`

// huntKey runs keyHunt as bot through the worker's shell tool and returns
// what it found.
func huntKey(t *testing.T, d *workerEnv, bot, key string) []string {
	t.Helper()
	var out struct {
		Success bool
		Content []struct{ Text string }
	}
	half := len(key) / 2
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/tools/shell", map[string]any{"botId": bot,
		"args": map[string]any{"argv": []string{"sh", "-c", keyHunt, "sh", key[:half], key[half:]}, "timeoutMs": 600000}}, &out))
	require.True(t, out.Success, "%+v", out)
	require.NotEmpty(t, out.Content)
	var r struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.Content[0].Text), &r), "%s", out.Content[0].Text)
	require.Zero(t, r.ExitCode, "the hunt ran: %s", r.Stderr)
	require.NotContains(t, r.Stdout+r.Stderr, key, "the hunt printed the key")
	return strings.Fields(strings.ReplaceAll(r.Stdout, "\n", " | "))
}

// TestRedTeamDesktopModelKey: the row on a desktop machine (E2B's
// desktop template): Codex in the sandbox (runtime machine) is refused
// with 501 unavailable before anything is written there; a full run with
// the worker runtime (the default) works, its model on the host's
// loopback, and that model plays a prompt-injected teammate: it hunts for
// its own key through the bot's shell (keyHunt: environments, files, the
// agent directory of old) and finds nothing. After the run, as root, the
// key and its hash prefix are nowhere in the sandbox (huntSecret), while a
// canary planted the same ways in the same sandbox is found in each place.
func TestRedTeamDesktopModelKey(t *testing.T) {
	emu := bothTemplates(t)
	dir := openDir(t, "wire-rtkey-")
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	key := "sk-redteam-desktop-" + hex.EncodeToString(buf)
	model := newHostModel(t, key)
	e := templateWorker(t, e2bEnv(emu, model.env(nil)), filepath.Join(dir, "machines"))
	const bot = "alice"
	status, cc, d := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "rtkey"}, "template": e2b.DesktopTemplate})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	runningOrRecovered(t, d, cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, d.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	row, err := e.w.Store.GetComputer(t.Context(), d.computer)
	require.NoError(t, err)

	// What made the worker write the key, once: Codex in the machine.
	requireMachineRefused(t, d, bot, "Say hello.")

	// A full worker-runtime run; its model hunts for its own key through
	// the bot's shell ($1$2: no argv holds the key whole), then writes
	// what it found.
	half := len(key) / 2
	steps := []mockmodel.Step{
		{Tool: "computer_observe", Args: map[string]any{}},
		{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c", keyHunt, "sh", key[:half], key[half:]}, "timeoutMs": 600000}},
	}
	srv := model.play(func(outs []mockmodel.Output) mockmodel.Step {
		switch {
		case len(outs) < len(steps):
			return steps[len(outs)]
		case len(outs) == len(steps):
			return mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": "bots/" + bot + "/hunt.txt", "content": outs[1].Text}}
		}
		return mockmodel.Step{Message: "Done hunting."}
	})
	id := d.startRunOn(t, bot, "Find your model key.", "")
	final, _ := waitRun(t, d, id, 15*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, "run error: %s; tool calls: %+v", final.Error, final.ToolCalls)
	require.Equal(t, "worker", final.Runtime, "the default runtime on a stock desktop")
	require.Equal(t, 4, srv.Requests(), "the model's requests, each with its key")
	require.Len(t, final.ToolCalls, 3)
	for _, tc := range final.ToolCalls {
		require.True(t, tc.Success, "%s: %s", tc.Tool, tc.Output)
	}
	var hunt struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	require.NoError(t, json.Unmarshal([]byte(final.ToolCalls[1].Output), &hunt), "%s", final.ToolCalls[1].Output)
	require.Zero(t, hunt.ExitCode, "the hunt ran: %s", hunt.Stderr)
	require.NotContains(t, hunt.Stdout+hunt.Stderr, key, "the hunt printed the key")
	require.Empty(t, strings.TrimSpace(hunt.Stdout), "the run's model found its key through the bot's shell")

	// As root, after the full run: nowhere (and the canary everywhere).
	requireNoKeyInSandbox(t, sandboxOf(t, row.ProviderRef), key)
	// The bot's own shell, with a direct call too.
	require.Empty(t, huntKey(t, d, bot, key), "the bot's shell found the worker's model key on the desktop machine")

	// Direct tool calls keep working there.
	require.Equal(t, "user", strings.TrimSpace(shellAs(t, d, bot)))
	status, text := toolCall(t, d, bot, "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", text)
}

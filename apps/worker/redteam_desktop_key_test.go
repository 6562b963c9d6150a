package main

// Red team, position "a bot on a vendor's stock desktop" (issue 36, row
// 4): on an E2B `desktop` template (likewise Daytona's `desktop` snapshot
// and a Box) there is no botd and no root between the bot and the model:
// the worker used to write MODEL_API_KEY into the sandbox as a file of its
// one user and start codex with it in its environment, so the bot's own
// shell could read the worker's model key. The key must never enter such
// a machine: a run there is refused (501 unavailable) before anything is
// written, and the bot's shell finds the key nowhere it can read.

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

func TestRedTeamDesktopModelKey(t *testing.T) {
	emu := bothTemplates(t)
	dir := openDir(t, "wire-rtkey-")
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	key := "sk-redteam-desktop-" + hex.EncodeToString(buf)
	e := templateWorker(t, e2bEnv(emu, map[string]string{
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:18080/v1", "MODEL_API_KEY": key,
	}), filepath.Join(dir, "machines"))
	const bot = "alice"
	status, cc, d := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "rtkey"}, "template": e2b.DesktopTemplate})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, d.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))

	// What made the worker write the key: a run of the bot.
	var started struct {
		Run   runs.Snapshot `json:"run"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	runStatus := d.do(t, "POST", "/runs", map[string]string{"botId": bot, "prompt": "Say hello."}, &started)
	if runStatus == http.StatusCreated {
		// Wait for the run to reach its agent (or fail trying).
		deadline := time.Now().Add(3 * time.Minute)
		for d.getRun(t, started.Run.ID).Status == runs.StatusQueued && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
		}
		// Stopped after the hunt, so a live agent's environment is hunted.
		defer d.do(t, "POST", "/runs/"+started.Run.ID+"/stop", nil, nil)
	}

	found := huntKey(t, d, bot, key)
	require.Empty(t, found, "the bot's shell found the worker's model key on the desktop machine")

	require.Equal(t, http.StatusNotImplemented, runStatus, "a run on a stock desktop is refused: %+v", started)
	require.NotNil(t, started.Error)
	require.Equal(t, "unavailable", started.Error.Code)
	require.Contains(t, started.Error.Message, "model key")

	// Direct tool calls keep working there.
	require.Equal(t, "user", strings.TrimSpace(shellAs(t, d, bot)))
	status, text := toolCall(t, d, bot, "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", text)
}

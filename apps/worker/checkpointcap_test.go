package main

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// Displays 596-599 and loopback ports 15250-15260 are this test's alone.
const (
	capDisplayBase = 596
	capPortBase    = 15250
)

// TestRunCheckpointOverTheCap (issue 25, red team): a home larger than
// COMPUTER_HOME_MAX_BYTES used to be checkpointed whole (and one over what
// an import accepts replaced the last good checkpoint for good). Now the
// run's end checkpoint (the worker-owned home's revision marker, which
// measures the home) fails with checkpoint_failed and the reason, POST
// …/checkpoint (an export) answers 502, and the previous checkpoint stays
// the latest with its content.
func TestRunCheckpointOverTheCap(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	const bot = "bob"
	modelSrv := failingModel(t, mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": "bots/" + bot + "/run.txt", "content": "written by the run\n"}})
	dir := openDir(t, "wire-ckptcap-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(capDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(capPortBase), "WORKER_LOCAL_SLOTS": "1",
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		"COMPUTER_HOME_MAX_BYTES": fmt.Sprint(32 << 20),
	}
	machines := filepath.Join(dir, "machines")
	e := providerWorker(t, env, machines, bot)

	// A good checkpoint first.
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_write", map[string]any{"botId": bot,
		"args": map[string]string{"path": "bots/" + bot + "/kept.txt", "content": "in the good checkpoint\n"}}, nil))
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/checkpoint", nil, nil))
	good := lastCheckpoint(t, e)
	require.Positive(t, good)

	// The bot fills its home past the cap (48 MiB of data, not sparse).
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	big := make([]byte, 48<<20)
	_, _ = rand.Read(big)
	home := e.w.Computers.HomeDir(c, c.Provider)
	require.Equal(t, filepath.Join(machines, "homes", c.HomeKey+".local", "home"), home)
	require.NoError(t, os.WriteFile(filepath.Join(home, "bot", "bots", bot, "big.bin"), big, 0o644))

	// The run's end: checkpoint_failed, with the reason.
	id := e.startRun(t, bot, "Write the file.")
	final, events := waitRun(t, e, id, 5*time.Minute)
	require.Equal(t, runs.StatusFailed, final.Status, "run: %+v", final)
	require.Contains(t, events, "checkpoint_failed", "%v", events)
	require.NotContains(t, events, "checkpoint", "%v", events)
	evs, err := e.w.Store.Events(t.Context(), id, 0)
	require.NoError(t, err)
	var reason string
	for _, ev := range evs {
		if ev.Type == "checkpoint_failed" {
			reason = string(ev.Data)
		}
	}
	t.Logf("checkpoint_failed: %s", reason)
	require.Contains(t, reason, "larger than the cap")
	require.Contains(t, reason, "the previous checkpoint is kept")

	// An explicit checkpoint: 502 with the reason.
	var fail struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.Equal(t, http.StatusBadGateway, e.do(t, "POST", "/checkpoint", nil, &fail))
	require.True(t, strings.Contains(fail.Error.Message, "larger than the cap"), fail.Error.Message)

	// The good one is still the latest, whole.
	require.Equal(t, good, lastCheckpoint(t, e))
	rev, content, ok := checkpointFile(t, e, "bots/"+bot+"/kept.txt")
	require.True(t, ok)
	require.Equal(t, good, rev)
	require.Equal(t, "in the good checkpoint\n", content)
}

package main

import (
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/progress"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// Displays 780-783 and loopback ports 28000-28010 (one local slot) are
// this test's alone.
const (
	cliProgDisplayBase = 780
	cliProgPortBase    = 28000
)

// TestCLIProgress (issue 24.4): `worker computers checkpoint|stop|start`
// against a real worker and local machine show their phases, the
// checkpoint's size and rate, and the wait for the computer to be running,
// as plain lines when the output is not a terminal (no carriage return).
func TestCLIProgress(t *testing.T) {
	requireIntegration(t, "Xvfb", "chromium", "x11vnc", "xfwm4")
	const bot = "alice"
	dir := openDir(t, "wire-cliprog-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(cliProgDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(cliProgPortBase), "WORKER_LOCAL_SLOTS": "1",
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	t.Setenv("WORKER_TOKEN", e.token)
	t.Setenv("WORKER_TOKEN_FILE", "")
	cli := func(args ...string) string {
		t.Helper()
		var buf bytes.Buffer
		full := append([]string{args[0], "--url", e.url, "--capability", e.capa}, args[1:]...)
		require.NoError(t, runComputersWith(t.Context(), full, progress.New(&buf, false)), "%s", buf.String())
		t.Logf("worker computers %v:\n%s", args, buf.String())
		require.NotContains(t, buf.String(), "\r")
		return buf.String()
	}
	line := func(re string) *regexp.Regexp { return regexp.MustCompile(`(?m)^` + re + `$`) }
	id := regexp.QuoteMeta(e.computer)

	// Something in the home, so the checkpoint has bytes to count.
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_write", map[string]any{"botId": bot,
		"args": map[string]string{"path": "bots/" + bot + "/notes.txt", "content": "kept across the checkpoint\n"}}, nil))
	out := cli("checkpoint", e.computer)
	require.Regexp(t, line(`checkpointing `+id+` · \S+`), out)
	require.Regexp(t, line(`checkpointed `+id+`: \d+(\.\d)? [kMGT]?B in \S+ \(\d+(\.\d)? [kMGT]?B/s\)`), out)

	out = cli("stop", e.computer)
	require.Regexp(t, line(`stopping `+id+` · \S+`), out)
	require.Regexp(t, line(id+` is stopped after \S+`), out)

	out = cli("start", e.computer)
	require.Regexp(t, line(`starting `+id+` · \S+`), out)
	require.Regexp(t, line(id+` is running after \S+`), out)
}

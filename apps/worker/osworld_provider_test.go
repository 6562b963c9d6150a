package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// osworldDir is integrations/osworld, from this package's directory.
func osworldDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../../integrations/osworld")
	require.NoError(t, err)
	return d
}

// TestOSWorldRelayUnit runs the provider's relay tests (stdlib unittest).
func TestOSWorldRelayUnit(t *testing.T) {
	requireIntegration(t, "python3")
	cmd := exec.Command("python3", "-m", "unittest", "-v", "test_relay")
	cmd.Dir = osworldDir(t)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "\nOK")
}

// TestOSWorldProviderDocker runs integrations/osworld/e2e.py against a
// worker with the docker provider: the OpenBot provider and manager the
// way OSWorld's DesktopEnv calls them (get_vm_path makes an evaluation
// computer, start_emulator starts the relay, the guest checks with
// PythonController's requests, a pyautogui click, pyautogui calls right
// after CDP sessions, save_state, a file written after it, revert_to_snapshot
// to a fresh computer restored from the checkpoint, the file gone, the one
// from before there, stop_emulator). Every step's line must say ok.
func TestOSWorldProviderDocker(t *testing.T) {
	requireIntegration(t, "python3")
	image := dockerImage(t)
	dir := openDir(t, "osworld-")
	e := serveOnProvider(t, t.TempDir(), filepath.Join(dir, "machines"), "scripted-model", map[string]string{
		"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image,
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:1/v1", "MODEL_API_KEY": scriptedKey,
	}, testLog(t))
	tok := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tok, []byte(e.token), 0o600))

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "e2e.py")
	cmd.Dir = osworldDir(t)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "OPENBOT_WORKER_URL="+e.url,
		"OPENBOT_WORKER_TOKEN_FILE="+tok, "OPENBOT_PROVIDER="+providers.KindDocker)
	out, err := cmd.CombinedOutput()
	steps := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		var s struct {
			Step string `json:"step"`
			OK   bool   `json:"ok"`
		}
		if json.Unmarshal([]byte(line), &s) == nil && s.Step != "" {
			steps[s.Step] = s.OK
			if !s.OK {
				t.Errorf("step %s failed: %s", s.Step, line)
			}
		}
	}
	require.NoError(t, err, "e2e.py:\n%s", out)
	for _, must := range []string{"get_vm_path", "start_emulator", "get_screenshot", "get_accessibility_tree",
		"execute_python_command", "click", "execute_right_after_cdp", "save_state", "after_is_there",
		"revert_to_snapshot", "reverted_to_a_new_computer", "before_is_restored", "after_is_gone", "stop_emulator", "e2e"} {
		ok, seen := steps[must]
		require.True(t, seen, "e2e.py printed no %s step:\n%s", must, out)
		require.True(t, ok, "step %s", must)
	}
}

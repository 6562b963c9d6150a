package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
)

// TestAcceptanceReplaceE2B: the acceptance flow on the e2b provider against
// the emulator (template open-bot: the computer image as a container),
// alice's run on Codex in the machine and bob's on the worker's loop
// (containerFlow). mockserve (the button pages, and alice's scripted
// model) runs inside the sandbox's container, started by the test with
// `docker exec` on the container the emulator made (the test's own setup;
// the worker reaches the sandbox only through the emulator's API and
// envd). The sandbox is lost behind the worker's back (killed through the
// emulator's own API with its key) and recover replaces it through the
// stale ref from the checkpoint.
// Under CI=true a missing engine or image fails (emutest.Unavailable).
func TestAcceptanceReplaceE2B(t *testing.T) {
	if os.Geteuid() != 0 {
		requireIntegration(t)
	}
	emu := emutest.Start(t, nil, nil)
	// The worker reaches the emulator through its spec checker (a
	// violation on its path fails the test).
	checked := emu.Proxy(t)

	dir := openDir(t, "wire-e2b-")
	ms := buildMockserve(t, dir)
	flow := newContainerFlow(t, ms)
	container := func(ref string) string {
		r, err := e2b.ParseRef(ref)
		require.NoError(t, err)
		return "e2b-emu-" + r.SandboxID
	}
	startPage := func(ref string) { flow.start(container(ref)) }

	env := map[string]string{
		"WORKER_PROVIDER": providers.KindE2B, "E2B_API_KEY": emu.APIKey,
		"E2B_API_URL": checked, "E2B_SANDBOX_URL": checked, "E2B_TEMPLATE": "open-bot",
	}
	for k, v := range flow.env {
		env[k] = v
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), flow.mates[0].bot)
	flow.addBots(t, e)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	startPage(c.ProviderRef)
	// The model key reaches the sandbox as a root-only file, never in the
	// container's configuration.
	inspect, err := exec.Command("docker", "inspect", container(c.ProviderRef)).CombinedOutput()
	require.NoError(t, err, "%s", inspect)
	require.NotContains(t, string(inspect), scriptedKey, "the model key is in docker inspect")

	lose := func(ref, _ string) {
		t.Helper()
		r, err := e2b.ParseRef(ref)
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, emu.URL+"/sandboxes/"+r.SandboxID, nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", emu.APIKey)
		resp, err := emu.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode, "the emulator killed the sandbox")
		require.Error(t, exec.Command("docker", "inspect", container(ref)).Run(), "the sandbox's container is gone")
	}
	finals := acceptanceReplace(t, e, flow.mates, lose, startPage, false)
	flow.check(t, finals)
}

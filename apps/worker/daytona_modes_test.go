package main

// The daytona kind's two modes through the worker, against the emulator
// (emutest: sandboxes as containers on the local engine, every exchange of
// the worker's provider validated against the vendor's spec by the
// emulator's checker): takeover on either snapshot, seed 000's acceptance
// flow on snapshot open-bot with the sandbox lost and a replacement
// restored from the checkpoint, and on snapshot desktop (the vendor's
// computer-use desktop driven through the toolbox). The worker reaches a
// sandbox only through the emulator's API, toolbox and previews; the
// tests' own setup and probes use `docker exec` on the container the
// emulator made.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator/emutest"
)

// bothSnapshots is a Daytona emulator with snapshot open-bot (the computer
// image, botd inside) and desktop (the stand-in for Daytona's stock
// computer-use desktop).
func bothSnapshots(t *testing.T) *emutest.Server {
	t.Helper()
	if os.Geteuid() != 0 {
		requireIntegration(t) // root: the engine's socket
	}
	snaps := emutest.DefaultSnapshots()
	desk := emutest.DesktopSnapshot()
	// The scripted model plays on botd's 1280x800 (its button page is laid
	// out for it): the stand-in's computer-use display is that size here
	// (the vendor's default, 1024x768, is the conformance suite's).
	desk.Geometry = "1280x800"
	snaps[daytona.DesktopSnapshot] = desk
	emu := emutest.Start(t, emutest.Options{Snapshots: snaps})
	emu.Proxy(t)
	return emu
}

// daytonaEnv is a worker environment on the emulator, default snapshot
// open-bot, plus extra. The worker reaches the emulator through the spec
// checker's proxy (emu.Proxy first): the API, and the toolbox and preview
// URLs the emulator hands out (they name the proxy).
func daytonaEnv(emu *emutest.Server, extra map[string]string) map[string]string {
	if emu.ProxyURL == "" {
		panic("daytonaEnv: the emulator has no spec checker's proxy (call emu.Proxy)")
	}
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindDaytona, "DAYTONA_API_KEY": emu.APIKey,
		"DAYTONA_API_URL": emu.ProxyURL, "DAYTONA_SNAPSHOT": daytona.DefaultSnapshot,
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// daytonaContainer is the emulator's container of a ref.
func daytonaContainer(t testing.TB, ref string) string {
	t.Helper()
	r, err := daytona.ParseRef(ref)
	require.NoError(t, err)
	return "daytona-emu-" + r.SandboxID
}

// daytonaBotdLogOnFailure prints the end of botd's log in the computer's
// sandbox (the one it has then: recover may have replaced it) when t
// failed, before the sandbox is deleted: what botd saw of a failed call.
func daytonaBotdLogOnFailure(t *testing.T, e *workerEnv) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		c, err := e.w.Store.GetComputer(context.Background(), e.computer)
		if err != nil || c.ProviderRef == "" {
			return
		}
		out, _ := exec.Command("docker", "exec", daytonaContainer(t, c.ProviderRef), "tail", "-n", "60", "/var/log/open-bot-botd.log").CombinedOutput()
		t.Logf("botd's log in the sandbox:\n%s", out)
	})
}

// loseDaytona deletes the sandbox behind ref behind the worker's back:
// through the emulator's own API with its key.
func loseDaytona(t testing.TB, emu *emutest.Server, ref string) {
	t.Helper()
	r, err := daytona.ParseRef(ref)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodDelete, emu.URL+"/sandbox/"+r.SandboxID, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+emu.APIKey)
	resp, err := emu.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the emulator deleted the sandbox")
	require.Error(t, exec.Command("docker", "inspect", daytonaContainer(t, ref)).Run(), "the sandbox's container is gone")
}

// TestTakeoverDaytona: TestTakeoverE2B's takeover on both Daytona
// snapshots (open-bot: botd's own screens and relay, with a run; desktop:
// the vendor's display :0, its noVNC port of the desktop machine reached
// through preview-url and its token behind the worker's capability proxy,
// with a worker-runtime run whose model is on the host's loopback:
// takeoverDesktop).
func TestTakeoverDaytona(t *testing.T) {
	emu := bothSnapshots(t)
	dir := openDir(t, "wire-dttk-")
	ms := buildMockserve(t, dir)
	e := templateWorker(t, daytonaEnv(emu, map[string]string{
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:18080/v1", "MODEL_API_KEY": scriptedKey,
	}), filepath.Join(dir, "machines"))
	// The desktop's worker-runtime runs reach the host's model (another
	// worker: the setting is the worker's).
	model := newHostModel(t, scriptedKey)
	de := templateWorker(t, daytonaEnv(emu, model.env(nil)), filepath.Join(dir, "machines-desktop"))
	for i, snap := range []string{daytona.DefaultSnapshot, daytona.DesktopSnapshot} {
		t.Run(snap, func(t *testing.T) {
			const bot = "alice"
			e := e
			if snap == daytona.DesktopSnapshot {
				e = de
			}
			status, cc, c := createComputer(t, e, map[string]any{"scope": map[string]string{"team": fmt.Sprintf("dtk%d", i)}, "template": snap})
			require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
			runningOrRecovered(t, c, cc.Computer.State, cc.Computer.LastError)
			require.Equal(t, snap, cc.Computer.Template)
			require.Equal(t, http.StatusCreated, c.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
			if snap == daytona.DesktopSnapshot {
				takeoverDesktop(t, e, c, model, bot, func(ref string) string { return daytonaContainer(t, ref) })
				return
			}
			takeoverFlow(t, e, c, bot, ms, func(ref string) string { return daytonaContainer(t, ref) }, botdXauth)
		})
	}
}

// TestAcceptanceReplaceDaytona: the acceptance flow on the daytona
// provider against the emulator (snapshot open-bot: the computer image as a
// container, botd inside), alice's run on Codex in the machine and bob's
// on the worker's loop (containerFlow), mockserve (the button pages, and
// alice's scripted model) inside the sandbox's container. The sandbox is
// deleted behind the worker's back and recover replaces it, restored from
// the checkpoint.
func TestAcceptanceReplaceDaytona(t *testing.T) {
	emu := bothSnapshots(t)
	dir := openDir(t, "wire-dt-")
	ms := buildMockserve(t, dir)
	flow := newContainerFlow(t, ms)
	startPage := func(ref string) { flow.start(daytonaContainer(t, ref)) }

	env := daytonaEnv(emu, flow.env)
	e := providerWorker(t, env, filepath.Join(dir, "machines"), flow.mates[0].bot)
	flow.addBots(t, e)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	daytonaBotdLogOnFailure(t, e)
	startPage(c.ProviderRef)
	// The model key reaches the sandbox as a root-only file, never in the
	// container's configuration.
	inspect, err := exec.Command("docker", "inspect", daytonaContainer(t, c.ProviderRef)).CombinedOutput()
	require.NoError(t, err, "%s", inspect)
	require.NotContains(t, string(inspect), scriptedKey, "the model key is in docker inspect")
	finals := acceptanceReplace(t, e, flow.mates, func(ref, _ string) { loseDaytona(t, emu, ref) }, startPage, false)
	flow.check(t, finals)
}

// TestAcceptanceDaytonaDesktop: seed 000's acceptance flow on snapshot
// desktop with the worker runtime (TestAcceptanceE2BDesktop's steps,
// acceptanceDesktop): runtime machine refused, a worker-runtime run whose
// scripted model on the host's loopback finds the page's button in the
// computer-use screenshots and clicks it once with no miss, then the shell
// and file tools; the key nowhere in the sandbox; the checkpoint comes
// back into a desktop replacement after the sandbox is deleted behind the
// worker's back.
func TestAcceptanceDaytonaDesktop(t *testing.T) {
	emu := bothSnapshots(t)
	dir := openDir(t, "wire-dtdesk-")
	page := newSandboxPage(t, dir)
	model := newHostModel(t, scriptedKey)
	e := templateWorker(t, daytonaEnv(emu, model.env(nil)), filepath.Join(dir, "machines"))
	acceptanceDesktop(t, e, model, page, daytona.DesktopSnapshot, emutest.DesktopImage(),
		func(ref string) string { return daytonaContainer(t, ref) }, func(ref string) { loseDaytona(t, emu, ref) })
}

package main

// The box kind through the worker, against the Box emulator (boxes as
// containers of the stock desktop image, driven through Box's command
// API): seed 000's acceptance flow with a worker-runtime run, the box lost
// behind the worker's back and a replacement restored from the checkpoint,
// and takeover of a worker-runtime run through
// the worker's capability proxy (the box's desktop page, whose URL carries
// its secret, is reached by the worker only). The worker reaches a box only
// through the emulator's API; the tests' own setup and probes use `docker
// exec` on the container the emulator made.

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/providers/box"
	boxemutest "github.com/open-bot/computer/apps/worker/internal/providers/box/emulator/emutest"
)

func boxEmulator(t *testing.T) *boxemutest.Server {
	t.Helper()
	if os.Geteuid() != 0 {
		requireIntegration(t) // root: the engine's socket
	}
	emu := boxemutest.Start(t)
	emu.Proxy(t)
	return emu
}

// boxEnv is a worker environment on the Box emulator, plus extra. The
// worker reaches the emulator through the spec checker's proxy (emu.Proxy
// first), the desktopUrl it hands out included.
func boxEnv(emu *boxemutest.Server, extra map[string]string) map[string]string {
	if emu.ProxyURL == "" {
		panic("boxEnv: the emulator has no spec checker's proxy (call emu.Proxy)")
	}
	env := map[string]string{"WORKER_PROVIDER": providers.KindBox, "BOX_API_KEY": emu.APIKey, "BOX_API_URL": emu.ProxyURL}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// boxContainer is the emulator's container of a box.
func boxContainer(t testing.TB, emu *boxemutest.Server, ref string) string {
	t.Helper()
	c := emu.Emulator.Container(ref)
	require.NotEmpty(t, c, "the emulator has box %s", ref)
	return c
}

// deleteBox loses the box behind ref behind the worker's back: deleted
// through the emulator's own API with its key.
func deleteBox(t testing.TB, emu *boxemutest.Server, ref string) {
	t.Helper()
	container := boxContainer(t, emu, ref)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodDelete, emu.URL+box.Base+"/boxes/"+ref, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+emu.APIKey)
	resp, err := emu.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the emulator deleted the box")
	require.Error(t, exec.Command("docker", "inspect", container).Run(), "the box's container is gone")
}

// TestAcceptanceReplaceBox: seed 000's acceptance flow on the box kind
// with the worker runtime (acceptanceDesktop): the box offers runtime
// worker alone and refuses runtime machine (501 unavailable: the model key
// never enters a box); a run with the default runtime has the worker call
// the scripted model on the host's loopback, which finds the page's button
// (served in the box) in the screenshots, clicks it once with no miss, runs
// a shell command and writes a file; afterwards the key is nowhere in the
// box; an explicit checkpoint exports the file. Then the box is deleted
// behind the worker's back and recover makes a replacement box into which
// the checkpoint is imported: the file is back.
func TestAcceptanceReplaceBox(t *testing.T) {
	emu := boxEmulator(t)
	dir := openDir(t, "wire-box-")
	page := newSandboxPage(t, dir)
	model := newHostModel(t, scriptedKey)
	e := templateWorker(t, boxEnv(emu, model.env(nil)), filepath.Join(dir, "machines"))
	d := acceptanceDesktop(t, e, model, page, "", boxemutest.Image(),
		func(ref string) string { return boxContainer(t, emu, ref) }, func(ref string) { deleteBox(t, emu, ref) })
	c, err := e.w.Store.GetComputer(t.Context(), d.computer)
	require.NoError(t, err)
	require.Equal(t, providers.KindBox, c.Provider)
}

// TestTakeoverBox: takeover on the box kind, as TestTakeoverE2B does it on
// E2B's desktop (takeoverDesktop): runtime machine refused, a
// worker-runtime run that asks for a person (its model on the host's
// loopback), the policy (409 while the run is busy or another worker's
// run holds the bot's execution lease), the run's and an idle bot's worker
// control links (the worker's URL: never the box's desktop URL or its
// secret), a raw RFB client through the worker's relay (which reaches the
// box's desktop page from the worker) moving the X pointer on the box's :0
// while control is held, the agent refused meanwhile, and the release:
// closed by the server, the link refused (410), later input never reaches
// X, the run resumes and completes, and the agent has its screen back.
func TestTakeoverBox(t *testing.T) {
	emu := boxEmulator(t)
	dir := openDir(t, "wire-boxtk-")
	model := newHostModel(t, scriptedKey)
	e := templateWorker(t, boxEnv(emu, model.env(nil)), filepath.Join(dir, "machines"))
	const bot = "alice"
	status, cc, c := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "tk"}})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	runningOrRecovered(t, c, cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, c.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	emuURL, err := url.Parse(emu.URL)
	require.NoError(t, err)
	proxyURL, err := url.Parse(emu.ProxyURL)
	require.NoError(t, err)
	takeoverDesktop(t, e, c, model, bot, func(ref string) string { return boxContainer(t, emu, ref) }, emuURL.Host, proxyURL.Host, "/desktop/")
}

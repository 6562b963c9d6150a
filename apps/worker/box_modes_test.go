package main

// The box kind through the worker, against the Box emulator (boxes as
// containers of the stock desktop image, driven through Box's command
// API): seed 000's acceptance flow with the box lost behind the worker's
// back and a replacement restored from the checkpoint, and takeover through
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

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
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

// TestAcceptanceReplaceBox: seed 000's acceptance flow on the box kind.
// No agent runs on a box (the model key would be its user's to read): a
// run is refused (501 unavailable) and the scripted model's decisions are
// played through the direct tool API against the button page (mockserve
// in the box): it finds the page's button in the screenshots it gets and
// clicks it, runs a shell command and writes a file; the key is nowhere
// in the box; an explicit checkpoint exports the file. Then the box is deleted
// behind the worker's back and recover makes a replacement box into which
// the checkpoint is imported: the file is back.
func TestAcceptanceReplaceBox(t *testing.T) {
	emu := boxEmulator(t)
	dir := openDir(t, "wire-box-")
	ms := buildMockserve(t, dir)
	page := &inContainer{t: t, dir: ms, cookie: mockmodel.NewButtonPage().Cookie}

	const bot = "alice"
	e := templateWorker(t, boxEnv(emu, map[string]string{
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:18080/v1", "MODEL_API_KEY": scriptedKey,
	}), filepath.Join(dir, "machines"))
	status, cc, d := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "t1"}})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, providers.KindBox, cc.Computer.Provider)
	require.Equal(t, http.StatusCreated, d.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	ctx := t.Context()
	c, err := e.w.Store.GetComputer(ctx, d.computer)
	require.NoError(t, err)
	container := boxContainer(t, emu, c.ProviderRef)
	page.start(container)

	// No run on a box (the model key would be the box user's): the
	// scripted model's decisions go through the direct tools.
	acceptanceDirect(t, d, page, "http://127.0.0.1:18081/", bot)

	// The worker's model key never entered the box: in no container
	// configuration, no command line, no agent directory.
	inspect, err := exec.Command("docker", "inspect", container).CombinedOutput()
	require.NoError(t, err, "%s", inspect)
	require.NotContains(t, string(inspect), scriptedKey, "the model key is in docker inspect")
	ps, err := exec.Command("docker", "exec", container, "ps", "-eo", "args").CombinedOutput()
	require.NoError(t, err, "%s", ps)
	require.NotContains(t, string(ps), scriptedKey, "the model key is in a command line in the box")
	require.Error(t, exec.Command("docker", "exec", container, "test", "-e", "/home/user/.open-bot-agent").Run(),
		"the worker made an agent directory in the box")

	m, err := e.w.Computers.Machine(ctx, d.computer)
	require.NoError(t, err)
	who, err := m.ReadFile(ctx, "bots/"+bot+"/whoami.txt", 1<<20)
	require.NoError(t, err)
	require.Equal(t, "user\n", string(who), "the shell tool ran as the box's user")

	var cp CheckpointAnswer
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/checkpoint", nil, &cp))
	var got struct {
		Computer struct {
			LastCheckpoint *struct{ Revision, Size int64 } `json:"lastCheckpoint"`
		} `json:"computer"`
	}
	require.Equal(t, http.StatusOK, d.do(t, "GET", "", nil, &got))
	require.NotNil(t, got.Computer.LastCheckpoint)
	require.Equal(t, cp.Revision, got.Computer.LastCheckpoint.Revision, "the computer shows the checkpoint just written")
	_, content, ok := checkpointFile(t, d, "bots/"+bot+"/result.txt")
	require.True(t, ok, "the exported checkpoint holds the model's file")
	require.Equal(t, "the button was pressed\n", content)

	// Lost behind the worker's back; the replacement is a new box with the
	// checkpoint imported.
	deleteBox(t, emu, c.ProviderRef)
	var rec struct {
		Computer computers.View `json:"computer"`
	}
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/recover", nil, &rec))
	require.Equal(t, "running", rec.Computer.State, rec.Computer.LastError)
	after, err := e.w.Store.GetComputer(ctx, d.computer)
	require.NoError(t, err)
	require.NotEqual(t, c.ProviderRef, after.ProviderRef)
	require.Equal(t, boxemutest.Image(), imageOf(t, boxContainer(t, emu, after.ProviderRef)))
	m, err = e.w.Computers.Machine(ctx, d.computer)
	require.NoError(t, err)
	res, err := m.ReadFile(ctx, "bots/"+bot+"/result.txt", 1<<20)
	require.NoError(t, err, "the model-created file came back")
	require.Equal(t, "the button was pressed\n", string(res))
}

// TestTakeoverBox: takeover on the box kind, as TestTakeoverE2B does it on
// E2B's desktop (takeoverNoRun: no run on a box, whose model key would be
// its user's): a run refused, the policy (409 while another worker's run
// holds the bot's execution lease), an idle bot's worker control link (the
// worker's URL: never the box's desktop URL or its secret), a raw RFB
// client through the worker's relay (which reaches the box's desktop page
// from the worker) moving the X pointer on the box's :0 while control is
// held, the agent refused meanwhile, and the release: closed by the
// server, the link refused (410), later input never reaches X, and the
// agent has its screen back.
func TestTakeoverBox(t *testing.T) {
	emu := boxEmulator(t)
	dir := openDir(t, "wire-boxtk-")
	e := templateWorker(t, boxEnv(emu, map[string]string{
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:18080/v1", "MODEL_API_KEY": scriptedKey,
	}), filepath.Join(dir, "machines"))
	const bot = "alice"
	status, cc, c := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "tk"}})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, c.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	emuURL, err := url.Parse(emu.URL)
	require.NoError(t, err)
	proxyURL, err := url.Parse(emu.ProxyURL)
	require.NoError(t, err)
	takeoverNoRun(t, e, c, bot, func(ref string) string { return boxContainer(t, emu, ref) }, emuURL.Host, proxyURL.Host, "/desktop/")
}

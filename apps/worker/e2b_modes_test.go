package main

// The e2b kind's two modes through the worker, against the emulator
// (emutest: sandboxes as containers on the local engine): the template
// chosen per computer at create and kept for its replacements (a refused
// one answers 400 TEMPLATE_UNAVAILABLE), seed 000's acceptance flow on
// template desktop (the command-driven desktop machine, a run with the
// worker runtime calling the scripted model on the host's loopback), and
// takeover on either template.
// The worker reaches a sandbox only through the emulator's API and envd;
// the tests' own setup and probes use `docker exec` on the container the
// emulator made.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
)

// bothTemplates is an emulator with template open-bot (the computer image,
// botd inside) and desktop (the stand-in for E2B's stock desktop), with
// its spec checker's proxy in front (emu.Proxy; e2bEnv hands the worker
// that): a violation on the worker's path fails the test.
func bothTemplates(t *testing.T) *emutest.Server {
	t.Helper()
	if os.Geteuid() != 0 {
		requireIntegration(t) // root: the engine's socket
	}
	emu := emutest.Start(t, map[string]emulator.Template{
		e2b.DefaultTemplate: {Image: emutest.Image(), User: "root"},
		e2b.DesktopTemplate: emutest.DesktopTemplate(),
	}, nil)
	emu.Proxy(t)
	return emu
}

// e2bEnv is a worker environment on the emulator, default template
// open-bot, plus extra. The worker reaches the emulator, control plane and
// sandboxes alike, through the spec checker's proxy (emu.Proxy first).
func e2bEnv(emu *emutest.Server, extra map[string]string) map[string]string {
	if emu.ProxyURL == "" {
		panic("e2bEnv: the emulator has no spec checker's proxy (call emu.Proxy)")
	}
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindE2B, "E2B_API_KEY": emu.APIKey,
		"E2B_API_URL": emu.ProxyURL, "E2B_SANDBOX_URL": emu.ProxyURL, "E2B_TEMPLATE": e2b.DefaultTemplate,
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// templateWorker is a worker served in-process with no computer yet
// (createComputer makes them); its takeover links point at its server.
func templateWorker(t *testing.T, env map[string]string, machines string) *workerEnv {
	t.Helper()
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir()}
	w, err := newWorker(t.Context(), serveConfig{DataDir: e.dataDir, Provider: env["WORKER_PROVIDER"], Token: e.token,
		Model: "scripted-model", ModelProvider: "botd", Approvals: "decline", MachinesDir: machines,
		Getenv: envMap(env)}, testLog(t))
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler)
	t.Cleanup(func() {
		srv.Close()
		w.Close()
	})
	e.url, e.w = srv.URL, w
	w.People.Takeover.SetBase(srv.URL)
	return e
}

// createdComputer is POST /v1/computers' answer.
type createdComputer struct {
	Computer struct {
		ID, State, Provider, Template, LastError string
	} `json:"computer"`
	Capability string `json:"capability"`
	Error      struct {
		Code, Message string
	} `json:"error"`
}

// createComputer posts body; a computer made is destroyed at the end
// (before the worker closes). It returns the status, the answer and, on
// 201, a workerEnv bound to the new computer.
func createComputer(t *testing.T, e *workerEnv, body map[string]any) (int, createdComputer, *workerEnv) {
	t.Helper()
	var c createdComputer
	status := post(t, e.url+"/v1/computers", e.token, body, &c)
	if status != http.StatusCreated {
		return status, c, nil
	}
	on := *e
	on.computer, on.capa = c.Computer.ID, c.Capability
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, _ = e.w.Computers.Destroy(ctx, c.Computer.ID)
	})
	return status, c, &on
}

// sandboxOf is the emulator's container of a ref.
func sandboxOf(t testing.TB, ref string) string {
	t.Helper()
	r, err := e2b.ParseRef(ref)
	require.NoError(t, err)
	return "e2b-emu-" + r.SandboxID
}

// imageOf is the image a container runs.
func imageOf(t testing.TB, container string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "--format", "{{.Config.Image}}", container).CombinedOutput()
	require.NoError(t, err, "docker inspect %s: %s", container, out)
	return strings.TrimSpace(string(out))
}

// killSandbox loses the sandbox behind ref behind the worker's back:
// killed through the emulator's own API with its key.
func killSandbox(t testing.TB, emu *emutest.Server, ref string) {
	t.Helper()
	r, err := e2b.ParseRef(ref)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodDelete, emu.URL+"/sandboxes/"+r.SandboxID, nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", emu.APIKey)
	resp, err := emu.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "the emulator killed the sandbox")
	require.Error(t, exec.Command("docker", "inspect", sandboxOf(t, ref)).Run(), "the sandbox's container is gone")
}

// sandboxCount is how many sandboxes the emulator lists.
func sandboxCount(t testing.TB, emu *emutest.Server) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, emu.URL+"/sandboxes", nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", emu.APIKey)
	resp, err := emu.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list []map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	return len(list)
}

// shellAs is the user the shell tool runs as on e's computer.
func shellAs(t testing.TB, e *workerEnv, bot string) string {
	t.Helper()
	var out struct {
		Success bool
		Content []struct{ Text string }
	}
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/shell", map[string]any{"botId": bot,
		"args": map[string]any{"argv": []string{"id", "-un"}}}, &out))
	require.True(t, out.Success, "%+v", out)
	require.NotEmpty(t, out.Content)
	var r struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.Content[0].Text), &r), "%s", out.Content[0].Text)
	require.Zero(t, r.ExitCode)
	return r.Stdout
}

// TestE2BTemplatePerComputer: on one worker (default template open-bot),
// a computer made with template desktop and one made with none run side by
// side, each on its own template; a template the provider does not have,
// and any template on a provider without templates, are refused with 400
// TEMPLATE_UNAVAILABLE before anything is made; and the desktop computer's
// replacement, after its sandbox is lost, is made from desktop again (the
// worker's default would make an open-bot one).
func TestE2BTemplatePerComputer(t *testing.T) {
	emu := bothTemplates(t)
	dir := openDir(t, "wire-e2btpl-")
	e := templateWorker(t, e2bEnv(emu, nil), filepath.Join(dir, "machines"))
	ctx := t.Context()

	status, bad, _ := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "t0"}, "template": "windows"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "TEMPLATE_UNAVAILABLE", bad.Error.Code)
	require.Contains(t, bad.Error.Message, `"windows"`)
	require.Contains(t, bad.Error.Message, "desktop, open-bot", "the refusal says what the provider has")
	status, bad, _ = createComputer(t, e, map[string]any{"scope": map[string]string{"team": "t0"}, "provider": "docker", "template": "desktop"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "TEMPLATE_UNAVAILABLE", bad.Error.Code)
	require.Contains(t, bad.Error.Message, "docker provider has no templates")
	require.Zero(t, sandboxCount(t, emu), "a refused create made no sandbox")
	list, err := e.w.Store.ListComputers(ctx)
	require.NoError(t, err)
	require.Empty(t, list, "a refused create recorded no computer")

	// Per computer: desktop for t0 (the scope a refusal left free), the
	// worker's default for t1.
	status, dc, desk := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "t0"}, "template": "desktop"})
	require.Equal(t, http.StatusCreated, status, "%+v", dc.Error)
	require.Equal(t, "running", dc.Computer.State, dc.Computer.LastError)
	require.Equal(t, "desktop", dc.Computer.Template)
	status, oc, ob := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "t1"}})
	require.Equal(t, http.StatusCreated, status, "%+v", oc.Error)
	require.Equal(t, "running", oc.Computer.State, oc.Computer.LastError)
	require.Equal(t, "open-bot", oc.Computer.Template, "no template: the worker's E2B_TEMPLATE, recorded")

	dRow, err := e.w.Store.GetComputer(ctx, dc.Computer.ID)
	require.NoError(t, err)
	oRow, err := e.w.Store.GetComputer(ctx, oc.Computer.ID)
	require.NoError(t, err)
	require.Equal(t, "desktop", dRow.Template)
	require.Equal(t, "open-bot", oRow.Template)
	require.Equal(t, emutest.DesktopImage(), imageOf(t, sandboxOf(t, dRow.ProviderRef)))
	require.Equal(t, emutest.Image(), imageOf(t, sandboxOf(t, oRow.ProviderRef)))
	var got struct {
		Computer computers.View `json:"computer"`
	}
	require.Equal(t, http.StatusOK, desk.do(t, "GET", "", nil, &got))
	require.Equal(t, "desktop", got.Computer.Template, "GET shows the computer's template")

	// Each machine is its template's: the vendor desktop's `user` runs the
	// shell tool there, botd's `bot` in the open-bot sandbox.
	require.Equal(t, http.StatusCreated, desk.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	require.Equal(t, http.StatusCreated, ob.do(t, "POST", "/bots", map[string]string{"id": "bob"}, nil))
	require.Equal(t, "user", strings.TrimSpace(shellAs(t, desk, "alice")))
	require.Equal(t, "bot", strings.TrimSpace(shellAs(t, ob, "bob")))

	// The desktop sandbox is lost; the replacement is a desktop again.
	killSandbox(t, emu, dRow.ProviderRef)
	var rec struct {
		Computer computers.View `json:"computer"`
	}
	require.Equal(t, http.StatusOK, desk.do(t, "POST", "/recover", nil, &rec))
	require.Equal(t, "running", rec.Computer.State, rec.Computer.LastError)
	require.Equal(t, "desktop", rec.Computer.Template)
	after, err := e.w.Store.GetComputer(ctx, dc.Computer.ID)
	require.NoError(t, err)
	require.NotEqual(t, dRow.ProviderRef, after.ProviderRef, "a replacement")
	r, err := e2b.ParseRef(after.ProviderRef)
	require.NoError(t, err)
	require.Equal(t, "desktop", r.Template, "the replacement's sandbox is made from the computer's template")
	require.Equal(t, emutest.DesktopImage(), imageOf(t, sandboxOf(t, after.ProviderRef)))
	require.Equal(t, "desktop", after.Template)
	require.Equal(t, "user", strings.TrimSpace(shellAs(t, desk, "alice")))
}

// TestAcceptanceE2BDesktop: seed 000's acceptance flow on template
// desktop with the worker runtime (acceptanceDesktop): the computer offers
// runtime worker alone and refuses runtime machine (501 unavailable: the
// model key never enters a stock desktop); a run with the default runtime
// has the worker call the scripted model on the host's loopback, which
// finds the page's button (served in the sandbox) in the screenshots,
// clicks it once with no miss, runs a shell command and writes a file;
// afterwards the key is nowhere in the sandbox; an explicit checkpoint
// exports the file. Then the sandbox is lost and recover makes a desktop
// replacement into which the checkpoint is imported: the file is back.
func TestAcceptanceE2BDesktop(t *testing.T) {
	emu := bothTemplates(t)
	dir := openDir(t, "wire-e2bdesk-")
	page := newSandboxPage(t, dir)
	model := newHostModel(t, scriptedKey)
	e := templateWorker(t, e2bEnv(emu, model.env(nil)), filepath.Join(dir, "machines"))
	acceptanceDesktop(t, e, model, page, e2b.DesktopTemplate, emutest.DesktopImage(),
		func(ref string) string { return sandboxOf(t, ref) }, func(ref string) { killSandbox(t, emu, ref) })
}

// pointerIn reads the X pointer of display in container (xdotool as
// root; xauth, when set, is the display's Xauthority file).
func pointerIn(t testing.TB, container, display, xauth string) (int, int) {
	t.Helper()
	args := []string{"exec", "-e", "DISPLAY=" + display}
	if xauth != "" {
		args = append(args, "-e", "XAUTHORITY="+xauth)
	}
	args = append(args, container, "xdotool", "getmouselocation", "--shell")
	out, err := exec.Command("docker", args...).CombinedOutput()
	require.NoError(t, err, "xdotool: %s", out)
	return mouseLocation(out)
}

// mouseLocation is the pointer's position in `xdotool getmouselocation
// --shell`'s output.
func mouseLocation(out []byte) (int, int) {
	var x, y int
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "X="); ok {
			x, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(l, "Y="); ok {
			y, _ = strconv.Atoi(v)
		}
	}
	return x, y
}

// toolCall calls a tool through the direct API and returns the status and
// the answer's text.
func toolCall(t testing.TB, e *workerEnv, bot, name string, args map[string]any) (int, string) {
	t.Helper()
	var out map[string]any
	status := e.do(t, "POST", "/tools/"+name, map[string]any{"botId": bot, "args": args}, &out)
	b, _ := json.Marshal(out["content"])
	return status, string(b)
}

// buildMockserve builds mockserve and the key file it reads into a new
// directory of dir (copied into each sandbox).
func buildMockserve(t testing.TB, dir string) string {
	t.Helper()
	ms := filepath.Join(dir, "mockserve")
	require.NoError(t, os.Mkdir(ms, 0o755))
	build := exec.Command("go", "build", "-o", filepath.Join(ms, "mockserve"), "github.com/open-bot/computer/apps/worker/internal/mockmodel/mockserve")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build mockserve: %s", out)
	require.NoError(t, os.WriteFile(filepath.Join(ms, "key"), []byte(scriptedKey), 0o600))
	return ms
}

// startMockserve runs mockserve with args in container (on its loopback:
// the model on 18080, the page on 18081).
func startMockserve(t *testing.T, ms, container string, args ...string) {
	t.Helper()
	out, err := exec.Command("docker", "cp", ms+"/.", container+":/opt/mockserve/").CombinedOutput()
	require.NoError(t, err, "docker cp: %s", out)
	argv := append([]string{"exec", "-d", container, "/opt/mockserve/mockserve", "-key-file", "/opt/mockserve/key", "-state", "/tmp/mockserve"}, args...)
	out, err = exec.Command("docker", argv...).CombinedOutput()
	require.NoError(t, err, "docker exec mockserve: %s", out)
	waitFor(t, "mockserve in the sandbox", 30*time.Second, func() bool {
		return exec.Command("docker", "exec", container, "test", "-d", "/tmp/mockserve").Run() == nil
	})
}

// TestTakeoverE2B: takeover on both e2b templates, each with a run that
// asks for a person: on open-bot, as TestTakeoverAndBotdEvents does on
// botd, Codex in the sandbox with the scripted model there (mockserve
// -script takeover); on desktop (takeoverDesktop) a worker-runtime run
// whose model is on the host's loopback (runtime machine refused). Both go
// through takeoverSteps: the policy (409 "Stop the bot first" while the bot's run is
// busy, or its execution lease is held by another worker's run), the
// run's request_takeover whose waiting_takeover event carries a worker
// control link, a raw RFB client through the worker's relay that draws a
// frame and moves the X pointer in the sandbox while control is held, the
// bot's agent refused the screen meanwhile (user_has_control), and the
// release: the connection is closed by the server, the link is refused
// (410), input sent after it never reaches X, the run goes on and
// completes, and the agent has its screen back.
func TestTakeoverE2B(t *testing.T) {
	emu := bothTemplates(t)
	dir := openDir(t, "wire-e2btk-")
	ms := buildMockserve(t, dir)
	// open-bot's Codex reaches the model in its sandbox; the desktop's
	// worker-runtime runs reach the host's (another worker: the setting is
	// the worker's).
	e := templateWorker(t, e2bEnv(emu, map[string]string{
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:18080/v1", "MODEL_API_KEY": scriptedKey,
	}), filepath.Join(dir, "machines"))
	model := newHostModel(t, scriptedKey)
	de := templateWorker(t, e2bEnv(emu, model.env(nil)), filepath.Join(dir, "machines-desktop"))
	for i, tpl := range []string{e2b.DefaultTemplate, e2b.DesktopTemplate} {
		t.Run(tpl, func(t *testing.T) {
			const bot = "alice"
			e := e
			if tpl == e2b.DesktopTemplate {
				e = de
			}
			status, cc, c := createComputer(t, e, map[string]any{"scope": map[string]string{"team": fmt.Sprintf("tk%d", i)}, "template": tpl})
			require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
			runningOrRecovered(t, c, cc.Computer.State, cc.Computer.LastError)
			require.Equal(t, http.StatusCreated, c.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
			if tpl == e2b.DesktopTemplate {
				takeoverDesktop(t, e, c, model, bot, func(ref string) string { return sandboxOf(t, ref) })
				return
			}
			// botd's screens have their own X cookie.
			takeoverFlow(t, e, c, bot, ms, func(ref string) string { return sandboxOf(t, ref) }, botdXauth)
		})
	}
}

// botdXauth is the X cookie file of botd's screen slot.
func botdXauth(slot int) string { return fmt.Sprintf("/home/desktop/.Xauthority-%d", slot) }

// takeoverFlow is TestTakeoverE2B's steps on a botd computer c (bot's,
// made on worker e), whose machine runs in the container containerOf names
// for its ref: mockserve (ms) is started there with the takeover script
// for Codex in the machine, then takeoverSteps; xauthOf is a screen slot's
// X cookie file.
func takeoverFlow(t *testing.T, e, c *workerEnv, bot, ms string, containerOf func(ref string) string, xauthOf func(slot int) string) {
	t.Helper()
	row, err := e.w.Store.GetComputer(t.Context(), c.computer)
	require.NoError(t, err)
	container := containerOf(row.ProviderRef)
	startMockserve(t, ms, container, "-script", "takeover", "-bot", bot)
	final := takeoverSteps(t, e, c, bot, container, xauthOf)
	require.Equal(t, providers.RuntimeMachine, final.Runtime, "the default runtime on botd")
}

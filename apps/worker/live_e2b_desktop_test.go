package main

// The opt-in live run on a vendor's stock desktop: seed 000's acceptance
// flow with a real vision model (the worker runtime: the worker calls it,
// the key stays in the worker) on a real E2B `desktop` sandbox, the
// button page served inside the sandbox as the seed's acceptance test
// does. `make test-live` with LIVE_MODEL_BASE_URL, LIVE_MODEL_KEY,
// LIVE_MODEL and E2B_API_KEY set; never in CI.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/pkg/shared/client"
)

// livePageDir is where the page's server and its records live in the live
// sandbox (outside the workspace: never checkpointed).
const livePageDir = "/tmp/open-bot-live-page"

// TestLiveModelE2BDesktop: a real model on a real E2B desktop sandbox.
// The computer offers the worker runtime alone and refuses runtime
// machine; the page's server (pageserve, uploaded through the worker's
// file API into the sandbox, started there through its exec) serves the
// button page on the sandbox's loopback; a worker-runtime run with the
// real model opens it, clicks the button, runs the shell tool as the
// desktop's user and writes a file; the bot's shell finds the model key
// nowhere. Then the sandbox is killed through E2B's API behind the
// worker's back and recover makes a desktop replacement with the
// checkpoint imported: the file is back.
func TestLiveModelE2BDesktop(t *testing.T) {
	base, key, name := os.Getenv("LIVE_MODEL_BASE_URL"), os.Getenv("LIVE_MODEL_KEY"), os.Getenv("LIVE_MODEL")
	e2bKey := os.Getenv("E2B_API_KEY")
	if base == "" || key == "" || name == "" || e2bKey == "" {
		t.Skip("set LIVE_MODEL_BASE_URL, LIVE_MODEL_KEY, LIVE_MODEL and E2B_API_KEY (make test-live): a real model on a real E2B desktop sandbox; never in CI")
	}
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindE2B, "E2B_API_KEY": e2bKey, "E2B_TEMPLATE": e2b.DesktopTemplate,
		"MODEL_UPSTREAM_URL": base, "MODEL_API_KEY": key,
	}
	for _, k := range []string{"E2B_API_URL", "E2B_DOMAIN", "E2B_SANDBOX_URL"} {
		if v := os.Getenv(k); v != "" {
			env[k] = v
		}
	}
	dir := openDir(t, "wire-live-e2bdesk-")
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir()}
	w, err := newWorker(t.Context(), serveConfig{DataDir: e.dataDir, Provider: providers.KindE2B, Token: e.token,
		Model: name, ModelProvider: "botd", Approvals: "decline", MachinesDir: filepath.Join(dir, "machines"),
		Getenv: envMap(env)}, testLog(t))
	require.NoError(t, err)
	srv := newTestServer(t, w)
	e.url, e.w = srv, w

	const bot = "alice"
	status, cc, d := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "live"}, "template": e2b.DesktopTemplate})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, d.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	requireWorkerOnly(t, d)
	requireMachineRefused(t, d, bot, "Say hello.")

	ctx := t.Context()
	bin := buildLivePage(t, dir)
	cookie := mockmodel.NewButtonPage().Cookie
	probe := startLivePage(t, e, d.computer, bin, cookie)

	id := d.startRunOn(t, bot, acceptancePrompt(desktopPageURL, bot), "")
	final, _ := waitRun(t, d, id, 20*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, "run error: %s; tool calls: %+v", final.Error, final.ToolCalls)
	require.Equal(t, providers.RuntimeWorker, final.Runtime)
	var names []string
	for _, tc := range final.ToolCalls {
		names = append(names, tc.Tool)
	}
	for _, want := range []string{"open_path", "computer_act", "shell", "file_write"} {
		require.Contains(t, names, want)
	}
	require.GreaterOrEqual(t, probe("clicks"), 1, "the page's server recorded no click on the button")
	m, err := e.w.Computers.Machine(ctx, d.computer)
	require.NoError(t, err)
	who, err := m.ReadFile(ctx, "bots/"+bot+"/whoami.txt", 1<<20)
	require.NoError(t, err)
	require.Equal(t, "user\n", string(who), "the shell tool ran as the desktop's user")
	res, err := m.ReadFile(ctx, "bots/"+bot+"/result.txt", 1<<20)
	require.NoError(t, err)
	require.Equal(t, "the button was pressed\n", string(res))
	// No docker exec into a real sandbox: the bot's own shell hunts.
	require.Empty(t, huntKey(t, d, bot, key), "the bot's shell found the model key in the E2B sandbox")

	var cp CheckpointAnswer
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/checkpoint", nil, &cp))
	require.Positive(t, cp.Size)

	// Lost behind the worker's back: killed through E2B's API.
	before, err := e.w.Store.GetComputer(ctx, d.computer)
	require.NoError(t, err)
	killLiveSandbox(t, env, before.ProviderRef)
	var rec struct {
		Computer computers.View `json:"computer"`
	}
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/recover", nil, &rec))
	require.Equal(t, "running", rec.Computer.State, rec.Computer.LastError)
	after, err := e.w.Store.GetComputer(ctx, d.computer)
	require.NoError(t, err)
	require.NotEqual(t, before.ProviderRef, after.ProviderRef)
	m, err = e.w.Computers.Machine(ctx, d.computer)
	require.NoError(t, err)
	res, err = m.ReadFile(ctx, "bots/"+bot+"/result.txt", 1<<20)
	require.NoError(t, err, "the model-created file came back")
	require.Equal(t, "the button was pressed\n", string(res))
}

// newTestServer serves w until the test ends and returns its URL; the
// takeover links point at it.
func newTestServer(t *testing.T, w *worker) string {
	t.Helper()
	srv := httptest.NewServer(w.Handler)
	t.Cleanup(func() {
		srv.Close()
		w.Close()
	})
	w.People.Takeover.SetBase(srv.URL)
	return srv.URL
}

// buildLivePage builds pageserve for the sandbox (linux/amd64, static).
func buildLivePage(t *testing.T, dir string) []byte {
	t.Helper()
	out := filepath.Join(dir, "pageserve-live")
	build := exec.Command("go", "build", "-o", out, "github.com/open-bot/computer/apps/worker/internal/mockmodel/pageserve")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	b, err := build.CombinedOutput()
	require.NoError(t, err, "build pageserve: %s", b)
	bin, err := os.ReadFile(out)
	require.NoError(t, err)
	return bin
}

// startLivePage uploads the page's server into computer's sandbox through
// the worker's file API (into the workspace, then moved out of it), starts
// it there (on the sandbox's loopback, 18081) and returns a probe that
// reads one of its counters ("clicks") through the machine's exec.
func startLivePage(t *testing.T, e *workerEnv, computer string, bin []byte, cookie string) func(name string) int {
	t.Helper()
	ctx := t.Context()
	m, err := e.w.Computers.Machine(ctx, computer)
	require.NoError(t, err)
	require.NoError(t, m.WriteFile(ctx, ".live-page/pageserve", bin))
	run := func(argv ...string) client.ExecResult {
		t.Helper()
		r, err := m.Exec(ctx, client.ExecRequest{Argv: argv, TimeoutMs: 60000})
		require.NoError(t, err)
		return r
	}
	r := run("sh", "-c", `set -e; mkdir -p "$1"; mv .live-page/pageserve "$1/pageserve"; rmdir .live-page; chmod 755 "$1/pageserve"
setsid "$1/pageserve" -cookie "$2" -state "$1/state" </dev/null >"$1/log" 2>&1 &`, "sh", livePageDir, cookie)
	require.Zero(t, r.ExitCode, "start the page in the sandbox: %s", r.Stderr)
	deadline := time.Now().Add(30 * time.Second)
	for run("test", "-d", livePageDir+"/state").ExitCode != 0 {
		require.True(t, time.Now().Before(deadline), "the page did not start in the sandbox: %s", run("cat", livePageDir+"/log").Stdout)
		time.Sleep(500 * time.Millisecond)
	}
	return func(name string) int {
		out := strings.TrimSpace(run("cat", livePageDir+"/state/"+name).Stdout)
		n := 0
		for _, c := range out {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
}

// killLiveSandbox kills the sandbox behind ref through E2B's API with the
// account's key (env's E2B_API_URL, else E2B's own).
func killLiveSandbox(t *testing.T, env map[string]string, ref string) {
	t.Helper()
	r, err := e2b.ParseRef(ref)
	require.NoError(t, err)
	api := strings.TrimSuffix(env["E2B_API_URL"], "/")
	if api == "" {
		api = "https://api.e2b.app"
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, api+"/sandboxes/"+r.SandboxID, nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", env["E2B_API_KEY"])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "E2B killed the sandbox")
}

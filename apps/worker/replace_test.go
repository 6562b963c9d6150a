package main

// Seed 000's acceptance flow through the worker's own providers: a computer
// made by the worker (local, then docker), the scripted model presses a
// page's button and uses the shell and file tools; the run's end writes a
// checkpoint; then the machine is destroyed behind the worker's back, and
// `recover` boots a replacement through the stale providerRef, into which
// the worker imports the latest checkpoint before first use: the
// model-created file, the page's sign-in cookie and its tab come back.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// Test ranges (HELPERS.md, helper "wire"): displays 420-449, ports
// 32000-33499. Local machines here use displays 440-447, ports 33000-33029.
const (
	replDisplayBase = 440
	replPortBase    = 33000
)

// buttonPage is the deterministic page: a big button whose click posts a
// marker, and a persistent sign-in cookie set on the first visit. It
// records every cookie value it was sent.
type buttonPage struct {
	cookie string
	mu     sync.Mutex
	clicks int
	seen   []string
}

func newButtonPage() *buttonPage {
	var v [12]byte
	_, _ = rand.Read(v[:])
	return &buttonPage{cookie: hex.EncodeToString(v[:])}
}

func (p *buttonPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		got := "none"
		if c, err := r.Cookie("signin"); err == nil {
			got = c.Value
		} else {
			http.SetCookie(w, &http.Cookie{Name: "signin", Value: p.cookie, Path: "/", MaxAge: 86400, HttpOnly: true})
		}
		p.mu.Lock()
		p.seen = append(p.seen, got)
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>e2e button</title><body style="margin:0">
<button id="b" style="position:fixed;left:0;top:0;width:100vw;height:100vh;font-size:48px;background:#2a7;color:#fff;border:0"
 onclick="fetch('/clicked',{method:'POST'}).then(()=>{this.textContent='clicked'})">Press me (signed in: %s)</button></body>`, got)
	case "/clicked":
		p.mu.Lock()
		p.clicks++
		p.mu.Unlock()
	default:
		http.NotFound(w, r)
	}
}

func (p *buttonPage) clicked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clicks
}

func (p *buttonPage) sawCookie() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, p.cookie)
}

func (p *buttonPage) forget() {
	p.mu.Lock()
	p.seen = nil
	p.mu.Unlock()
}

// acceptanceScript is the scripted model's side of the flow for bot.
func acceptanceScript(pageURL, bot string) mockmodel.Script {
	return func(outs []mockmodel.Output) mockmodel.Step {
		steps := []mockmodel.Step{
			{Tool: "computer_observe", Args: map[string]any{}},
			{Tool: "open_path", Args: map[string]any{"target": pageURL}},
			{Tool: "computer_act", Args: map[string]any{"actions": []map[string]any{{"type": "click", "x": 640, "y": 450}, {"type": "wait", "ms": 300}}}},
			{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c", "id -un > bots/" + bot + "/whoami.txt; echo ran"}}},
			{Tool: "file_write", Args: map[string]any{"path": "bots/" + bot + "/result.txt", "content": "the button was pressed\n"}},
		}
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return mockmodel.Step{Message: "Done: pressed the button, ran a command and wrote the file."}
	}
}

// openDir makes a directory others can traverse (botd's users must reach
// the homes under it), removed at the end.
func openDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// buildBotd builds botd into dir.
func buildBotd(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "botd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/open-bot/computer/apps/botd").CombinedOutput()
	require.NoError(t, err, "build botd: %s", out)
	return bin
}

// envMap is a getenv over m, then the process's environment.
func envMap(m map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := m[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
}

// providerWorker is a worker served in-process whose default provider is
// kind, with one Team computer created through that provider and bot added.
func providerWorker(t testing.TB, env map[string]string, machines, bot string) *workerEnv {
	t.Helper()
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir()}
	w, err := newWorker(t.Context(), serveConfig{DataDir: e.dataDir, Provider: env["WORKER_PROVIDER"], Token: e.token,
		Model: "scripted-model", ModelProvider: "botd", Approvals: "decline", MachinesDir: machines,
		Getenv: envMap(env)}, zerolog.Nop())
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler)
	t.Cleanup(func() {
		srv.Close()
		// Destroy what the test made (the computer and any machine left).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if e.computer != "" {
			_, _ = w.Computers.Destroy(ctx, e.computer)
		}
		w.Close()
	})
	e.url, e.w = srv.URL, w
	var created struct {
		Computer struct {
			ID, State, Provider, LastError string
		} `json:"computer"`
		Capability string `json:"capability"`
	}
	require.Equal(t, http.StatusCreated, post(t, e.url+"/v1/computers", e.token, map[string]any{"scope": map[string]string{"team": "t1"}}, &created))
	e.computer, e.capa = created.Computer.ID, created.Capability
	require.Equal(t, env["WORKER_PROVIDER"], created.Computer.Provider)
	require.Equal(t, "running", created.Computer.State, "the new computer: %s", created.Computer.LastError)
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	return e
}

// TestAcceptanceReplaceLocal: the acceptance flow on the local provider; the
// machine is destroyed behind the worker's back (its botd killed and its
// directory removed) and recover replaces it from the checkpoint.
func TestAcceptanceReplaceLocal(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	page := newButtonPage()
	pageSrv := httptest.NewServer(page)
	defer pageSrv.Close()
	const bot = "alice"
	model := mockmodel.New(acceptanceScript(pageSrv.URL+"/", bot)).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()

	dir := openDir(t, "wire-local-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": "2",
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		"EGRESS_ALLOW": strings.TrimPrefix(pageSrv.URL, "http://"),
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	destroy := func(ref string) {
		require.NoError(t, e.w.setup.Local.Destroy(t.Context(), ref))
		_, err := os.Stat(filepath.Join(dir, "machines", "computers", ref))
		require.True(t, os.IsNotExist(err), "the machine's directory is gone")
	}
	acceptanceReplace(t, e, page, pageSrv.URL+"/", bot, destroy)
	require.Equal(t, 6, model.Requests())
}

// acceptanceReplace runs the flow on e's computer; destroy removes the
// machine behind ref without the worker knowing.
func acceptanceReplace(t *testing.T, e *workerEnv, page *buttonPage, pageURL, bot string, destroy func(ref string)) {
	ctx := t.Context()
	runID := e.startRun(t, bot, "Open the page, press the big button, then use the shell and file tools.")
	final, events := waitRun(t, e, runID, 10*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, "run error: %s; tool calls: %+v", final.Error, final.ToolCalls)
	var names []string
	for _, tc := range final.ToolCalls {
		names = append(names, tc.Tool)
		require.True(t, tc.Success, "%s failed: %s", tc.Tool, tc.Output)
	}
	require.Equal(t, []string{"computer_observe", "open_path", "computer_act", "shell", "file_write"}, names)
	require.GreaterOrEqual(t, page.clicked(), 1, "the page's server recorded no click")
	require.Contains(t, events, "checkpoint", "the run's end wrote a checkpoint: %v", events)

	var got struct {
		Computer struct {
			LastCheckpoint *struct {
				Revision, Size int64
			} `json:"lastCheckpoint"`
		} `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "GET", "", nil, &got))
	require.NotNil(t, got.Computer.LastCheckpoint)
	require.Positive(t, got.Computer.LastCheckpoint.Size)

	// The checkpoint closed the browser (botd quiesces it); asked for its
	// tabs it starts again with the page open. Then an explicit checkpoint
	// (the route) records the tab and the cookie once more.
	botd, _, err := e.w.Computers.Botd(ctx, e.computer)
	require.NoError(t, err)
	waitTab := func(what string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var tabs struct {
				Pages []string `json:"pages"`
			}
			err := botd.Do(ctx, http.MethodGet, "/screens/"+bot+"/browser/pages", nil, &tabs)
			if err == nil && slices.Contains(tabs.Pages, pageURL) {
				return
			}
			require.True(t, time.Now().Before(deadline), "%s: tabs %v, err %v", what, tabs.Pages, err)
			time.Sleep(300 * time.Millisecond)
		}
	}
	waitTab("the page's tab after the run's checkpoint")
	var cp CheckpointAnswer
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/checkpoint", nil, &cp))
	require.Greater(t, cp.Revision, got.Computer.LastCheckpoint.Revision)
	require.Positive(t, cp.Size)

	before, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	destroy(before.ProviderRef)
	page.forget()

	// The next lifecycle step goes through the stale ref: gone, so a
	// replacement is made and the checkpoint restored before first use.
	var rec struct {
		Computer struct{ State, LastError string } `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/recover", nil, &rec))
	require.Equal(t, "running", rec.Computer.State, rec.Computer.LastError)
	after, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.NotEqual(t, before.ProviderRef, after.ProviderRef, "the store records the replacement's ref")

	botd, _, err = e.w.Computers.Botd(ctx, e.computer)
	require.NoError(t, err)
	res, err := botd.ReadFile(ctx, "bots/"+bot+"/result.txt", 1<<20)
	require.NoError(t, err, "the model-created file came back")
	require.Equal(t, "the button was pressed\n", string(res))
	who, err := botd.ReadFile(ctx, "bots/"+bot+"/whoami.txt", 1<<20)
	require.NoError(t, err)
	require.Equal(t, "bot\n", string(who))

	// The bot's screen starts on the replacement (through the worker's
	// tool); its browser brings the tab back, which reloads the page signed
	// in with the restored cookie.
	var obs map[string]any
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/computer_observe", map[string]any{"botId": bot, "args": map[string]any{}}, &obs))
	waitTab("the tab on the replacement")
	deadline := time.Now().Add(60 * time.Second)
	for !page.sawCookie() {
		require.True(t, time.Now().Before(deadline), "the restored tab did not load the page with the sign-in cookie")
		time.Sleep(200 * time.Millisecond)
	}
}

// CheckpointAnswer is POST /v1/computers/{id}/checkpoint's body.
type CheckpointAnswer struct {
	Revision int64     `json:"revision"`
	Size     int64     `json:"size"`
	At       time.Time `json:"at"`
}

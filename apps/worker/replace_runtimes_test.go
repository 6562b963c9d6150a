package main

// Issue 30 requirement 5 on the botd backends: seed 000's acceptance flow
// with the worker runtime (the worker calls the model and drives the
// machine through the tools) everywhere, and Codex in the machine too on
// docker, e2b and daytona, on the same computer: alice's run is Codex in
// the machine (runtime machine, the botd machine's default), then bob's is
// the worker's loop; each finds its own page's button in the screenshots
// and presses it once, runs the shell and writes a file; then the machine
// is lost behind the worker's back and a replacement through the stale ref
// brings back both bots' files, tabs and sign-ins. Local and single-screen
// run one bot, alice, on the worker's loop.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// localMate is a teammate on a local machine: its page and its scripted
// model are served by the test.
type localMate struct {
	teammate
	page  *mockmodel.ButtonPage
	model *mockmodel.Server
}

// newLocalMate serves bot's page, whose sign-in cookie has the value
// cookie ("": a new one), and makes its scripted model.
func newLocalMate(t testing.TB, bot, runtime, cookie string) localMate {
	page := mockmodel.NewButtonPage()
	if cookie != "" {
		page.Cookie = cookie
	}
	srv := httptest.NewServer(page)
	t.Cleanup(srv.Close)
	flow := mockmodel.NewAcceptance(srv.URL+"/", bot)
	model := mockmodel.New(flow.Script).RequireKey(scriptedKey)
	return localMate{teammate: teammate{bot: bot, runtime: runtime, page: localProbe{page, flow}, pageURL: srv.URL + "/"}, page: page, model: model}
}

// host is the page's host:port (for EGRESS_ALLOW).
func (m localMate) host() string {
	return strings.TrimSuffix(strings.TrimPrefix(m.pageURL, "http://"), "/")
}

// TestAcceptanceReplaceLocal: the acceptance flow on the local provider,
// alice's run on the worker's loop; the machine is lost behind the
// worker's back (its botd SIGKILLed, then its home removed too) and
// recover replaces it. (Codex in the machine runs the flow on docker, e2b
// and daytona: containerFlow. With two bots' browsers on a kept local
// home, the first bot's tab came back as a new tab on the replacement
// although its session file named the page: not solved yet.)
func TestAcceptanceReplaceLocal(t *testing.T) {
	requireIntegration(t, "Xvfb", "chromium", "x11vnc", "xfwm4")
	alice := newLocalMate(t, "alice", providers.RuntimeWorker, "")
	modelSrv := httptest.NewServer(alice.model)
	defer modelSrv.Close()

	dir := openDir(t, "wire-local-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		"EGRESS_ALLOW": alice.host(),
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), alice.bot)
	lose := func(ref, home string) { loseLocal(t, filepath.Join(dir, "machines"), ref, home) }
	finals := acceptanceReplace(t, e, []teammate{alice.teammate}, lose, nil, false)
	require.Equal(t, len(finals[0].ToolCalls)+1, alice.model.Requests())
}

// TestAcceptanceReplaceSingleScreen: the acceptance flow on the
// single-screen provider (over local machines): its one screen is alice's,
// whose run is the worker's loop. The machine is lost with its own home
// (its botd SIGKILLed, its directory removed: a single-screen computer's
// home is the machine's) and recover restores the checkpoint into a
// replacement through the stale ref.
func TestAcceptanceReplaceSingleScreen(t *testing.T) {
	requireIntegration(t, "Xvfb", "chromium", "x11vnc", "xfwm4")
	alice := newLocalMate(t, "alice", providers.RuntimeWorker, "")
	modelSrv := httptest.NewServer(alice.model)
	defer modelSrv.Close()

	dir := openDir(t, "wire-single-acc-")
	machines := filepath.Join(dir, "machines")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindSingleScreen, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		"EGRESS_ALLOW": alice.host(),
		// Over local machines even where a Docker engine answers.
		"DOCKER_HOST": "unix://" + filepath.Join(dir, "no-docker.sock"),
	}
	e := providerWorker(t, env, machines, alice.bot)
	lose := func(ref, home string) {
		require.Empty(t, home, "a single-screen computer has no worker-owned home")
		loseLocalWithHome(t, machines, ref)
	}
	finals := acceptanceReplace(t, e, []teammate{alice.teammate}, lose, nil, false)
	require.Equal(t, len(finals[0].ToolCalls)+1, alice.model.Requests())
}

// loseLocalWithHome loses a local machine whose home is its own (inside
// its directory) behind the worker's back: its botd gets SIGKILL and the
// directory goes, the home with it.
func loseLocalWithHome(t testing.TB, machines, ref string) {
	t.Helper()
	home := filepath.Join(machines, "computers", ref, "home")
	_, pid := killLocalMachine(t, machines, ref, home)
	deadline := time.Now().Add(30 * time.Second)
	for botdOn(home, "") != 0 {
		require.True(t, time.Now().Before(deadline), "botd %d outlived SIGKILL", pid)
		time.Sleep(100 * time.Millisecond)
	}
}

// containerFlow is the acceptance flow's two teammates on a machine in a
// container (docker, and the e2b and daytona emulators' sandboxes), which
// reaches nothing of the host. alice's run is Codex in the machine against
// mockserve's model inside the container; bob's run is the worker's loop
// against a scripted model the test serves on the host. Both models listen
// on the same loopback address, each on its own side: MODEL_UPSTREAM_URL,
// which the worker and its machines share, names the container's model
// inside the machine and the host's in the worker. Each bot has its own
// page (a mockserve in the container: 18081 for alice, 18082 for bob); the
// pages share a host, so they set one sign-in cookie: botd keeps one
// cookie jar for the computer, which every screen's browser gets
// (CookieSync).
type containerFlow struct {
	mates []teammate
	pages []*inContainer
	// worker is bob's model, which only the worker reaches.
	worker *mockmodel.Server
	// env is the worker's model and egress settings.
	env map[string]string
}

// newContainerFlow makes the flow with mockserve (and its key) from ms.
func newContainerFlow(t testing.TB, ms string) *containerFlow {
	const bobPage = "127.0.0.1:18082"
	flow := mockmodel.NewAcceptance("http://"+bobPage+"/", "bob")
	model := mockmodel.New(flow.Script).RequireKey(scriptedKey)
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	signin := mockmodel.NewButtonPage().Cookie
	alice := &inContainer{t: t, dir: ms, cookie: signin, modelAddr: addr}
	// bob's mockserve serves his page; its own model (mockserve always
	// serves one) listens where nothing calls it.
	bob := &inContainer{t: t, dir: ms, cookie: signin, modelAddr: "127.0.0.1:18083", pageAddr: bobPage,
		state: "/tmp/mockserve-bob", bot: "bob", flow: flow}
	return &containerFlow{
		mates: []teammate{
			{bot: "alice", page: alice, pageURL: "http://127.0.0.1:18081/"},
			{bot: "bob", runtime: providers.RuntimeWorker, page: bob, pageURL: "http://" + bobPage + "/"},
		},
		pages:  []*inContainer{alice, bob},
		worker: model,
		env: map[string]string{
			"MODEL_UPSTREAM_URL": "http://" + addr + "/v1", "MODEL_API_KEY": scriptedKey,
			"EGRESS_ALLOW": "127.0.0.1:18081," + bobPage,
		},
	}
}

// start starts both mockserves in container.
func (f *containerFlow) start(container string) {
	for _, p := range f.pages {
		p.start(container)
	}
}

// addBots adds the teammates after the first (providerWorker added it).
func (f *containerFlow) addBots(t testing.TB, e *workerEnv) {
	for _, m := range f.mates[1:] {
		require.Equal(t, http.StatusCreated, e.do(t, "POST", "/bots", map[string]string{"id": m.bot}, nil))
	}
}

// check holds the host's model to bob's run: the worker's loop asked it
// once per tool call and once more for the final answer.
func (f *containerFlow) check(t testing.TB, finals []runs.Snapshot) {
	require.Len(t, finals, 2)
	require.Equal(t, len(finals[1].ToolCalls)+1, f.worker.Requests(), "the host's model answered bob's run (the worker's loop), and nothing else")
}

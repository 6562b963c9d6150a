package main

// Seed 000's acceptance flow through the worker's own providers: a computer
// made by the worker (local, then docker), the scripted model finds a
// page's button in its screenshot and presses it, and uses the shell and
// file tools; the run's end records a checkpoint (the revision marker of
// the worker-owned home: nothing exported, the browser untouched), and an
// explicit checkpoint exports the home into the home store. Then the
// machine is lost behind the worker's back as a failure would lose it (its
// process killed, its machine directory or container removed, never
// through the provider), and `recover` boots a replacement through the
// stale providerRef that mounts the same worker-owned home: the
// model-created file, the page's sign-in cookie and its tab are there.
// Then the machine and the worker-owned home itself are lost: the
// replacement gets a new home into which the worker imports the exported
// checkpoint before first use, and the file, cookie and tab come back.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// Local machines here take one of 7 slots: displays 420-447, ports
// 30000-30076 (a slot another test holds is skipped). The ports stay below
// the kernel's ephemeral range (32768 up): there the engine's published
// container ports of the docker tests, running at the same time, took every
// slot once.
const (
	replDisplayBase = 420
	replPortBase    = 30000
	replSlots       = "7"
)

// pageProbe is what the test learns from the button page's server and the
// scripted model.
type pageProbe interface {
	Clicked() int
	Misses() []string
	SawCookie() bool
	Forget()
	// Report is what the scripted model saw.
	Report() mockmodel.AcceptanceReport
}

// localProbe is the page and the model served by the test itself.
type localProbe struct {
	*mockmodel.ButtonPage
	flow *mockmodel.Acceptance
}

func (p localProbe) Report() mockmodel.AcceptanceReport {
	if p.flow == nil {
		return mockmodel.AcceptanceReport{}
	}
	return p.flow.Report()
}

// loseLocal loses a local machine behind the worker's back, as a crash
// and a lost machine directory would: its botd (the pid its supervisor
// recorded) gets SIGKILL and the machine's directory (token, metadata) is
// removed. The worker-owned home (home, whose BOTD_HOME it was) is not the
// machine's: it stays, unless loseHome removes it too. Nothing goes
// through the provider.
func loseLocal(t testing.TB, machines, ref, home string) {
	t.Helper()
	dir, pid := killLocalMachine(t, machines, ref, home)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Gone, or a zombie its supervisor has yet to reap.
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		require.True(t, time.Now().Before(deadline), "botd %d outlived SIGKILL", pid)
		time.Sleep(100 * time.Millisecond)
	}
	require.DirExists(t, home, "the worker-owned home is not the machine's")
	// Nothing starts the lost machine's botd again (its supervisor would
	// 500 ms after the crash): two botds would share the home. Watched
	// for 3 s. The lost machine's botd is the one whose token file is in
	// its directory: the worker's replacement, a machine of its own on
	// the same home, may start within the 3 s (rehearsal 57 saw it).
	// (A botd started again without its token file refuses at once and
	// never serves: with the supervisor's checks removed, that is what
	// happens, and the watch may not see it.)
	token := filepath.Join(dir, "token")
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		require.NoDirExists(t, dir, "the lost machine's directory came back")
		require.Zero(t, botdOn(home, token), "the lost machine's botd runs again on the home")
	}
}

// killLocalMachine SIGKILLs local machine ref's botd (checked to be the
// one on home) and removes the machine's directory: gone at once (a
// rename), then removed at leisure. It returns the directory and the pid.
func killLocalMachine(t testing.TB, machines, ref, home string) (string, int) {
	t.Helper()
	dir := filepath.Join(machines, "computers", ref)
	b, err := os.ReadFile(filepath.Join(dir, "botd.pid"))
	require.NoError(t, err, "the machine's botd.pid")
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	require.NoError(t, err, "botd %d runs", pid)
	require.Contains(t, "\x00"+string(env), "\x00BOTD_HOME="+home+"\x00", "pid %d is this machine's botd, on home %s", pid, home)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	lost := filepath.Join(machines, "lost-"+ref)
	require.NoError(t, os.Rename(dir, lost))
	require.NoError(t, os.RemoveAll(lost))
	return dir, pid
}

// botdOn is the pid of a botd whose BOTD_HOME is home and, unless token
// is empty, whose BOTD_TOKEN_FILE is token (0: none).
func botdOn(home, token string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != "botd" {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && strings.Contains("\x00"+string(env), "\x00BOTD_HOME="+home+"\x00") &&
			(token == "" || strings.Contains("\x00"+string(env), "\x00BOTD_TOKEN_FILE="+token+"\x00")) {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
				return pid
			}
		}
	}
	return 0
}

// loseHome removes the worker-owned home itself (its disk lost), after
// its machine was lost.
func loseHome(t testing.TB, home string) {
	t.Helper()
	lost := home + ".lost"
	require.NoError(t, os.Rename(home, lost))
	require.NoError(t, os.RemoveAll(lost))
}

// loseDocker loses a docker machine behind the worker's back, with the
// engine's CLI, never the provider: `docker rm -f` of the container. Its
// /home is the worker-owned home (home), bind-mounted: it stays.
func loseDocker(t testing.TB, ref, home string) {
	t.Helper()
	require.Equal(t, home, dockerHomeMount(t, ref), "the container's /home is the worker-owned home")
	out, err := exec.Command("docker", "rm", "-f", ref).CombinedOutput()
	require.NoError(t, err, "docker rm -f: %s", out)
	require.Error(t, exec.Command("docker", "inspect", ref).Run(), "the container is gone")
	require.DirExists(t, home, "the worker-owned home is not the machine's")
}

// openDir makes a directory others can traverse (botd's users must reach
// the homes under it), removed at the end.
// dockerImage is the computer image the docker tests use (WORKER_IMAGE,
// default providers.DefaultImage); without an engine that has it the test
// skips, and fails under CI=true.
func dockerImage(t testing.TB) string {
	t.Helper()
	image := os.Getenv("WORKER_IMAGE")
	if image == "" {
		image = providers.DefaultImage
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("no Docker engine with image %s (make image): %s", image, strings.TrimSpace(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + msg)
		}
		t.Skip(msg)
	}
	return image
}

func openDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// buildBotd builds botd into dir.
func buildBotd(t testing.TB, _ string) string {
	t.Helper()
	return goBuilt(t, botdPkg)
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

// serveOnProvider serves a worker in-process on dataDir whose default
// provider is env's WORKER_PROVIDER (machines in machines); at the test's
// end the computer it made (e.computer), and so any machine left, is
// destroyed before the worker closes.
func serveOnProvider(t testing.TB, dataDir, machines, model string, env map[string]string, log zerolog.Logger) *workerEnv {
	t.Helper()
	e := &workerEnv{token: "worker-token-0123456789", dataDir: dataDir}
	w, err := newWorker(t.Context(), serveConfig{DataDir: e.dataDir, Provider: env["WORKER_PROVIDER"], Token: e.token,
		Model: model, ModelProvider: "botd", Approvals: "decline", MachinesDir: machines,
		Getenv: envMap(env)}, log)
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if e.computer != "" {
			_, _ = w.Computers.Destroy(ctx, e.computer)
		}
		w.Close()
	})
	e.url, e.w = srv.URL, w
	return e
}

// providerWorker is a worker served in-process whose default provider is
// kind, with one Team computer created through that provider and bot added.
func providerWorker(t testing.TB, env map[string]string, machines, bot string) *workerEnv {
	t.Helper()
	return providerWorkerModel(t, env, machines, bot, "scripted-model")
}

// providerWorkerModel is providerWorker with a model name.
func providerWorkerModel(t testing.TB, env map[string]string, machines, bot, model string) *workerEnv {
	t.Helper()
	e := serveOnProvider(t, t.TempDir(), machines, model, env, testLog(t))
	checkAPI(t, e.url)
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

// TestLiveModelReplace is the same flow with a real vision model on the
// local provider: `make test-live` with LIVE_MODEL_BASE_URL (an
// OpenAI-compatible Responses API), LIVE_MODEL_KEY and LIVE_MODEL. Never in
// CI: without them it skips.
func TestLiveModelReplace(t *testing.T) {
	base, key, name := os.Getenv("LIVE_MODEL_BASE_URL"), os.Getenv("LIVE_MODEL_KEY"), os.Getenv("LIVE_MODEL")
	if base == "" || key == "" || name == "" {
		t.Skip("set LIVE_MODEL_BASE_URL, LIVE_MODEL_KEY and LIVE_MODEL (make test-live)")
	}
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	page := mockmodel.NewButtonPage()
	pageSrv := httptest.NewServer(page)
	defer pageSrv.Close()
	dir := openDir(t, "wire-live-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
		"MODEL_UPSTREAM_URL": base, "MODEL_API_KEY": key, "EGRESS_ALLOW": strings.TrimPrefix(pageSrv.URL, "http://"),
	}
	e := providerWorkerModel(t, env, filepath.Join(dir, "machines"), "alice", name)
	lose := func(ref, home string) { loseLocal(t, filepath.Join(dir, "machines"), ref, home) }
	acceptanceReplace(t, e, []teammate{{bot: "alice", page: localProbe{page, nil}, pageURL: pageSrv.URL + "/"}}, lose, nil, true)
}

// teammate is one bot's part in the acceptance flow: its run's runtime
// ("" the computer's default, Codex in the machine on botd machines), the
// page it presses and the probe of that page's server and of the scripted
// model that plays it.
type teammate struct {
	bot, runtime string
	page         pageProbe
	pageURL      string
}

// acceptanceReplace runs the flow on e's computer, each teammate's run in
// turn, and returns their final snapshots; lose removes the machine behind
// ref (whose worker-owned home is home) without the worker knowing.
// afterReplace, when set, runs on each replacement's ref before the
// checks. A live model (live) gets the task in words and may take its own
// path: only what it must have done is checked.
func acceptanceReplace(t *testing.T, e *workerEnv, mates []teammate, lose func(ref, home string), afterReplace func(ref string), live bool) []runs.Snapshot {
	ctx := t.Context()
	var finals []runs.Snapshot
	for _, m := range mates {
		runID := e.startRunOn(t, m.bot, acceptancePrompt(m.pageURL, m.bot), m.runtime)
		final, events := waitRun(t, e, runID, 10*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, "%s's run (runtime %q) error: %s; tool calls: %+v", m.bot, final.Runtime, final.Error, final.ToolCalls)
		// The snapshot says where the loop ran: the one asked for, else
		// the botd machine's default, Codex in the machine.
		want := m.runtime
		if want == "" {
			want = providers.RuntimeMachine
		}
		require.Equal(t, want, final.Runtime, "%s's run", m.bot)
		if want == providers.RuntimeWorker {
			require.Contains(t, events, "model_response", "the worker's loop recorded each model answer")
		}
		if live {
			var names []string
			for _, tc := range final.ToolCalls {
				names = append(names, tc.Tool)
			}
			for _, tool := range []string{"open_path", "computer_act", "shell", "file_write"} {
				require.Contains(t, names, tool)
			}
			require.GreaterOrEqual(t, m.page.Clicked(), 1, "the page's server recorded no click")
		} else {
			t.Logf("%s's run, runtime %s:", m.bot, final.Runtime)
			requireSawAndPressed(t, final, m.page.Report(), m.page.Clicked(), m.page.Misses())
		}
		require.Contains(t, events, "checkpoint", "the run's end wrote a checkpoint: %v", events)
		finals = append(finals, final)
	}

	var got struct {
		Computer struct {
			Runtimes       []string `json:"runtimes"`
			LastCheckpoint *struct {
				Revision, Size int64
			} `json:"lastCheckpoint"`
		} `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "GET", "", nil, &got))
	require.Equal(t, []string{providers.RuntimeMachine, providers.RuntimeWorker}, got.Computer.Runtimes, "a botd machine offers both, Codex in the machine first")
	require.NotNil(t, got.Computer.LastCheckpoint)
	require.Positive(t, got.Computer.LastCheckpoint.Size)

	// The run's end only advanced the revision marker of the worker-owned
	// home: nothing went into the home store. An explicit checkpoint (the
	// route) exports the home, the tabs and the cookies with it (botd
	// quiesces each browser for its profile's copy, which flushes both to
	// the home too). A provider without a worker-owned home (e2b: the
	// sandbox's disk is the machine's) exports at the run's end already.
	cur, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	direct := e.w.Computers.HomeDir(cur, cur.Provider) != ""
	if direct {
		noTar(t, e)
	}
	botd, err := e.w.Computers.Machine(ctx, e.computer)
	require.NoError(t, err)
	waitTab := func(m teammate, what string) {
		t.Helper()
		// A browser quiesced for the checkpoint's copy restarts: slow
		// on a loaded host.
		deadline := time.Now().Add(3 * time.Minute)
		for {
			pages, err := botd.BrowserPages(ctx, m.bot)
			if err == nil && slices.Contains(pages, m.pageURL) {
				return
			}
			require.True(t, time.Now().Before(deadline), "%s: %s's tabs %v, err %v", what, m.bot, pages, err)
			time.Sleep(300 * time.Millisecond)
		}
	}
	for _, m := range mates {
		waitTab(m, "the page's tab after the run's checkpoint")
	}
	var cp CheckpointAnswer
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/checkpoint", nil, &cp))
	require.Greater(t, cp.Revision, got.Computer.LastCheckpoint.Revision)
	require.Positive(t, cp.Size)
	for _, m := range mates {
		rev, content, ok := checkpointFile(t, e, "bots/"+m.bot+"/result.txt")
		require.True(t, ok, "the exported checkpoint holds %s's file", m.bot)
		require.Positive(t, rev)
		require.Equal(t, "the button was pressed\n", content)
		waitTab(m, "the page's tab after the explicit checkpoint")
	}

	if !direct {
		// The machine is lost with its disk: the replacement is restored
		// from the exported checkpoint.
		replaceAndCheck(t, e, mates, lose, false, afterReplace)
		return finals
	}
	// The machine is lost, not the worker-owned home: the replacement
	// mounts it again.
	replaceAndCheck(t, e, mates, lose, false, afterReplace)
	// The machine and the worker-owned home are lost: the replacement gets
	// a new home, restored from the exported checkpoint.
	replaceAndCheck(t, e, mates, lose, true, afterReplace)
	return finals
}

// recoverRunning recovers e's computer (POST /recover), requires it
// running and returns its row.
func recoverRunning(t testing.TB, e *workerEnv) store.Computer {
	t.Helper()
	var rec struct {
		Computer struct{ State, LastError string } `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/recover", nil, &rec))
	require.Equal(t, "running", rec.Computer.State, rec.Computer.LastError)
	after, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	return after
}

// replaceAndCheck loses e's machine (and, with homeToo, its worker-owned
// home), recovers, and checks the replacement: each teammate's files, its
// page's tab and its sign-in cookie.
func replaceAndCheck(t *testing.T, e *workerEnv, mates []teammate, lose func(ref, home string), homeToo bool, afterReplace func(ref string)) {
	ctx := t.Context()
	before, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	home := e.w.Computers.HomeDir(before, before.Provider)
	if home != "" || homeToo {
		require.DirExists(t, home, "the worker-owned home")
	}
	if home != "" && !homeToo {
		// The replacement mounts this home as it is: each browser, started
		// again after the checkpoint's quiesce, must have written its tab
		// to the session it restores first (Chromium does on a timer; lost
		// before, it comes back on a new tab, as it would after any crash).
		for _, m := range mates {
			waitSessionHolds(t, home, m.bot, m.pageURL)
		}
	}
	lose(before.ProviderRef, home)
	if homeToo {
		loseHome(t, home)
	}
	for _, m := range mates {
		m.page.Forget()
	}

	// The next lifecycle step goes through the stale ref: gone, so a
	// replacement is made and the checkpoint restored before first use.
	after := recoverRunning(t, e)
	require.NotEqual(t, before.ProviderRef, after.ProviderRef, "the store records the replacement's ref")
	if afterReplace != nil {
		afterReplace(after.ProviderRef)
	}
	require.Equal(t, home, e.w.Computers.HomeDir(after, after.Provider), "the replacement uses the same worker-owned home")

	botd, err := e.w.Computers.Machine(ctx, e.computer)
	require.NoError(t, err)
	for _, m := range mates {
		res, err := botd.ReadFile(ctx, "bots/"+m.bot+"/result.txt", 1<<20)
		require.NoError(t, err, "%s's model-created file came back", m.bot)
		require.Equal(t, "the button was pressed\n", string(res))
		who, err := botd.ReadFile(ctx, "bots/"+m.bot+"/whoami.txt", 1<<20)
		require.NoError(t, err)
		// bot in the image; on the local provider the computer's own bot user.
		require.Regexp(t, `^(bot|obc[0-9]+-bot)\n$`, string(who))
	}

	// Each bot's screen starts on the replacement (through the worker's
	// tool); its browser brings the tab back, which reloads the page signed
	// in with the restored cookie.
	for _, m := range mates {
		var obs map[string]any
		require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/computer_observe", map[string]any{"botId": m.bot, "args": map[string]any{}}, &obs))
		deadline := time.Now().Add(3 * time.Minute)
		for {
			pages, err := botd.BrowserPages(ctx, m.bot)
			if err == nil && slices.Contains(pages, m.pageURL) {
				break
			}
			if !time.Now().Before(deadline) && home != "" {
				t.Logf("%s's sessions on the replacement: %s", m.bot, sessionFiles(home, m.bot, m.pageURL))
			}
			require.True(t, time.Now().Before(deadline), "%s's tab on the replacement (home lost too: %v): tabs %v, err %v", m.bot, homeToo, pages, err)
			time.Sleep(300 * time.Millisecond)
		}
		deadline = time.Now().Add(60 * time.Second)
		for !m.page.SawCookie() {
			require.True(t, time.Now().Before(deadline), "%s's tab did not load the page with the sign-in cookie (home lost too: %v)", m.bot, homeToo)
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// waitSessionHolds waits until the session Chromium restores for bot's
// screen (the newest Sessions/Session_* of its profile in the worker-owned
// home) names pageURL.
func waitSessionHolds(t *testing.T, home, bot, pageURL string) {
	t.Helper()
	dir := filepath.Join(home, "desktop", "screens", bot, "chromium", "Default", "Sessions")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		files, _ := filepath.Glob(filepath.Join(dir, "Session_*"))
		slices.Sort(files) // Session_<time>, the newest last
		if len(files) > 0 {
			if b, err := os.ReadFile(files[len(files)-1]); err == nil && strings.Contains(string(b), pageURL) {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "%s's browser never wrote its tab %s to its session (%v)", bot, pageURL, files)
		time.Sleep(500 * time.Millisecond)
	}
}

// sessionFiles describes the session files of bot's profile in home: each
// one's name, size and whether it names pageURL.
func sessionFiles(home, bot, pageURL string) string {
	files, _ := filepath.Glob(filepath.Join(home, "desktop", "screens", bot, "chromium", "Default", "Sessions", "*"))
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out = append(out, fmt.Sprintf("%s (%d bytes, names the page: %v)", filepath.Base(f), len(b), strings.Contains(string(b), pageURL)))
	}
	// How Chromium says the profile's last session ended (a crashed one
	// is restored differently).
	var prefs struct {
		Profile struct {
			ExitType      string `json:"exit_type"`
			ExitedCleanly *bool  `json:"exited_cleanly"`
		} `json:"profile"`
	}
	if b, err := os.ReadFile(filepath.Join(home, "desktop", "screens", bot, "chromium", "Default", "Preferences")); err == nil && json.Unmarshal(b, &prefs) == nil {
		clean := "unset"
		if prefs.Profile.ExitedCleanly != nil {
			clean = fmt.Sprint(*prefs.Profile.ExitedCleanly)
		}
		out = append(out, fmt.Sprintf("Preferences: exit_type %q, exited_cleanly %s", prefs.Profile.ExitType, clean))
	}
	return strings.Join(out, ", ")
}

// CheckpointAnswer is POST /v1/computers/{id}/checkpoint's body.
type CheckpointAnswer struct {
	Revision int64     `json:"revision"`
	Size     int64     `json:"size"`
	At       time.Time `json:"at"`
}

// inContainer is the button page and scripted model running inside one
// docker machine (mockserve), probed with `docker exec`: a container reaches
// nothing of the host but what it publishes, so the model and the page live
// on its own loopback.
type inContainer struct {
	t         testing.TB
	dir       string // mockserve and the key, copied into each container
	cookie    string
	container string
	// modelAddr and pageAddr are mockserve's listen addresses ("": its
	// defaults, 127.0.0.1:18080 and 127.0.0.1:18081), state the directory
	// of its record in the container ("": /tmp/mockserve), bot the bot its
	// script plays ("": alice).
	modelAddr, pageAddr, state, bot string
	// flow, when set, is the scripted model the test serves itself (on
	// the host, for a run of the worker runtime): Report is its report,
	// not the one of mockserve's own model.
	flow *mockmodel.Acceptance
	// in runs commands in the machine (nil: dockerExec).
	in machineExec
}

// machineExec runs commands in a machine as root: docker exec, or an exec
// in a pod through the Kubernetes API server (podExec).
type machineExec interface {
	// copyDir copies dir's files into the machine's /opt/mockserve.
	copyDir(t testing.TB, ref, dir string)
	// detach starts argv in the machine and returns at once.
	detach(t testing.TB, ref string, argv []string)
	// command is argv in the machine, run to its end.
	command(ref string, argv ...string) *exec.Cmd
}

type dockerExec struct{}

func (dockerExec) copyDir(t testing.TB, ref, dir string) {
	out, err := exec.Command("docker", "cp", dir+"/.", ref+":/opt/mockserve/").CombinedOutput()
	require.NoError(t, err, "docker cp: %s", out)
}

func (dockerExec) detach(t testing.TB, ref string, argv []string) {
	out, err := exec.Command("docker", append([]string{"exec", "-d", ref}, argv...)...).CombinedOutput()
	require.NoError(t, err, "docker exec %s: %s", argv[0], out)
}

func (dockerExec) command(ref string, argv ...string) *exec.Cmd {
	return exec.Command("docker", append([]string{"exec", ref}, argv...)...)
}

func (c *inContainer) exec() machineExec {
	if c.in == nil {
		return dockerExec{}
	}
	return c.in
}

// stateDir is mockserve's record in the container.
func (c *inContainer) stateDir() string {
	if c.state != "" {
		return c.state
	}
	return "/tmp/mockserve"
}

func (c *inContainer) start(ref string) {
	t := c.t
	t.Helper()
	c.container = ref
	c.exec().copyDir(t, ref, c.dir)
	argv := []string{"/opt/mockserve/mockserve", "-key-file", "/opt/mockserve/key",
		"-cookie", c.cookie, "-state", c.stateDir()}
	for flag, v := range map[string]string{"-model": c.modelAddr, "-page": c.pageAddr, "-bot": c.bot} {
		if v != "" {
			argv = append(argv, flag, v)
		}
	}
	c.exec().detach(t, ref, argv)
	deadline := time.Now().Add(30 * time.Second)
	for c.exec().command(ref, "test", "-d", c.stateDir()).Run() != nil {
		require.True(t, time.Now().Before(deadline), "mockserve did not start in the container")
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *inContainer) read(name string) string {
	out, _ := c.exec().command(c.container, "cat", c.stateDir()+"/"+name).Output()
	return string(out)
}

func (c *inContainer) Clicked() int {
	n := 0
	fmt.Sscanf(c.read("clicks"), "%d", &n)
	return n
}

func (c *inContainer) Misses() []string {
	return strings.Fields(c.read("misses"))
}

// Report reads the model's report; one that cannot be read has a problem.
func (c *inContainer) Report() mockmodel.AcceptanceReport {
	if c.flow != nil {
		return c.flow.Report()
	}
	var r mockmodel.AcceptanceReport
	if err := json.Unmarshal([]byte(c.read("model")), &r); err != nil {
		r.Problems = append(r.Problems, "the model's report in the container: "+err.Error())
	}
	return r
}

func (c *inContainer) SawCookie() bool {
	return slices.Contains(strings.Split(c.read("seen"), "\n"), c.cookie)
}

// Forget: a replacement container starts with an empty record anyway.
func (c *inContainer) Forget() {}

// TestAcceptanceReplaceDocker: the acceptance flow on the docker provider
// (the computer image on the real engine), alice's run on Codex in the
// machine and bob's on the worker's loop (containerFlow); the container is
// removed behind the worker's back (`docker rm -f`) and recover replaces
// it, first on the same worker-owned home, then on a new one restored
// from the checkpoint. Under CI=true a missing
// engine or image fails.
func TestAcceptanceReplaceDocker(t *testing.T) {
	if os.Geteuid() != 0 {
		requireIntegration(t) // root: the engine's socket and the root-only token files
	}
	image := dockerImage(t)
	dir := openDir(t, "wire-docker-")
	ms := buildMockserve(t, dir)
	flow := newContainerFlow(t, ms)

	env := map[string]string{"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image}
	for k, v := range flow.env {
		env[k] = v
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), flow.mates[0].bot)
	flow.addBots(t, e)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	flow.start(c.ProviderRef)
	// Secrets reach the machine as root-only files, never in the container's
	// configuration that `docker inspect` shows to anyone using the engine.
	inspect, err := exec.Command("docker", "inspect", c.ProviderRef).CombinedOutput()
	require.NoError(t, err, "%s", inspect)
	require.NotContains(t, string(inspect), scriptedKey, "the model key is in docker inspect")
	require.Contains(t, string(inspect), "MODEL_API_KEY_FILE=")
	finals := acceptanceReplace(t, e, flow.mates, func(ref, home string) { loseDocker(t, ref, home) }, flow.start, false)
	flow.check(t, finals)
}

// TestIdleSuspendAndCheckpointFailure, on the local provider: idle
// suspension checkpoints then stops the machine (the computer stays
// desired-running) and the next tool call starts it again with its home;
// a checkpoint whose export fails answers 502 with the reason and keeps the
// previous checkpoint.
func TestIdleSuspendAndCheckpointFailure(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	dir := openDir(t, "wire-idle-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
	}
	const bot = "bob"
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	ctx := t.Context()
	tool := func(name string, args map[string]any) (int, map[string]any) {
		var out map[string]any
		code := e.do(t, "POST", "/tools/"+name, map[string]any{"botId": bot, "args": args}, &out)
		return code, out
	}
	code, out := tool("file_write", map[string]any{"path": "bots/" + bot + "/note.txt", "content": "kept while asleep\n"})
	require.Equal(t, http.StatusOK, code, "%v", out)

	c, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.Positive(t, e.w.setup.Local.PID(c.ProviderRef), "the machine runs")
	// Idle for longer than 1 ns: checkpoint, then stop.
	require.NoError(t, e.w.Computers.SuspendIdle(ctx, time.Nanosecond))
	c, err = e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.Equal(t, "stopped", c.ObservedState)
	require.Equal(t, "running", c.DesiredState, "a suspended computer still wants to run")
	require.Zero(t, e.w.setup.Local.PID(c.ProviderRef), "the machine is stopped")
	first, err := e.w.Store.LatestCheckpoint(ctx, e.computer)
	require.NoError(t, err, "suspension checkpointed first")
	require.Positive(t, first.Size)

	// The next use starts the same machine (same ref, its home kept).
	code, out = tool("file_read", map[string]any{"path": "bots/" + bot + "/note.txt"})
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Contains(t, fmt.Sprint(out), "kept while asleep")
	again, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.Equal(t, "running", again.ObservedState)
	require.Equal(t, c.ProviderRef, again.ProviderRef, "woken, not replaced")

	// The machine stops behind the worker's back: the checkpoint's export
	// fails, the route says so, and the previous checkpoint stays.
	require.NoError(t, e.w.setup.Local.Stop(ctx, again.ProviderRef))
	var fail struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.Equal(t, http.StatusBadGateway, e.do(t, "POST", "/checkpoint", nil, &fail))
	require.Contains(t, fail.Error.Message, "the previous one is kept")
	latest, err := e.w.Store.LatestCheckpoint(ctx, e.computer)
	require.NoError(t, err)
	require.Equal(t, first.Revision, latest.Revision)

	// A destroy that a crash cut short (the store says destroyed, the
	// machine's directory is still there): reconcile lists the local
	// provider's machines and destroys it.
	destroyed := "destroyed"
	_, err = e.w.Store.UpdateComputer(ctx, e.computer, store.StateUpdate{Desired: &destroyed, Observed: &destroyed})
	require.NoError(t, err)
	machineDir := filepath.Join(dir, "machines", "computers", again.ProviderRef)
	require.DirExists(t, machineDir)
	require.NoError(t, e.w.Computers.ReconcileMachines(ctx))
	require.NoDirExists(t, machineDir, "reconcile destroyed the machine of a destroyed computer")
	e.computer = "" // nothing left for the cleanup to destroy
}

// testLog is the worker's log in the test's output (shown on failure).
func testLog(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: testWriter{t}, NoColor: true}).With().Timestamp().Logger()
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestMoveLocalToDocker: a kind change makes a replacement of the new kind
// (the old ref never goes to it) that imports the latest checkpoint, made
// from the old machine just before; the old machine is destroyed.
func TestMoveLocalToDocker(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	image := dockerImage(t)
	dir := openDir(t, "wire-move-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir), "WORKER_IMAGE": image,
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(replDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(replPortBase), "WORKER_LOCAL_SLOTS": replSlots,
	}
	const bot = "carol"
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	ctx := t.Context()
	var out map[string]any
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_write", map[string]any{"botId": bot,
		"args": map[string]any{"path": "bots/" + bot + "/moved.txt", "content": "made on the local machine\n"}}, &out), "%v", out)
	before, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)

	var moved struct {
		Computer struct{ Provider, State, LastError string } `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/move", map[string]string{"provider": "docker"}, &moved))
	require.Equal(t, "running", moved.Computer.State, moved.Computer.LastError)
	require.Equal(t, "docker", moved.Computer.Provider)
	after, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.NotEqual(t, before.ProviderRef, after.ProviderRef)
	_, err = os.Stat(filepath.Join(dir, "machines", "computers", before.ProviderRef))
	require.True(t, os.IsNotExist(err), "the local machine is destroyed")

	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_read", map[string]any{"botId": bot,
		"args": map[string]any{"path": "bots/" + bot + "/moved.txt"}}, &out), "%v", out)
	require.Contains(t, fmt.Sprint(out), "made on the local machine", "the home moved with the checkpoint")

	// The move exported the local home into the docker machine's own
	// worker-owned home; the local one is gone with the local machine.
	require.NoDirExists(t, e.w.Computers.HomeDir(before, providers.KindLocal), "the local machine's worker-owned home is removed after the move")
	// The docker machine is lost behind the worker's back (its container
	// removed with the engine's CLI); the health sweep notices, and the
	// next tool call replaces it, mounting the same worker-owned home.
	loseDocker(t, after.ProviderRef, e.w.Computers.HomeDir(after, providers.KindDocker))
	e.w.Computers.CheckMachines(ctx)
	gone, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.Equal(t, "error", gone.ObservedState)
	require.Contains(t, gone.LastError, "stopped answering")
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_read", map[string]any{"botId": bot,
		"args": map[string]any{"path": "bots/" + bot + "/moved.txt"}}, &out), "%v", out)
	require.Contains(t, fmt.Sprint(out), "made on the local machine", "the next use replaced the machine, on the same home")
	again, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	require.Equal(t, "running", again.ObservedState)
	require.NotEqual(t, after.ProviderRef, again.ProviderRef)
	var bad struct {
		Error struct{ Message string } `json:"error"`
	}
	require.Equal(t, http.StatusBadRequest, e.do(t, "POST", "/move", map[string]string{"provider": "e2b"}, &bad))
	require.Contains(t, bad.Error.Message, `"e2b"`)
}

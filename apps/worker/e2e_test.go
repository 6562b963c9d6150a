package main

// The end-to-end acceptance test: a scripted model on loopback is Codex's
// model provider; real botd, Codex, Xvfb and Chromium; a local page with a
// small button at a random place and a decoy. The model observes, opens the
// page, finds the button in the screenshot it was sent and clicks its
// centre (the page's server records the click, and any miss), runs a shell
// command and writes a file, all through the worker's tools. Nothing leaves
// the machine.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/tools"
)

// requireIntegration skips on a laptop without root or the tools, and fails
// under CI=true, where everything is provisioned.
func requireIntegration(t testing.TB, tools ...string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = tool
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s is missing (scripts/provision.sh)", missing)
	}
	t.Skipf("integration test needs %s", missing)
}

// freeAddr picks a free loopback port in 13000-13999, below the ephemeral range
// (32768+): a port from ":0" was closed before the daemon bound it, and an
// outbound connection or the Docker engine's published container port of a
// test running beside it took it in between (seen: "bind: address already
// in use"). Each package of tests has a band of its own, and each shard of
// this package (WORKER_TEST_SHARD=i/n, set by scripts/test.sh) its own part
// of it: the shards are processes of one binary, and the same sequence in
// two of them gave two botds one port (seen).
func freeAddr(t testing.TB) string {
	t.Helper()
	from, size := freeAddrBand()
	for range size {
		p := from + int(freeAddrNext.Add(1))%size
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			addr := l.Addr().String()
			l.Close()
			return addr
		}
	}
	t.Fatalf("no free loopback port in %d-%d", from, from+size-1)
	return ""
}

// freeAddrBand is this process's part of 13000-13999: all of it, or the
// i-th of n parts under WORKER_TEST_SHARD=i/n.
func freeAddrBand() (from, size int) {
	var i, n int
	if _, err := fmt.Sscanf(os.Getenv("WORKER_TEST_SHARD"), "%d/%d", &i, &n); err != nil || n < 1 || i < 0 || i >= n {
		return 13000, 1000
	}
	return 13000 + i*(1000/n), 1000 / n
}

var freeAddrNext atomic.Int32

// computer is a real botd (with Codex) for a test.
type computer struct {
	url, token, home string
	cmd              *exec.Cmd
	logs             *syncBuffer
}

// codexPid is the one Codex app-server botd runs (one per /agent session).
func (c *computer) codexPid(t testing.TB) int {
	t.Helper()
	children := map[int][]int{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range procs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 {
			pid, _ := strconv.Atoi(filepath.Base(d))
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	var found []int
	for _, pid := range children[c.cmd.Process.Pid] {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), "\x00app-server\x00") {
			found = append(found, pid)
		}
	}
	require.Len(t, found, 1, "botd's Codex app-servers")
	return found[0]
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// provider is the model provider a test computer uses: botd's model proxy
// forwards to BaseURL with Key (root keeps it; Codex never sees it).
type provider struct {
	BaseURL string // e.g. http://127.0.0.1:PORT/v1
	Key     string
	// Features are keys for botd's [features] table of the Codex config
	// (the extra config is appended right after it), e.g. "x = true\n".
	Features string
}

// scriptedKey is the scripted model's API key: distinctive, so a search
// for it in bot's processes and files cannot match anything else.
var scriptedKey = func() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "sk-scripted-" + hex.EncodeToString(b)
}()

// scripted is the provider of a loopback scripted model server (which
// requires scriptedKey).
func scripted(modelURL string) provider {
	return provider{BaseURL: modelURL + "/v1", Key: scriptedKey}
}

// startComputer builds and starts botd with Codex pointed at modelURL (a
// scripted model server).
func startComputer(t testing.TB, modelURL string, displayBase int, env ...string) *computer {
	return startComputerWith(t, scripted(modelURL), displayBase, env...)
}

// startComputerWith builds and starts botd with Codex using prov; env is
// added to botd's environment (e.g. EGRESS_ALLOW for a local page).
func startComputerWith(t testing.TB, prov provider, displayBase int, env ...string) *computer {
	t.Helper()
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc")
	dir, err := os.MkdirTemp("", "e2e-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := goBuilt(t, botdPkg)
	var extraEnv []string
	if prov.Features != "" {
		extra := filepath.Join(dir, "codex-extra.toml")
		require.NoError(t, os.WriteFile(extra, []byte(prov.Features), 0o600))
		extraEnv = append(extraEnv, "CODEX_CONFIG_EXTRA_FILE="+extra)
	}
	c := &computer{token: "e2e-token-0123456789abcdef", home: filepath.Join(dir, "home"), logs: &syncBuffer{}}
	addr := freeAddr(t)
	c.url = "http://" + addr
	c.cmd = exec.Command(bin)
	c.cmd.Env = append(os.Environ(),
		"BOTD_TOKEN="+c.token, "BOTD_HOME="+c.home, "BOTD_LISTEN="+addr,
		"SOCKS_LISTEN="+freeAddr(t), fmt.Sprintf("DISPLAY_BASE=%d", displayBase),
		fmt.Sprintf("VIEW_PORT_BASE=%d", 21000+displayBase*10),
		"MODEL_UPSTREAM_URL="+prov.BaseURL, "MODEL_API_KEY="+prov.Key,
		"MAX_SCREENS=2",
	)
	c.cmd.Env = append(c.cmd.Env, extraEnv...)
	c.cmd.Env = append(c.cmd.Env, env...) // later entries win
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	require.NoError(t, c.cmd.Start())
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("botd logs:\n%s", tail(c.logs.String(), 60))
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequest("GET", c.url+"/health", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var h struct {
				OK bool `json:"ok"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.OK {
				return c
			}
		}
		require.True(t, time.Now().Before(deadline), "botd not healthy:\n%s", tail(c.logs.String(), 40))
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// workerEnv is a worker served in-process with one computer attached to a
// test botd.
type workerEnv struct {
	url, token     string
	computer, capa string
	// op is the operator's token (WORKER_OPERATOR_TOKEN): attach and adopt.
	op      string
	w       *worker
	dataDir string
	// tweak, when set, adjusts the worker's serve config (e.g. approvals).
	tweak func(*serveConfig)
	// logs, when set, takes the worker's log (else it is dropped).
	logs io.Writer
}

// startWorker serves the worker's API in-process against c.
func startWorker(t testing.TB, c *computer, bots ...string) *workerEnv {
	return startWorkerModel(t, c, "scripted-model", bots...)
}

// startWorkerModel is startWorker with a model name: a fresh DATA_DIR
// (SQLite), one Team computer attached to c, and bots added to it.
func startWorkerModel(t testing.TB, c *computer, model string, bots ...string) *workerEnv {
	return startWorkerWith(t, c, model, nil, bots...)
}

// startWorkerWith is startWorkerModel with the worker's config adjusted by
// tweak (nil: as is).
func startWorkerWith(t testing.TB, c *computer, model string, tweak func(*serveConfig), bots ...string) *workerEnv {
	t.Helper()
	// The worker's log, shown when the test fails (a relay's refusal, say,
	// is only there).
	logs := &syncBuffer{}
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir(), tweak: tweak, logs: logs}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", tail(logs.String(), 80))
		}
	})
	e.serve(t, model)
	return e.addComputer(t, c, map[string]any{"team": "t1"}, bots...)
}

// serve (re)starts the worker on e's DATA_DIR.
func (e *workerEnv) serve(t testing.TB, model string) {
	t.Helper()
	if e.op == "" {
		e.op = "operator-token-0123456789"
	}
	// MachinesDir of the test's own: the root default
	// (/var/lib/open-bot/machines) is one lock for the whole host, and a
	// worker of a test running beside this one (another shard) would hold
	// it, leaving this one without its local and docker providers.
	cfg := serveConfig{DataDir: e.dataDir, Provider: "attach", Token: e.token, OperatorToken: e.op, Model: model,
		ModelProvider: "botd", Approvals: "decline", MachinesDir: filepath.Join(e.dataDir, "machines")}
	if e.tweak != nil {
		e.tweak(&cfg)
	}
	log := zerolog.Nop()
	if e.logs != nil {
		log = zerolog.New(e.logs)
	}
	w, err := newWorker(t.Context(), cfg, log)
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler)
	t.Cleanup(func() { srv.Close(); w.Close() })
	checkAPI(t, srv.URL)
	e.url, e.w = srv.URL, w
}

// do sends method to the computer's path (relative to /v1/computers/{id})
// with both credentials.
func (e *workerEnv) do(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.url+"/v1/computers/"+e.computer+path, rd)
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("X-Computer-Capability", e.capa)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

// startRun starts a run (the computer's default runtime) and returns its id.
func (e *workerEnv) startRun(t testing.TB, bot, prompt string) string {
	t.Helper()
	return e.startRunOn(t, bot, prompt, "")
}

// startRunOn starts a run with runtime ("" the computer's default) and
// returns its id; the run says it runs there.
func (e *workerEnv) startRunOn(t testing.TB, bot, prompt, runtime string) string {
	t.Helper()
	var started struct {
		Run runs.Snapshot `json:"run"`
	}
	body := map[string]string{"botId": bot, "prompt": prompt}
	if runtime != "" {
		body["runtime"] = runtime
	}
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/runs", body, &started))
	if runtime != "" {
		require.Equal(t, runtime, started.Run.Runtime)
	}
	return started.Run.ID
}

// getRun returns the run's snapshot.
func (e *workerEnv) getRun(t testing.TB, id string) runs.Snapshot {
	t.Helper()
	var got struct {
		Run runs.Snapshot `json:"run"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/runs/"+id, nil, &got))
	return got.Run
}

func post(t testing.TB, url, token string, body any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

// waitRun follows the run's SSE stream to its end and returns the final
// snapshot and the event types seen.
func waitRun(t testing.TB, e *workerEnv, id string, timeout time.Duration) (runs.Snapshot, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp := openEvents(t, ctx, e, id)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var types []string
	var final runs.Snapshot
	ended := false
	err := readSSE(resp.Body, func(event, data string) bool {
		types = append(types, event)
		if event != "end" {
			return true
		}
		require.NoError(t, json.Unmarshal([]byte(data), &final))
		ended = true
		return false
	})
	if !ended {
		t.Fatalf("event stream ended without an end event (err %v); events: %v", err, types)
	}
	return final, types
}

// openEvents opens a run's server-sent event stream (history first).
func openEvents(t testing.TB, ctx context.Context, e *workerEnv, id string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/computers/"+e.computer+"/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("X-Computer-Capability", e.capa)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// readSSE calls each with every event's name and data line, until each
// returns false or the stream ends (then it returns the read error, if any).
func readSSE(r io.Reader, each func(event, data string) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if !each(event, strings.TrimPrefix(line, "data: ")) {
				return nil
			}
		}
	}
	return sc.Err()
}

func TestEndToEndTeammateRun(t *testing.T) {
	acceptance(t, nil, "", 440)
}

// TestEndToEndTeammateRunWorker is the same scripted acceptance run with
// the worker runtime (issue 30): the worker calls the model and drives
// botd through the tools; botd was given no model key at all.
func TestEndToEndTeammateRunWorker(t *testing.T) {
	acceptanceOn(t, nil, "", 450, "worker")
}

// TestLiveModel is the same acceptance run with a real vision model:
// `make test-live` with LIVE_MODEL_BASE_URL (an OpenAI-compatible Responses
// API, e.g. https://…/v1), LIVE_MODEL_KEY and LIVE_MODEL set. Never in CI.
func TestLiveModel(t *testing.T) {
	base, key, name := os.Getenv("LIVE_MODEL_BASE_URL"), os.Getenv("LIVE_MODEL_KEY"), os.Getenv("LIVE_MODEL")
	if base == "" || key == "" || name == "" {
		t.Skip("set LIVE_MODEL_BASE_URL, LIVE_MODEL_KEY and LIVE_MODEL (make test-live)")
	}
	acceptance(t, &provider{BaseURL: base, Key: key}, name, 480)
}

// acceptance runs the acceptance scenario: with live == nil a scripted model
// drives it; otherwise a real model gets the same task in words. It returns
// the run's wall time (start request → end event).
func acceptance(t testing.TB, live *provider, modelName string, displayBase int) time.Duration {
	return acceptanceOn(t, live, modelName, displayBase, "")
}

// acceptanceOn is acceptance with the run's runtime: "" (the computer's
// default, Codex in the machine) or "worker" (the worker's own loop; botd
// then gets no model key and the worker calls the model).
func acceptanceOn(t testing.TB, live *provider, modelName string, displayBase int, runtime string) time.Duration {
	// The page: a small button at a random place, and a decoy; the page's
	// server records clicks on the button and misses anywhere else.
	page := mockmodel.NewButtonPage()
	// Drawn 1.5 s after the page loads: the scripted model looks again
	// rather than clicking blind.
	page.RevealMs = 1500
	pageSrv := httptest.NewServer(page)
	defer pageSrv.Close()

	// The page is on loopback, which egress refuses unless allowed.
	allowPage := "EGRESS_ALLOW=" + strings.TrimPrefix(pageSrv.URL, "http://")
	const bot = "alice"
	prompt := "Open " + pageSrv.URL + "/ in your browser with open_path, look at the screen and press the small magenta button with computer_act. " +
		"Then use the shell tool to run [\"sh\",\"-c\",\"id -un > bots/" + bot + "/whoami.txt\"], and use file_write to write " +
		"\"the button was pressed\\n\" to bots/" + bot + "/result.txt. Finish with a short summary."
	var model *mockmodel.Server
	var flow *mockmodel.Acceptance
	var c *computer
	prov := live
	if live == nil {
		flow = mockmodel.NewAcceptance(pageSrv.URL+"/", bot)
		model = mockmodel.New(flow.Script).RequireKey(scriptedKey)
		modelSrv := httptest.NewServer(model)
		defer modelSrv.Close()
		p := scripted(modelSrv.URL)
		prov = &p
		modelName = "scripted-model"
	}
	var tweak func(*serveConfig)
	if runtime == "worker" {
		// The worker has the model; botd none.
		tweak = func(c *serveConfig) {
			c.Getenv = envMap(map[string]string{"MODEL_UPSTREAM_URL": prov.BaseURL, "MODEL_API_KEY": prov.Key})
		}
		c = startComputerWith(t, provider{}, displayBase, allowPage)
	} else {
		c = startComputerWith(t, *prov, displayBase, allowPage)
	}
	env := startWorkerWith(t, c, modelName, tweak, bot)

	start := time.Now()
	runID := env.startRunOn(t, bot, prompt, runtime)
	final, events := waitRun(t, env, runID, 10*time.Minute)
	wall := time.Since(start)

	require.Equal(t, runs.StatusCompleted, final.Status, "run error: %s; tool calls: %+v", final.Error, final.ToolCalls)
	require.Contains(t, events, "tool_call")
	if live != nil {
		require.GreaterOrEqual(t, page.Clicked(), 1, "the page's server recorded no click")
	} else {
		t.Logf("the button is at %v in the viewport", page.Button)
		requireSawAndPressed(t, final, flow.Report(), page.Clicked(), page.Misses())
	}
	who, err := os.ReadFile(filepath.Join(c.home, "bot/bots", bot, "whoami.txt"))
	require.NoError(t, err)
	require.Equal(t, "bot\n", string(who), "shell runs as the bot user")
	res, err := os.ReadFile(filepath.Join(c.home, "bot/bots", bot, "result.txt"))
	require.NoError(t, err)
	require.Equal(t, "the button was pressed\n", string(res))
	if live != nil {
		return wall
	}
	require.Contains(t, final.Message, "Done")
	require.Equal(t, len(final.ToolCalls)+1, model.Requests())
	if runtime == "worker" {
		require.Equal(t, "worker", final.Runtime)
		require.Contains(t, events, "model_response", "the worker's loop recorded each model answer")
		// The worker offered every computer tool as a function tool.
		var offered []string
		for _, raw := range model.Tools() {
			var ft struct{ Type, Name string }
			require.NoError(t, json.Unmarshal(raw, &ft))
			require.Equal(t, "function", ft.Type)
			offered = append(offered, ft.Name)
		}
		var all []string
		for _, tl := range tools.All {
			all = append(all, tl.Name)
		}
		require.Equal(t, all, offered)
		return wall
	}
	// The model answered only requests carrying its key, yet the key is
	// nowhere bot can read: no bot process's environment, nothing under
	// the workspace (.codex/ included).
	requireKeyHidden(t, c, scriptedKey)
	return wall
}

// requireSawAndPressed checks a scripted acceptance run: every observe/act
// result carried the screenshot as an image, which the model decoded (a
// 1280x800 JPEG); it found the button in one and clicked there; the page
// recorded exactly one click on the button and no click anywhere else.
func requireSawAndPressed(t testing.TB, final runs.Snapshot, rep mockmodel.AcceptanceReport, clicks int, misses []string) {
	t.Helper()
	require.Empty(t, rep.Problems, "the model's view: %+v; the page recorded %d clicks on the button and misses at %v", rep, clicks, misses)
	var names []string
	shots := 0
	for i, tc := range final.ToolCalls {
		names = append(names, tc.Tool)
		require.True(t, tc.Success, "%s failed: %s", tc.Tool, tc.Output)
		if tc.Tool == "computer_observe" || tc.Tool == "computer_act" {
			shots++
			require.Equal(t, 1, tc.Images, "tool call %d (%s) returned the screenshot as an image item: %s", i, tc.Tool, tc.Output)
		}
	}
	// Observe, open the page, look (again while the button is not drawn),
	// click, look again while the button still shows, shell, write.
	want := []string{"computer_observe", "open_path", "computer_observe"}
	for range rep.Looks + rep.AfterClick { // the looks after the first, the click, the looks after it
		want = append(want, "computer_act")
	}
	want = append(want, "shell", "file_write")
	require.Equal(t, want, names)
	require.Equal(t, shots, rep.Screenshots, "observe/act results the model was sent")
	require.Equal(t, shots, rep.Images, "observe/act results in which the model decoded a 1280x800 JPEG")
	require.NotNil(t, rep.Click, "the model clicked")
	require.Equal(t, 1, clicks, "clicks on the button the page recorded (the model clicked at %v)", *rep.Click)
	require.Empty(t, misses, "clicks off the button the page recorded (viewport x,y; the model clicked at %v)", *rep.Click)
	t.Logf("the model decoded %d screenshots, looked %d times for the button, clicked it at %v and looked %d more times until it was gone", rep.Images, rep.Looks, *rep.Click, rep.AfterClick)
}

// requireKeyHidden fails if key appears in the environment of any process
// of bot or desktop, or in any file under the workspace.
func requireKeyHidden(t testing.TB, c *computer, key string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	seen := 0
	for _, d := range procs {
		st, err := os.Stat(d)
		if err != nil {
			continue
		}
		uid := st.Sys().(*syscall.Stat_t).Uid
		if uid == 0 {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue
		}
		seen++
		require.NotContains(t, string(env), key, "the key is in the environment of %s (uid %d)", d, uid)
	}
	require.Positive(t, seen, "no unprivileged process was checked")
	files := 0
	require.NoError(t, filepath.WalkDir(filepath.Join(c.home, "bot"), func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		files++
		require.NotContains(t, string(b), key, "the key is in %s", p)
		return nil
	}))
	require.FileExists(t, filepath.Join(c.home, "bot", ".codex", "config.toml"))
	require.Positive(t, files)
}

func getJSON(t testing.TB, url, token string, out any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}

// TestEndToEndBadInput: malformed tool arguments and another bot's screen
// are tool errors the model reads (the run goes on); Codex dying mid-turn
// fails the run with a clear reason and releases its lease.
func TestEndToEndBadInput(t *testing.T) {
	hang := make(chan struct{})
	const bot = "carol"
	script := func(outs []mockmodel.Output) mockmodel.Step {
		steps := []mockmodel.Step{
			{Tool: "computer_act", Args: map[string]any{"actions": "click everything"}},
			{Tool: "computer_observe", Args: map[string]any{"screen": "dave"}},
			{Tool: "computer_act", Args: map[string]any{"actions": []map[string]any{{"type": "teleport"}}}},
			{Tool: "computer_observe", Args: map[string]any{}},
		}
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		<-hang // the model "thinks" until Codex is killed
		return mockmodel.Step{Message: "unreachable"}
	}
	model := mockmodel.New(script).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	defer close(hang) // before Close, which waits for the hung handler
	c := startComputer(t, modelSrv.URL, 460)
	env := startWorker(t, c, bot)
	runID := env.startRun(t, bot, "go")
	// Wait until the fourth tool call (the lease-taking observe) is recorded
	// and the model hangs; then kill Codex.
	deadline := time.Now().Add(3 * time.Minute)
	var snap runs.Snapshot
	for {
		snap = env.getRun(t, runID)
		if len(snap.ToolCalls) >= 4 && model.Requests() >= 5 {
			break
		}
		require.True(t, time.Now().Before(deadline), "run did not reach the hang: %+v", snap)
		time.Sleep(100 * time.Millisecond)
	}
	require.False(t, snap.ToolCalls[0].Success)
	require.Contains(t, snap.ToolCalls[0].Output, "invalid arguments")
	require.False(t, snap.ToolCalls[1].Success)
	require.Contains(t, snap.ToolCalls[1].Output, "not yours")
	require.False(t, snap.ToolCalls[2].Success)
	require.Contains(t, snap.ToolCalls[2].Output, "invalid_action")
	require.True(t, snap.ToolCalls[3].Success, snap.ToolCalls[3].Output)

	type screenInfo struct {
		ID    string `json:"id"`
		Lease *struct {
			Kind string `json:"kind"`
		} `json:"lease"`
	}
	screenOf := func(id string) (found screenInfo) {
		var list struct {
			Screens []screenInfo `json:"screens"`
		}
		getJSON(t, c.url+"/screens", c.token, &list)
		for _, s := range list.Screens {
			require.NotEqual(t, "dave", s.ID, "another bot's screen was started")
			if s.ID == id {
				found = s
			}
		}
		return found
	}
	require.NotNil(t, screenOf(bot).Lease, "the run holds an agent lease")

	// The run's Codex: the app-server botd started for its /agent session.
	pid := c.codexPid(t)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	final, _ := waitRun(t, env, runID, time.Minute)
	require.Equal(t, runs.StatusFailed, final.Status)
	require.Contains(t, final.Error, "Codex app-server went away")
	require.Nil(t, screenOf(bot).Lease, "the failed run's lease was released")
}

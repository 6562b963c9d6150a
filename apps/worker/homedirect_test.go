package main

// Issue 20.5: a run's end never disturbs another bot. Local and docker
// machines use a worker-owned home directly, so the checkpoint at a run's
// end only advances the revision marker: on real botd with two bots, bot B
// browses and calls browser_read_page in a loop (through the worker's tool
// route) while bot A's run ends with a checkpoint, and B's Chromium keeps
// its pid and none of B's calls fails. With S3 homes the run's end uploads
// a full export (botd quiesces one browser at a time): none of B's calls
// fails, and the longest wait is logged.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// Displays 720-747 and loopback ports 25000-25019 (local), 25100-25119
// (local, S3 homes), 25200-25299 (the S3 server) and 25300-25319 (local, a
// machine with its own home) are this file's alone.
const (
	hdDisplayBase   = 720
	hdPortBase      = 25000
	hdS3DisplayBase = 730
	hdS3PortBase    = 25100
)

// browsing is what bot B's loop saw.
type browsing struct {
	calls, during int
	fails         []string
	longest       time.Duration
	pids          []int
}

// procChromium is the main Chromium process whose --user-data-dir is
// profile (0: none), as the host's /proc shows it (a container's too).
func procChromium(profile string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, "--user-data-dir="+profile+" ") && !strings.Contains(cmd, "--type=") {
			return pid
		}
	}
	return 0
}

// readPage calls browser_read_page for bot through the worker's tool
// route (no require: it runs in a goroutine).
func (e *workerEnv) readPage(ctx context.Context, bot string) (toolResult, error) {
	var res toolResult
	b, _ := json.Marshal(map[string]any{"botId": bot, "args": map[string]any{}})
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/computers/"+e.computer+"/tools/browser_read_page", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("X-Computer-Capability", e.capa)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(body.String()))
	}
	if err := json.Unmarshal(body.Bytes(), &res); err != nil {
		return res, err
	}
	if !res.Success {
		return res, fmt.Errorf("tool failed: %s", res.text())
	}
	return res, nil
}

// acceptancePrompt is the acceptance flow's task for bot on pageURL.
func acceptancePrompt(pageURL, bot string) string {
	return "Open " + pageURL + " in your browser with open_path, look at the screen and press the small magenta button with computer_act. " +
		"Then use the shell tool to run [\"sh\",\"-c\",\"id -un > bots/" + bot + "/whoami.txt\"], and use file_write to write " +
		"\"the button was pressed\\n\" to bots/" + bot + "/result.txt. Finish with a short summary."
}

// randomBot is a bot id no other test uses (its screen's profile path is
// looked for in /proc, where other tests' containers show too).
func randomBot(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// browseWhileRunEnds adds bot b to e's computer, has it open pageURL, then
// calls browser_read_page for it in a loop while bot a's run (prompt) goes
// and ends with a checkpoint. profile is b's Chromium profile as /proc
// shows it. It returns the run's events and what b's loop saw.
func browseWhileRunEnds(t *testing.T, e *workerEnv, a, b, pageURL, profile, prompt string) ([]string, browsing) {
	t.Helper()
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/bots", map[string]string{"id": b}, nil))
	st, res := e.tool(t, b, "open_path", map[string]any{"target": pageURL})
	require.Equal(t, http.StatusOK, st, res.text())
	require.True(t, res.Success, res.text())
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, err := e.readPage(t.Context(), b)
		if err == nil && strings.Contains(r.text(), pageURL) {
			break
		}
		require.True(t, time.Now().Before(deadline), "bot %s never showed %s: %v %s", b, pageURL, err, r.text())
		time.Sleep(300 * time.Millisecond)
	}
	require.NotZero(t, procChromium(profile), "bot %s's Chromium (%s) runs", b, profile)

	var (
		mu      sync.Mutex
		seen    browsing
		running bool // a's run is on
		after   int  // calls since a's run ended
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			before := running
			mu.Unlock()
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			r, err := e.readPage(ctx, b)
			cancel()
			took := time.Since(start)
			pid := procChromium(profile)
			mu.Lock()
			seen.calls++
			if before || running {
				seen.during++
			}
			if !running && !before {
				after++
			}
			if err != nil {
				seen.fails = append(seen.fails, fmt.Sprintf("after %v: %v", took.Round(time.Millisecond), err))
			} else if !strings.Contains(r.text(), pageURL) {
				seen.fails = append(seen.fails, fmt.Sprintf("after %v: not the page: %.300s", took.Round(time.Millisecond), r.text()))
			}
			seen.longest = max(seen.longest, took)
			if pid != 0 && (len(seen.pids) == 0 || seen.pids[len(seen.pids)-1] != pid) {
				seen.pids = append(seen.pids, pid)
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	// A few calls before the run starts.
	waitCalls := func(what string, n func() bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			mu.Lock()
			ok := n()
			mu.Unlock()
			if ok {
				return
			}
			require.True(t, time.Now().Before(deadline), "bot %s's loop: %s", b, what)
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitCalls("no calls before the run", func() bool { return seen.calls >= 3 })
	mu.Lock()
	running, after = true, 0
	mu.Unlock()
	id := e.startRun(t, a, prompt)
	final, events := waitRun(t, e, id, 10*time.Minute)
	mu.Lock()
	running = false
	mu.Unlock()
	t.Logf("bot %s's run: %s (%s); events %v", a, final.Status, final.Error, events)
	// B goes on a little after the run's end (and its checkpoint).
	waitCalls("no calls after the run", func() bool { return after >= 3 })
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	t.Logf("bot %s: %d browser_read_page calls, %d while bot %s's run went and ended, longest %v, chromium pids %v",
		b, seen.calls, seen.during, a, seen.longest.Round(time.Millisecond), seen.pids)
	return events, seen
}

// noTar asserts the worker's local home store holds no tar of e's computer:
// nothing was exported.
func noTar(t *testing.T, e *workerEnv) {
	t.Helper()
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	hs, err := homes.NewLocal(e.dataDir)
	require.NoError(t, err)
	_, ok, err := hs.Latest(t.Context(), c.HomeKey)
	require.NoError(t, err)
	require.False(t, ok, "the run's end exported the home into the store")
}

// TestRunEndLeavesOtherBotLocal: local provider, local home store.
func TestRunEndLeavesOtherBotLocal(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	page := mockmodel.NewButtonPage()
	pageSrv := httptest.NewServer(page)
	defer pageSrv.Close()
	const a = "alice"
	flow := mockmodel.NewAcceptance(pageSrv.URL+"/", a)
	modelSrv := httptest.NewServer(mockmodel.New(flow.Script).RequireKey(scriptedKey))
	defer modelSrv.Close()
	dir := openDir(t, "wire-hd-local-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(hdDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(hdPortBase), "WORKER_LOCAL_SLOTS": "2",
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		"EGRESS_ALLOW": strings.TrimPrefix(pageSrv.URL, "http://"),
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), a)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	home := e.w.Computers.HomeDir(c, providers.KindLocal)
	require.Equal(t, filepath.Join(dir, "machines", "homes", c.HomeKey+".local", "home"), home)
	b := randomBot("bob_")
	events, seen := browseWhileRunEnds(t, e, a, b, pageSrv.URL+"/", filepath.Join(home, "desktop", "screens", b, "chromium"), acceptancePrompt(pageSrv.URL+"/", a))
	require.Contains(t, events, "checkpoint", "bot %s's run ended with a checkpoint", a)
	require.Empty(t, seen.fails, "bot %s's calls failed", b)
	require.Positive(t, seen.during, "bot %s made no call while the run went and ended", b)
	require.Len(t, seen.pids, 1, "bot %s's Chromium was restarted (pids %v)", b, seen.pids)
	require.Positive(t, lastCheckpoint(t, e))
	noTar(t, e)
	res, err := os.ReadFile(filepath.Join(home, "bot", "bots", a, "result.txt"))
	require.NoError(t, err, "the run's file is in the worker-owned home")
	require.Equal(t, "the button was pressed\n", string(res))
}

// TestRunEndLeavesOtherBotDocker: docker provider (the computer image on
// the real engine), local home store. The button page and the scripted
// model run inside the container (mockserve), as in the acceptance test.
func TestRunEndLeavesOtherBotDocker(t *testing.T) {
	if os.Geteuid() != 0 {
		requireIntegration(t)
	}
	image := envMap(nil)("WORKER_IMAGE")
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
	dir := openDir(t, "wire-hd-docker-")
	ms := buildMockserve(t, dir)
	page := &inContainer{t: t, dir: ms, cookie: mockmodel.NewButtonPage().Cookie}
	const a = "alice"
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image,
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:18080/v1", "MODEL_API_KEY": scriptedKey,
		"EGRESS_ALLOW": "127.0.0.1:18081",
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), a)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	page.start(c.ProviderRef)
	home := e.w.Computers.HomeDir(c, providers.KindDocker)
	require.Equal(t, home, dockerHomeMount(t, c.ProviderRef), "the container's /home is the worker-owned home")
	b := randomBot("bob_")
	const pageURL = "http://127.0.0.1:18081/"
	events, seen := browseWhileRunEnds(t, e, a, b, pageURL, "/home/desktop/screens/"+b+"/chromium", acceptancePrompt(pageURL, a))
	require.Contains(t, events, "checkpoint", "bot %s's run ended with a checkpoint", a)
	require.Empty(t, seen.fails, "bot %s's calls failed", b)
	require.Positive(t, seen.during, "bot %s made no call while the run went and ended", b)
	require.Len(t, seen.pids, 1, "bot %s's Chromium was restarted (pids %v)", b, seen.pids)
	require.Positive(t, lastCheckpoint(t, e))
	noTar(t, e)
	res, err := os.ReadFile(filepath.Join(home, "bot", "bots", a, "result.txt"))
	require.NoError(t, err, "the run's file is in the worker-owned home")
	require.Equal(t, "the button was pressed\n", string(res))
}

// dockerHomeMount is the host directory bind-mounted on the container's
// /home ("" when /home is no bind mount).
func dockerHomeMount(t testing.TB, ref string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "--format", `{{range .Mounts}}{{if eq .Destination "/home"}}{{.Type}} {{.Source}}{{end}}{{end}}`, ref).CombinedOutput()
	require.NoError(t, err, "docker inspect: %s", out)
	typ, src, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if typ != "bind" {
		return ""
	}
	return src
}

// TestRunEndLeavesOtherBotS3: local provider with S3 homes (gofakes3 on
// loopback): the run's end uploads a full export, during which botd
// quiesces B's browser for its profile's copy; B's calls wait, none fails.
func TestRunEndLeavesOtherBotS3(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	backend := s3mem.New()
	var l net.Listener
	for p := 25200; p < 25300 && l == nil; p++ {
		l, _ = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	}
	require.NotNil(t, l, "a free port in 25200-25299")
	s3srv := &http.Server{Handler: gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()}
	go func() { _ = s3srv.Serve(l) }()
	t.Cleanup(func() { _ = s3srv.Close() })
	keys := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(keys, "ak"), []byte("test-access\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(keys, "sk"), []byte("test-secret-key\n"), 0o600))

	page := mockmodel.NewButtonPage()
	pageSrv := httptest.NewServer(page)
	defer pageSrv.Close()
	const a = "alice"
	flow := mockmodel.NewAcceptance(pageSrv.URL+"/", a)
	modelSrv := httptest.NewServer(mockmodel.New(flow.Script).RequireKey(scriptedKey))
	defer modelSrv.Close()
	dir := openDir(t, "wire-hd-s3-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(hdS3DisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(hdS3PortBase), "WORKER_LOCAL_SLOTS": "2",
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		"EGRESS_ALLOW":             strings.TrimPrefix(pageSrv.URL, "http://"),
		"WORKER_HOMES_S3_ENDPOINT": l.Addr().String(), "WORKER_HOMES_S3_BUCKET": "homes",
		"WORKER_HOMES_S3_ACCESS_KEY_FILE": filepath.Join(keys, "ak"), "WORKER_HOMES_S3_SECRET_KEY_FILE": filepath.Join(keys, "sk"),
		"WORKER_HOMES_S3_REGION": "us-east-1", "WORKER_HOMES_S3_INSECURE": "true",
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), a)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	home := e.w.Computers.HomeDir(c, providers.KindLocal)
	require.NotEmpty(t, home, "S3 homes: the machine still mounts a worker-owned home")
	b := randomBot("bob_")
	events, seen := browseWhileRunEnds(t, e, a, b, pageSrv.URL+"/", filepath.Join(home, "desktop", "screens", b, "chromium"), acceptancePrompt(pageSrv.URL+"/", a))
	require.Contains(t, events, "checkpoint", "bot %s's run ended with a checkpoint", a)
	require.Positive(t, lastCheckpoint(t, e))
	res, err := backend.ListBucket("homes", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	require.NoError(t, err)
	var uploaded []string
	for _, o := range res.Contents {
		if strings.Contains(o.Key, c.HomeKey) {
			uploaded = append(uploaded, o.Key)
		}
	}
	require.NotEmpty(t, uploaded, "the run's end uploaded the home to S3")
	require.Empty(t, seen.fails, "bot %s's calls failed", b)
	require.Positive(t, seen.during, "bot %s made no call while the run went and ended", b)
	t.Logf("S3 homes: the longest browser_read_page of bot %s while bot %s's run ended (a full export) took %v", b, a, seen.longest.Round(time.Millisecond))
}

// TestOwnHomeMachineMovesToWorkerHome: a local machine made before homes
// were the worker's keeps its home in computers/<ref>/home and has no
// worker-owned home. Its next start exports that home, destroys the
// machine, and a new machine on a new worker-owned home imports the
// export: the file written on the old machine is there.
func TestOwnHomeMachineMovesToWorkerHome(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	dir := openDir(t, "wire-hd-own-")
	machines := filepath.Join(dir, "machines")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir),
		"WORKER_LOCAL_DISPLAY_BASE": "740", "WORKER_LOCAL_PORT_BASE": "25300", "WORKER_LOCAL_SLOTS": "2",
	}
	const bot = "carol"
	e := providerWorker(t, env, machines, bot)
	ctx := t.Context()
	st, res := e.tool(t, bot, "file_write", map[string]any{"path": "bots/" + bot + "/own.txt", "content": "in the machine's own home\n"})
	require.Equal(t, http.StatusOK, st, res.text())
	before, err := e.w.Store.GetComputer(ctx, e.computer)
	require.NoError(t, err)
	home := e.w.Computers.HomeDir(before, providers.KindLocal)
	start := lastCheckpoint(t, e)

	// Make the machine one of before: stopped, its home moved into its own
	// directory, machine.json naming no worker-owned home, and none made.
	require.NoError(t, e.w.setup.Local.Stop(ctx, before.ProviderRef))
	mdir := filepath.Join(machines, "computers", before.ProviderRef)
	require.NoError(t, os.Rename(home, filepath.Join(mdir, "home")))
	require.NoError(t, os.RemoveAll(filepath.Dir(home)))
	b, err := os.ReadFile(filepath.Join(mdir, "machine.json"))
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, json.Unmarshal(b, &meta))
	require.Contains(t, meta, "home")
	delete(meta, "home")
	b, _ = json.Marshal(meta)
	require.NoError(t, os.WriteFile(filepath.Join(mdir, "machine.json"), b, 0o600))

	after := recoverRunning(t, e)
	require.NotEqual(t, before.ProviderRef, after.ProviderRef, "a new machine")
	require.NoDirExists(t, mdir, "the machine with a home of its own was destroyed once exported")
	require.Greater(t, lastCheckpoint(t, e), start, "its home was exported")
	st, res = e.tool(t, bot, "file_read", map[string]any{"path": "bots/" + bot + "/own.txt"})
	require.Equal(t, http.StatusOK, st, res.text())
	require.Contains(t, res.text(), "in the machine's own home")
	got, err := os.ReadFile(filepath.Join(home, "bot", "bots", bot, "own.txt"))
	require.NoError(t, err, "the file is in the new worker-owned home")
	require.Equal(t, "in the machine's own home\n", string(got))
	require.NoFileExists(t, filepath.Join(filepath.Dir(home), "restore-pending"))
}

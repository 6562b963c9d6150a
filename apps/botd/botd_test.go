package main

// End-to-end tests of the botd binary: built once, run as a real process
// against a temporary BOTD_HOME with the real Codex app-server.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/testbin"
)

var botdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "botd-bin-")
	if err != nil {
		panic(err)
	}
	// BOTD_TEST_BIN runs the tests against another build (e.g. an older
	// commit's botd, to see the red team's attacks succeed before a fix).
	if b := os.Getenv("BOTD_TEST_BIN"); b != "" {
		botdBin = b
	} else if botdBin, err = testbin.GoBuild(filepath.Join(dir, "botd"), "github.com/open-bot/computer/apps/botd"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort picks a free loopback port in 12000-12999, below the ephemeral range
// (32768+): a port from ":0" was closed before the daemon bound it, and an
// outbound connection or the Docker engine's published container port of a
// test running beside it took it in between (seen: "bind: address already
// in use"). Each package of tests has a band of its own.
func freePort(t testing.TB) string {
	t.Helper()
	for range 1000 {
		p := 12000 + int(freePortNext.Add(1))%1000
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			addr := l.Addr().String()
			l.Close()
			return addr
		}
	}
	t.Fatalf("no free loopback port in 12000-12999")
	return ""
}

var freePortNext atomic.Int32

// daemon is one running botd.
type daemon struct {
	t     testing.TB
	cmd   *exec.Cmd
	addr  string
	token string
	home  string
	logMu sync.Mutex
	log   bytes.Buffer
	done  chan error
}

func (d *daemon) logs() string {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	return d.log.String()
}

type lockedWriter struct{ d *daemon }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.d.logMu.Lock()
	defer w.d.logMu.Unlock()
	return w.d.log.Write(b)
}

func testEnv(t testing.TB, home, token string) (env []string, addr string) {
	addr = freePort(t)
	env = append(os.Environ(),
		"BOTD_TOKEN="+token, "BOTD_HOME="+home, "BOTD_LISTEN="+addr,
		"SOCKS_LISTEN="+freePort(t), "DISPLAY_BASE=300", "VIEW_PORT_BASE=28080",
		"BOTD_LOG_LEVEL=debug",
	)
	return env, addr
}

// startDaemon starts botd; extra environment entries win over testEnv's.
func startDaemon(t testing.TB, home, token string, extra ...string) *daemon {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	testenv.RequireTools(t, "codex")
	env, addr := testEnv(t, home, token)
	d := &daemon{t: t, addr: addr, token: token, home: home, done: make(chan error, 1)}
	d.cmd = exec.Command(botdBin)
	d.cmd.Env = append(env, extra...)
	d.cmd.Stdout = lockedWriter{d}
	d.cmd.Stderr = lockedWriter{d}
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(15 * time.Second):
				_ = d.cmd.Process.Kill()
			}
		}
	})
	return d
}

func (d *daemon) get(path string) (int, []byte) {
	req, _ := http.NewRequest("GET", "http://"+d.addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (d *daemon) waitHealthy(timeout time.Duration) shared.ComputerHealth {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		status, body := d.get("/health")
		if status == 200 {
			var h shared.ComputerHealth
			require.NoError(d.t, json.Unmarshal(body, &h))
			if h.OK {
				return h
			}
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("botd not healthy in %s (last %d %s)\nlogs:\n%s", timeout, status, body, d.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) stop() {
	d.t.Helper()
	require.NoError(d.t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.done:
		require.NoError(d.t, err, "botd must exit 0 on SIGTERM\n%s", d.logs())
	case <-time.After(20 * time.Second):
		d.t.Fatalf("botd did not exit on SIGTERM\n%s", d.logs())
	}
}

func tempHome(t testing.TB) string {
	dir, err := os.MkdirTemp("", "botd-home-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "home")
}

func TestShortTokenRefusedAndNothingCreated(t *testing.T) {
	home := tempHome(t)
	env, _ := testEnv(t, home, "short-token")
	cmd := exec.Command(botdBin)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.NotEqual(t, 0, ee.ExitCode())
	require.Contains(t, stderr.String(), "BOTD_TOKEN must be at least 16 characters")
	require.NotContains(t, stderr.String(), "short-token")
	_, err = os.Stat(home)
	require.True(t, os.IsNotExist(err), "nothing may be created for a refused start")
}

func TestStartupLayoutHealthEventsAndShutdown(t *testing.T) {
	home := tempHome(t)
	token := "tok-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-secret-value"
	d := startDaemon(t, home, token)
	h := d.waitHealthy(60 * time.Second)
	require.Equal(t, shared.StateRunning, h.Agent)

	// The filesystem, with the design's owners and modes.
	for _, tc := range []struct {
		path        string
		user, group string
		mode        string
	}{
		{"bot", "bot", "bots", "drwxrwsr-x"},
		{"bot/bots", "bot", "bots", "drwxrwsr-x"},
		{"bot/shared", "bot", "bots", "drwxrwsr-x"},
		{"bot/shared/downloads", "bot", "bots", "drwxrwsr-x"},
		{"bot/.codex", "bot", "", "drwx------"},
		{".botd", "root", "root", "drwx------"},
		{"bot/.codex/config.toml", "bot", "", "-rw-------"},
	} {
		out, err := exec.Command("stat", "-c", "%U %G %A", filepath.Join(home, tc.path)).Output()
		require.NoError(t, err, tc.path)
		f := strings.Fields(string(out))
		require.Equal(t, tc.user, f[0], tc.path)
		if tc.group != "" {
			require.Equal(t, tc.group, f[1], tc.path)
		}
		require.Equal(t, tc.mode, f[2], tc.path)
	}
	cfg, err := os.ReadFile(filepath.Join(home, "bot/.codex/config.toml"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(cfg), "# Managed by botd. Edits are overwritten on start.\n"))
	require.Contains(t, string(cfg), `approval_policy = "never"`)

	// /events: Codex cannot start (bot made its config.toml a directory,
	// so botd cannot rewrite it): an /agent connection is refused and the
	// stream shows crashed; once the path is clear again, botd's background
	// check starts Codex and the stream shows running.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+d.addr+"/events?token="+token, nil)
	require.NoError(t, err)
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	type healthEvent struct {
		Type string `json:"type"`
		Data struct {
			Agent string `json:"agent"`
			OK    bool   `json:"ok"`
		} `json:"data"`
	}
	read := func(seen []string) healthEvent {
		_, b, err := c.Read(ctx)
		require.NoError(t, err, "events so far: %v", seen)
		var ev healthEvent
		require.NoError(t, json.Unmarshal(b, &ev))
		return ev
	}
	// The greeting first: once it is here the stream is live, so every event
	// the refusal causes reaches us.
	greeting := read(nil)
	require.Equal(t, shared.EventHealth, greeting.Type)
	require.Equal(t, "running", greeting.Data.Agent)
	cfgPath := filepath.Join(home, "bot/.codex/config.toml")
	require.NoError(t, os.Remove(cfgPath))
	code, out := asUser(t, "bot", "mkdir", cfgPath)
	require.Equal(t, 0, code, out)
	_, resp, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent?token="+token, nil)
	require.Error(t, err, "an /agent connection was accepted though Codex cannot start")
	require.NotNil(t, resp, "%v", err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != "crashed" {
		ev := read(seen)
		if ev.Type != shared.EventHealth {
			continue
		}
		if len(seen) == 0 && ev.Data.Agent == "running" {
			continue // another component's health change
		}
		seen = append(seen, ev.Data.Agent)
		require.Equal(t, ev.Data.Agent == "running", ev.Data.OK)
	}
	require.Equal(t, []string{"crashed"}, seen)
	require.NoError(t, os.Remove(cfgPath))
	for seen[len(seen)-1] != "running" {
		ev := read(seen)
		if ev.Type == shared.EventHealth && ev.Data.Agent != seen[len(seen)-1] {
			seen = append(seen, ev.Data.Agent)
			require.Equal(t, ev.Data.Agent == "running", ev.Data.OK)
		}
	}
	require.Equal(t, []string{"crashed", "running"}, seen)

	// A session's Codex is botd's child: it dies with botd below.
	ac := dialAgent(ctx, t, d)
	defer ac.CloseNow()
	require.NotEmpty(t, initialize(ctx, t, ac))
	require.NotEmpty(t, codexPids(d))

	// The config is rewritten on every start: scribble on it, restart.
	require.NoError(t, os.WriteFile(filepath.Join(home, "bot/.codex/config.toml"), []byte("model = \"hacked\"\n"), 0o600))
	children := descendants(d.cmd.Process.Pid)
	require.NotEmpty(t, children)
	d.stop()
	for _, pid := range children {
		require.False(t, testenv.Alive(pid), "child %d outlived botd", pid)
	}
	logs := d.logs()
	require.NotContains(t, logs, token, "the token must never be logged")
	require.Contains(t, logs, `"component":"supervisor"`)

	d2 := startDaemon(t, home, token)
	d2.waitHealthy(60 * time.Second)
	cfg, err = os.ReadFile(filepath.Join(home, "bot/.codex/config.toml"))
	require.NoError(t, err)
	require.NotContains(t, string(cfg), "hacked")
	require.Contains(t, string(cfg), "# Managed by botd.")
	d2.stop()
	require.NotContains(t, d2.logs(), token)
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		k := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[k+1:])
		if len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// TestHardKilledBotdLeavesNoCodex: even a botd killed with SIGKILL (no
// chance to stop anything) takes a session's Codex with it (no orphan app-
// server, with its tools' processes, outlives the botd that held its pipe).
func TestHardKilledBotdLeavesNoCodex(t *testing.T) {
	d := startDaemon(t, tempHome(t), "hard-kill-token-0123456789")
	d.waitHealthy(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialAgent(ctx, t, d) // a session: its Codex runs until the connection ends
	defer c.CloseNow()
	require.NotEmpty(t, initialize(ctx, t, c))
	pids := codexPids(d)
	require.Len(t, pids, 1)
	codexPid := pids[0]
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGKILL))
	<-d.done
	deadline := time.Now().Add(5 * time.Second)
	for testenv.Alive(codexPid) {
		require.True(t, time.Now().Before(deadline), "codex (pid %d) outlived a SIGKILLed botd", codexPid)
		time.Sleep(20 * time.Millisecond)
	}
}

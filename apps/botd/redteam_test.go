package main

// The red team (../shared/THREAT-MODEL.md): each row is an attack run from
// its real position — a shell as bot or desktop (setpriv), a page in the
// screen's real Chromium, a raw client on the network — against a real botd
// binary, and asserts the refusal. Displays 500-519, view ports 27100+.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

const (
	rtDisplayBase  = 500
	rtViewPortBase = 27100
)

// redTeam is one real botd and what the attacks need to know about it.
type redTeam struct {
	d        *daemon
	key      string // the model provider's key (root's)
	socks    string
	page     *httptest.Server // an allowed page (EGRESS_ALLOW), the control
	screenID string
}

// asUser runs argv as user (setpriv, the user's own groups, a clean
// environment) and returns its exit code and output.
func asUser(t testing.TB, user string, argv ...string) (int, string) {
	t.Helper()
	args := append([]string{"--reuid=" + user, "--regid=" + user, "--init-groups", "--reset-env", "--"}, argv...)
	cmd := exec.Command("setpriv", args...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

func randomKey(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func startRedTeam(t *testing.T) *redTeam {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	testenv.RequireTools(t, "codex", "Xvfb", "x11vnc", "chromium", "setpriv", "python3", "xdpyinfo")
	rt := &redTeam{key: randomKey("sk-redteam-"), screenID: "rt"}
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no model here", http.StatusNotFound)
	}))
	t.Cleanup(model.Close)
	rt.page = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<title>allowed</title><p>the allowed page</p>")
	}))
	t.Cleanup(rt.page.Close)

	home := tempHome(t)
	addr, codex := freePort(t), freePort(t)
	rt.socks = freePort(t)
	token := randomKey("redteam-token-")
	d := &daemon{t: t, addr: addr, token: token, home: home, codex: codex, done: make(chan error, 1)}
	d.cmd = exec.Command(botdBin)
	d.cmd.Env = append(os.Environ(),
		"BOTD_TOKEN="+token, "BOTD_HOME="+home, "BOTD_LISTEN="+addr, "CODEX_LISTEN="+codex,
		"SOCKS_LISTEN="+rt.socks, "DISPLAY_BASE="+strconv.Itoa(rtDisplayBase), "VIEW_PORT_BASE="+strconv.Itoa(rtViewPortBase),
		"MODEL_UPSTREAM_URL="+model.URL+"/v1", "MODEL_API_KEY="+rt.key,
		"EGRESS_ALLOW="+strings.TrimPrefix(rt.page.URL, "http://"), "MAX_SCREENS=4",
		"BOTD_MAX_CONNS="+strconv.Itoa(rtMaxConns),
		// How a key reached Codex before the model proxy (botd now ignores
		// it): a build that still honours it fails the key row.
		"CODEX_ENV_PASS=MODEL_API_KEY",
	)
	d.cmd.Stdout, d.cmd.Stderr = lockedWriter{d}, lockedWriter{d}
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			_ = d.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("botd logs:\n%s", tailLines(d.logs(), 80))
		}
	})
	rt.d = d
	d.waitHealthy(90 * time.Second)
	status, body := rt.call("POST", "/screens/"+rt.screenID+"/start", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	return rt
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// call is an authorized API request.
func (rt *redTeam) call(method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+rt.d.addr+path, rd)
	req.Header.Set("Authorization", "Bearer "+rt.d.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type screenInfo struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Slot  *int   `json:"slot"`
}

func (rt *redTeam) screen(t testing.TB, id string) screenInfo {
	t.Helper()
	status, body := rt.call("GET", "/screens", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	var list struct {
		Screens []screenInfo `json:"screens"`
	}
	if err := json.Unmarshal(body, &list); err != nil || list.Screens == nil {
		var arr []screenInfo
		require.NoError(t, json.Unmarshal(body, &arr), string(body))
		list.Screens = arr
	}
	for _, s := range list.Screens {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no screen %s in %s", id, body)
	return screenInfo{}
}

// pidsOf lists processes whose argv[0] base name is name and whose command
// line contains marker.
func pidsOf(name, marker string) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		// Chromium rewrites its command line into one space-separated string.
		args := strings.Fields(strings.ReplaceAll(string(raw), "\x00", " "))
		if len(args) == 0 || filepath.Base(args[0]) != name || !strings.Contains(string(raw), marker) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		out = append(out, pid)
	}
	return out
}

// tcpListeners are the socket inodes of every listening TCP socket.
func tcpListeners(t testing.TB) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" {
				out[fs[9]] = true
			}
		}
	}
	return out
}

// listensOnTCP reports whether pid holds a listening TCP socket.
func listensOnTCP(t testing.TB, pid int) bool {
	t.Helper()
	ls := tcpListeners(t)
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && ls[strings.TrimSuffix(ino, "]")] {
			return true
		}
	}
	return false
}

// socksConnect asks botd's SOCKS proxy for host:port and returns the reply
// code (0: connected).
func socksConnect(t testing.TB, proxy, host string, port int) byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	_, err = c.Write(req)
	require.NoError(t, err)
	rep := make([]byte, 4)
	_, err = io.ReadFull(c, rep)
	require.NoError(t, err)
	return rep[3]
}

// loopbackTrap is a listener nothing may reach: it counts connections.
func loopbackTrap(t testing.TB) (*atomic.Int32, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return &n, ln.Addr().(*net.TCPAddr).Port
}

// open loads url in screen id's browser (under an agent lease) and reads
// the page back.
func (rt *redTeam) open(t testing.TB, id, url string) string {
	t.Helper()
	status, body := rt.call("POST", "/screens/"+id+"/lease", map[string]any{"kind": "agent", "holder": "redteam"})
	require.Equal(t, http.StatusOK, status, string(body))
	var l struct {
		LeaseID string `json:"leaseId"`
	}
	require.NoError(t, json.Unmarshal(body, &l))
	defer rt.call("DELETE", "/screens/"+id+"/lease/"+l.LeaseID, nil)
	status, body = rt.call("POST", "/screens/"+id+"/open", map[string]any{"leaseId": l.LeaseID, "target": url})
	require.Equal(t, http.StatusOK, status, string(body))
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body = rt.call("GET", "/screens/"+id+"/browser/page", nil)
		var p struct {
			URL  string `json:"url"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(body, &p)
		if status == http.StatusOK && strings.HasPrefix(p.URL, strings.TrimSuffix(url, "/")) && p.Text != "" {
			return p.Text
		}
		// Chromium's error page for this very URL (it names it).
		if status == http.StatusOK && strings.HasPrefix(p.URL, "chrome-error://") && strings.Contains(p.Text, url) {
			return p.Text
		}
		require.True(t, time.Now().Before(deadline), "page %s never loaded: %d %s", url, status, body)
		time.Sleep(200 * time.Millisecond)
	}
}

func TestRedTeam(t *testing.T) {
	rt := startRedTeam(t)
	home := rt.d.home
	runDir := fmt.Sprintf("/run/botd-screens/%d", rtDisplayBase)
	botdPort, _ := strconv.Atoi(rt.d.addr[strings.LastIndex(rt.d.addr, ":")+1:])

	rows := []rtRow{
		{"x11vnc listens on no TCP port", "network", func(t *testing.T) {
			pids := pidsOf("x11vnc", runDir)
			require.NotEmpty(t, pids, "no x11vnc for the screen")
			for _, pid := range pids {
				require.False(t, listensOnTCP(t, pid), "x11vnc %d listens on TCP", pid)
			}
			for _, port := range []int{5900, 5900 + rtDisplayBase - 10} {
				if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
					c.Close()
					require.Empty(t, pidsOf("x11vnc", ":"+strconv.Itoa(port)), "something answers RFB on %d", port)
				}
			}
		}},
		{"bot cannot reach x11vnc's socket", "bot", func(t *testing.T) {
			code, out := asUser(t, "bot", "python3", "-c",
				"import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.settimeout(3)\ns.connect(sys.argv[1])\nprint(s.recv(12))", runDir+"/vnc")
			require.NotEqual(t, 0, code, "bot reached RFB: %s", out)
			require.Contains(t, out, "Permission denied")
		}},
		{"bot cannot open the X display or read its cookie", "bot", func(t *testing.T) {
			code, out := asUser(t, "bot", "xdpyinfo", "-display", fmt.Sprintf(":%d", rtDisplayBase))
			require.NotEqual(t, 0, code, "bot opened the display: %s", out)
			code, out = asUser(t, "bot", "cat", filepath.Join(home, "desktop", ".Xauthority-0"))
			require.NotEqual(t, 0, code, "bot read the Xauthority: %s", out)
		}},
		{"/tmp/.X11-unix is root's and sticky", "bot", func(t *testing.T) {
			st, err := os.Lstat("/tmp/.X11-unix")
			require.NoError(t, err)
			require.True(t, st.Mode()&os.ModeSticky != 0, "mode %v", st.Mode())
			require.EqualValues(t, 0, st.Sys().(*syscall.Stat_t).Uid)
		}},
		{"desktop's symlink at a profile dir is never followed by root", "desktop", func(t *testing.T) {
			victim := filepath.Join(filepath.Dir(home), "victim")
			require.NoError(t, os.Mkdir(victim, 0o700))
			code, out := asUser(t, "desktop", "ln", "-s", victim, filepath.Join(home, "desktop", "screens", "rt-link"))
			require.Equal(t, 0, code, out)
			defer rt.call("POST", "/screens/rt-link/stop", nil) // should it have started
			status, body := rt.call("POST", "/screens/rt-link/start", nil)
			require.NotEqual(t, http.StatusOK, status, "the screen started through a planted link: %s", body)
			st, err := os.Stat(victim)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "root chmodded the link's target")
			require.EqualValues(t, 0, st.Sys().(*syscall.Stat_t).Uid, "root chowned the link's target")
			require.Contains(t, rt.screenErr(t, "rt-link"), "not a plain directory")
		}},
		{"a FIFO X lock and a squatted view port neither freeze nor fail starts", "bot", func(t *testing.T) {
			fifo := fmt.Sprintf("/tmp/.X%d-lock", rtDisplayBase+1)
			code, out := asUser(t, "bot", "mkfifo", fifo)
			require.Equal(t, 0, code, out)
			defer os.Remove(fifo)
			// Squat slot 2's view port (when something else already holds
			// it, it is squatted all the same).
			if squat, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(rtViewPortBase+2*2)); err == nil {
				defer squat.Close()
			}
			type result struct {
				status int
				body   []byte
			}
			done := make(chan result, 1)
			go func() {
				status, body := rt.call("POST", "/screens/rt-fifo/start", nil)
				done <- result{status, body}
			}()
			// Meanwhile every route answers (the manager is not frozen).
			for i := 0; i < 3; i++ {
				status, body := rt.call("GET", "/screens", nil)
				require.Equal(t, http.StatusOK, status, string(body))
			}
			select {
			case r := <-done:
				require.Equal(t, http.StatusOK, r.status, string(r.body))
			case <-time.After(90 * time.Second):
				t.Fatal("a start hangs behind a FIFO in /tmp")
			}
			in := rt.screen(t, "rt-fifo")
			require.NotNil(t, in.Slot)
			require.GreaterOrEqual(t, *in.Slot, 3, "slots 1 (FIFO lock) and 2 (squatted view port) are skipped")
			rt.call("POST", "/screens/rt-fifo/stop", nil)
		}},
		{"the model key is in no bot or desktop process, nor in bot's files", "bot", func(t *testing.T) {
			procs, _ := filepath.Glob("/proc/[0-9]*")
			checked := 0
			for _, d := range procs {
				st, err := os.Stat(d)
				if err != nil || st.Sys().(*syscall.Stat_t).Uid == 0 {
					continue
				}
				if env, err := os.ReadFile(filepath.Join(d, "environ")); err == nil {
					checked++
					require.NotContains(t, string(env), rt.key, "key in %s/environ", d)
				}
			}
			require.Positive(t, checked)
			require.NoError(t, filepath.WalkDir(filepath.Join(home, "bot"), func(p string, de os.DirEntry, err error) error {
				if err == nil && de.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					require.NotContains(t, string(b), rt.key, "key in %s", p)
				}
				return nil
			}))
			cfg, err := os.ReadFile(filepath.Join(home, "bot", ".codex", "config.toml"))
			require.NoError(t, err)
			require.Contains(t, string(cfg), `model_provider = "botd"`)
			code, out := asUser(t, "bot", "cat", fmt.Sprintf("/proc/%d/environ", rt.d.cmd.Process.Pid))
			require.NotEqual(t, 0, code, "bot read botd's environment")
			require.NotContains(t, out, rt.key)
		}},
		{"the token, the jar and botd's state are unreadable", "bot", func(t *testing.T) {
			for _, u := range []string{"bot", "desktop"} {
				code, out := asUser(t, u, "ls", filepath.Join(home, ".botd"))
				require.NotEqual(t, 0, code, "%s listed botd's state: %s", u, out)
				code, out = asUser(t, u, "cat", filepath.Join(home, ".botd", "cookies.json"))
				require.NotEqual(t, 0, code, "%s read the jar", u)
				require.NotContains(t, out, "[")
			}
		}},
		{"a token file others can read is refused", "bot", func(t *testing.T) {
			dir := t.TempDir()
			f := filepath.Join(dir, "token")
			require.NoError(t, os.WriteFile(f, []byte(randomKey("tok-")), 0o644))
			// A botd that accepts the file would run: bound it.
			run := func() ([]byte, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, botdBin)
				cmd.Env = append(os.Environ(), "BOTD_TOKEN=", "BOTD_TOKEN_FILE="+f, "BOTD_HOME="+filepath.Join(dir, "home"),
					"BOTD_LISTEN="+freePort(t), "CODEX_LISTEN="+freePort(t), "SOCKS_LISTEN="+freePort(t))
				return cmd.CombinedOutput()
			}
			out, err := run()
			require.Error(t, err, "botd started with a world-readable token file")
			require.Contains(t, string(out), "chmod 600")
			require.NoError(t, os.Chmod(f, 0o600))
			require.NoError(t, os.Chown(f, 60101, 60101))
			out, err = run()
			require.Error(t, err, "botd started with a token file another user owns")
			require.Contains(t, string(out), "owned by uid 60101")
		}},
		{"?token= on a POST that claims an upgrade is refused", "network", func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://"+rt.d.addr+"/exec?token="+rt.d.token, strings.NewReader(`{"argv":["id"]}`))
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		}},
		{"a viewer link's connection closes at its expiry", "network", func(t *testing.T) {
			status, body := rt.call("POST", "/screens/"+rt.screenID+"/viewer-token", map[string]any{"mode": "view", "ttlSeconds": 2})
			require.Equal(t, http.StatusOK, status, string(body))
			var link struct {
				VNCPath string `json:"vncPath"`
			}
			require.NoError(t, json.Unmarshal(body, &link))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, "ws://"+rt.d.addr+link.VNCPath, &websocket.DialOptions{Subprotocols: []string{"binary"}})
			require.NoError(t, err)
			defer ws.CloseNow()
			for {
				_, _, err := ws.Read(ctx)
				if err != nil {
					require.Equal(t, websocket.StatusCode(4005), websocket.CloseStatus(err), "%v", err)
					return
				}
			}
		}},
		{"a page cannot reach loopback (botd, or any local port) around the proxy", "web page", func(t *testing.T) {
			require.Contains(t, rt.open(t, rt.screenID, rt.page.URL+"/"), "the allowed page", "control: an allowed page loads through the proxy")
			hits, port := loopbackTrap(t)
			rt.open(t, rt.screenID, fmt.Sprintf("http://127.0.0.1:%d/", port))
			rt.open(t, rt.screenID, fmt.Sprintf("http://localhost:%d/", port))
			require.Zero(t, hits.Load(), "a page reached a loopback port")
			text := rt.open(t, rt.screenID, fmt.Sprintf("http://127.0.0.1:%d/healthz", botdPort))
			require.NotContains(t, text, `"ok"`, "a page read botd's /healthz")
		}},
		{"the SOCKS proxy refuses loopback destinations", "network", func(t *testing.T) {
			hits, port := loopbackTrap(t)
			for _, h := range []string{"127.0.0.1", "localhost", "127.8.8.8"} {
				require.NotZero(t, socksConnect(t, rt.socks, h, port), h)
			}
			require.NotZero(t, socksConnect(t, rt.socks, "127.0.0.1", botdPort))
			require.Zero(t, hits.Load())
		}},
		{"DevTools are reachable only through botd's pipe", "bot", func(t *testing.T) {
			pids := pidsOf("chromium", filepath.Join("screens", rt.screenID))
			require.NotEmpty(t, pids, "the screen's Chromium is not running")
			for _, pid := range pids {
				raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				require.NotContains(t, string(raw), "--remote-debugging-port")
				require.False(t, listensOnTCP(t, pid), "chromium %d listens on TCP", pid)
			}
		}},
		{"the file API does not escape the workspace", "bot", func(t *testing.T) {
			code, out := asUser(t, "bot", "ln", "-s", "/etc/shadow", filepath.Join(home, "bot", "shadow"))
			require.Equal(t, 0, code, out)
			for _, p := range []string{"../.botd/cookies.json", "/etc/shadow", "shadow", "../desktop/.Xauthority-0"} {
				status, body := rt.call("GET", "/files?path="+p, nil)
				require.GreaterOrEqual(t, status, 400, "%s: %s", p, body)
				require.NotContains(t, string(body), "root:")
			}
		}},
	}
	rows = append(rows, rt.moreRows()...)
	// Last: they hold botd's listeners full for a while.
	rows = append(rows, rt.limitRows()...)
	for _, row := range rows {
		t.Run(row.position+": "+row.name, row.attack)
	}
}

// screenErr is the error GET /screens shows for screen id.
func (rt *redTeam) screenErr(t testing.TB, id string) string {
	t.Helper()
	_, body := rt.call("GET", "/screens", nil)
	return string(body)
}

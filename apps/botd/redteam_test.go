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
	"net/netip"
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

	"github.com/open-bot/computer/apps/botd/internal/modelproxy"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

const (
	rtDisplayBase  = 500
	rtViewPortBase = 27100
	// rtCookieName is the cookie the allowed page sets.
	rtCookieName = "redteam_jar_probe"
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
		// A persistent cookie: the cookie sync puts it in botd's jar.
		http.SetCookie(w, &http.Cookie{Name: rtCookieName, Value: "1", MaxAge: 3600, Path: "/"})
		fmt.Fprint(w, "<title>allowed</title><p>the allowed page</p>")
	}))
	t.Cleanup(rt.page.Close)

	home := tempHome(t)
	addr := freePort(t)
	rt.socks = freePort(t)
	token := randomKey("redteam-token-")
	d := &daemon{t: t, addr: addr, token: token, home: home, done: make(chan error, 1)}
	d.cmd = exec.Command(botdBin)
	d.cmd.Env = append(os.Environ(),
		"BOTD_TOKEN="+token, "BOTD_HOME="+home, "BOTD_LISTEN="+addr,
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

// screenInfo is a screen as GET /screens lists it.
type screenInfo struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Slot    *int   `json:"slot"`
	Display string `json:"display"`
	Ports   *struct {
		View    int `json:"view"`
		Control int `json:"control"`
	} `json:"ports"`
}

// screens lists botd's screens, and the body they came in.
func (rt *redTeam) screens(t testing.TB) ([]screenInfo, []byte) {
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
	return list.Screens, body
}

func (rt *redTeam) screen(t testing.TB, id string) screenInfo {
	t.Helper()
	list, body := rt.screens(t)
	for _, s := range list {
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

// socksConnect asks botd's SOCKS proxy for host:port, the host sent as a
// name (address type 3), and returns the reply code (0: connected).
func socksConnect(t testing.TB, proxy, host string, port int) byte {
	t.Helper()
	return socksRequest(t, proxy, append([]byte{3, byte(len(host))}, host...), port)
}

// socksConnectIP asks for ip:port with ip sent as an address (type 1 for
// IPv4, type 4 for anything else, an IPv4-mapped IPv6 address included).
func socksConnectIP(t testing.TB, proxy, ip string, port int) byte {
	t.Helper()
	addr, err := netip.ParseAddr(ip)
	require.NoError(t, err)
	if addr.Is4() {
		a := addr.As4()
		return socksRequest(t, proxy, append([]byte{1}, a[:]...), port)
	}
	a := addr.As16()
	return socksRequest(t, proxy, append([]byte{4}, a[:]...), port)
}

// socksRequest sends a CONNECT for dst (address type and address) and port.
func socksRequest(t testing.TB, proxy string, dst []byte, port int) byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(40 * time.Second))
	req := append([]byte{5, 1, 0, 5, 1, 0}, dst...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	_, err = c.Write(req)
	require.NoError(t, err)
	rep := make([]byte, 4)
	_, err = io.ReadFull(c, rep)
	require.NoError(t, err)
	require.Equal(t, []byte{5, 0}, rep[:2], "the SOCKS greeting's answer")
	return rep[3]
}

// trap is a port nothing may reach, listened on at 127.0.0.1, 127.8.8.8
// and [::1] (so 0.0.0.0, 127.1, localhost and ::ffff:127.x reach it too):
// it counts the connections it accepts.
type trap struct {
	port int
	lns  []net.Listener
	hits atomic.Int32
	mu   sync.Mutex
	from map[string]bool // the remote address of every accepted connection
	own  int32           // connections the test itself made (controls, sentinels)
}

var trapHosts = []string{"127.0.0.1", "127.8.8.8", "::1"}

func newTrap(t testing.TB) *trap {
	t.Helper()
	for try := 0; try < 50; try++ {
		tr := &trap{from: map[string]bool{}}
		ok := true
		for _, h := range trapHosts {
			ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(tr.port)))
			if err != nil {
				require.NotZero(t, tr.port, "listen on %s: %v", h, err) // the first listen picks the port
				ok = false
				break
			}
			tr.port = ln.Addr().(*net.TCPAddr).Port
			tr.lns = append(tr.lns, ln)
		}
		if !ok {
			for _, ln := range tr.lns {
				ln.Close()
			}
			continue
		}
		for _, ln := range tr.lns {
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					tr.mu.Lock()
					tr.from[c.RemoteAddr().String()] = true
					tr.mu.Unlock()
					tr.hits.Add(1)
					c.Close()
				}
			}()
		}
		return tr
	}
	t.Fatal("no port free on all of the trap's addresses")
	return nil
}

// dial connects from the test itself to host on the trap's port and waits
// until the trap accepted that very connection.
func (tr *trap) dial(t testing.TB, host string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(tr.port)), 5*time.Second)
	require.NoError(t, err, "control: the test itself reaches the trap at %s", host)
	defer c.Close()
	tr.own++
	me := c.LocalAddr().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr.mu.Lock()
		seen := tr.from[me]
		tr.mu.Unlock()
		if seen {
			return
		}
		require.True(t, time.Now().Before(deadline), "the trap never accepted the test's own connection to %s", host)
		time.Sleep(5 * time.Millisecond)
	}
}

// leaks is how many connections the trap accepted that the test did not
// make. A sentinel connection on every listener first: accept queues are
// FIFO, so once each sentinel is accepted so is every connection made
// before it, and the count is final.
func (tr *trap) leaks(t testing.TB) int {
	t.Helper()
	for _, h := range trapHosts {
		tr.dial(t, h)
	}
	return int(tr.hits.Load() - tr.own)
}

// probeScript tries one connection per stdin line "kind target [cookie]"
// (kind rfb or x11; target host:port, [v6]:port or unix:/path; cookie the
// MIT-MAGIC-COOKIE-1 in hex) and prints one line per attempt: its kind and
// target, then what came back. RFB-BANNER is an RFB server's greeting,
// X11-CONNECTED an X server's accepted connection setup.
const probeScript = `
import socket, struct, sys
for line in sys.stdin.read().split("\n"):
    f = line.split()
    if not f:
        continue
    kind, target = f[0], f[1]
    cookie = bytes.fromhex(f[2]) if len(f) > 2 else b""
    out = kind + " " + target + " "
    try:
        if target.startswith("unix:"):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(3)
            s.connect(target[5:])
        else:
            host, port = target.rsplit(":", 1)
            s = socket.create_connection((host.strip("[]"), int(port)), timeout=3)
    except OSError as e:
        print(out + "no-connection " + type(e).__name__, flush=True)
        continue
    try:
        if kind == "rfb":
            b = s.recv(12)
            print(out + ("RFB-BANNER " if b.startswith(b"RFB 003.00") else "no-banner ") + repr(b), flush=True)
        else:
            name = b"MIT-MAGIC-COOKIE-1" if cookie else b""
            pad = lambda b: b + b"\0" * (-len(b) % 4)
            s.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(cookie)) + pad(name) + pad(cookie))
            b = s.recv(1)
            print(out + ("X11-CONNECTED" if b == b"\x01" else "x11-refused " + repr(b)), flush=True)
    except OSError as e:
        print(out + "no-answer " + type(e).__name__, flush=True)
    s.close()
`

// probe runs probeScript over attempts (as user, or as root when user is
// "") and returns its output lines, one per attempt.
func probe(t testing.TB, user string, attempts []string) []string {
	t.Helper()
	argv := []string{"python3", "-c", probeScript}
	if user != "" {
		argv = append([]string{"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups", "--reset-env", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(strings.Join(attempts, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the probe failed: %s", stderr.String())
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(attempts), "one answer per attempt")
	return lines
}

// xCookie is the MIT-MAGIC-COOKIE-1 in an Xauthority file (read as root),
// in hex. It is a secret: never printed.
func xCookie(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	field := func() []byte {
		require.GreaterOrEqual(t, len(b), 2, "a short Xauthority")
		n := int(binary.BigEndian.Uint16(b))
		require.GreaterOrEqual(t, len(b), 2+n, "a short Xauthority")
		f := b[2 : 2+n]
		b = b[2+n:]
		return f
	}
	require.GreaterOrEqual(t, len(b), 2, "a short Xauthority")
	b = b[2:] // family
	field()   // address
	field()   // display number
	require.Equal(t, "MIT-MAGIC-COOKIE-1", string(field()))
	cookie := field()
	require.Len(t, cookie, 16)
	return hex.EncodeToString(cookie)
}

// runningScreen is a screen with a display.
type runningScreen struct {
	id            string
	display, slot int
}

// runningScreens are the screens with a display.
func (rt *redTeam) runningScreens(t testing.TB) []runningScreen {
	t.Helper()
	list, _ := rt.screens(t)
	var out []runningScreen
	for _, s := range list {
		if s.Slot == nil || s.Display == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(s.Display, ":"))
		require.NoError(t, err, s.Display)
		out = append(out, runningScreen{s.ID, n, *s.Slot})
	}
	return out
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
		{"bot gets no RFB or X connection over TCP (5900-5999, 6000+display)", "bot", func(t *testing.T) {
			screens := rt.runningScreens(t)
			require.NotEmpty(t, screens, "no running screen")
			var attempts, controls []string
			for _, host := range []string{"127.0.0.1", "[::1]"} {
				for port := 5900; port <= 5999; port++ {
					attempts = append(attempts, fmt.Sprintf("rfb %s:%d", host, port))
				}
			}
			for _, s := range screens {
				cookie := xCookie(t, filepath.Join(home, "desktop", fmt.Sprintf(".Xauthority-%d", s.slot)))
				for _, host := range []string{"127.0.0.1", "[::1]"} {
					// With the screen's own cookie (as if bot had it): only
					// the listener is the defence here.
					attempts = append(attempts, fmt.Sprintf("x11 %s:%d %s", host, 6000+s.display, cookie))
				}
				// Controls, as root on the unix sockets: the same probe
				// gets x11vnc's banner and an X connection there.
				controls = append(controls,
					fmt.Sprintf("rfb unix:/run/botd-screens/%d/vnc", s.display),
					fmt.Sprintf("x11 unix:/tmp/.X11-unix/X%d %s", s.display, cookie))
			}
			for _, line := range probe(t, "", controls) {
				require.Regexp(t, `^(rfb \S+ RFB-BANNER|x11 \S+ X11-CONNECTED)`, line, "control: the probe connects over the unix socket as root")
			}
			connected := 0
			for _, line := range probe(t, "bot", attempts) {
				require.NotContains(t, line, "RFB-BANNER", "bot got an RFB greeting over TCP")
				require.NotContains(t, line, "X11-CONNECTED", "bot got an X connection over TCP")
				if !strings.Contains(line, "no-connection") {
					connected++
					t.Logf("something listens (and is no RFB or X server for bot): %s", line)
				}
			}
			t.Logf("%d TCP attempts as bot, %d connected to anything, none to RFB or X", len(attempts), connected)
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
			slot := rt.screen(t, rt.screenID).Slot
			require.NotNil(t, slot)
			xauth := filepath.Join(home, "desktop", fmt.Sprintf(".Xauthority-%d", *slot))
			// The file is there (root reads its cookie), so a refusal below
			// is a refusal, not a wrong path.
			xCookie(t, xauth)
			code, out = asUser(t, "bot", "cat", xauth)
			require.NotEqual(t, 0, code, "bot read the Xauthority")
			require.Contains(t, out, "Permission denied")
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
			squatted := rtViewPortBase + 2*2
			if squat, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(squatted)); err == nil {
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
			require.GreaterOrEqual(t, *in.Slot, 2, "slot 1 (FIFO lock) is skipped")
			// A squatted view port skips no slot: the screen's ports are
			// others then (issue 36 row 6).
			require.NotNil(t, in.Ports)
			require.NotEqual(t, squatted, in.Ports.View, "the screen was given the squatted view port")
			require.NotEqual(t, squatted, in.Ports.Control)
			rt.call("POST", "/screens/rt-fifo/stop", nil)
		}},
		{"the model key is in no bot or desktop process, nor in bot's files", "bot", func(t *testing.T) {
			// Codex itself: a session's app-server, botd's child, as bot.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ac := dialAgent(ctx, t, rt.d)
			defer ac.CloseNow()
			// One Codex once the session's is up: rehearsal 57 saw two for a
			// moment (a process of Codex's own start, or another session's
			// still exiting, on a loaded host).
			var pids []int
			require.Eventually(t, func() bool { pids = codexPids(rt.d); return len(pids) == 1 }, 30*time.Second, 100*time.Millisecond,
				"the session's Codex, alone")
			codexPid := pids[0]
			st, err := os.Stat(fmt.Sprintf("/proc/%d", codexPid))
			require.NoError(t, err)
			require.EqualValues(t, 60101, st.Sys().(*syscall.Stat_t).Uid, "Codex does not run as bot")
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", codexPid))
			require.NoError(t, err)
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", codexPid))
			require.NoError(t, err)
			// Control: this is the environment botd gave Codex (the model
			// proxy's token is in it), not an empty or foreign one. Its
			// value is a secret: never printed.
			hasToken := false
			for _, kv := range strings.Split(string(env), "\x00") {
				if v, ok := strings.CutPrefix(kv, modelproxy.TokenEnv+"="); ok && v != "" {
					hasToken = true
				}
			}
			require.True(t, hasToken, "control: %s is not in Codex's environment (pid %d)", modelproxy.TokenEnv, codexPid)
			require.Contains(t, string(cmdline), "app-server", "control: pid %d is Codex's app-server", codexPid)
			require.False(t, strings.Contains(string(env), rt.key), "the model key is in Codex's environment (pid %d)", codexPid)
			require.False(t, strings.Contains(string(cmdline), rt.key), "the model key is in Codex's command line (pid %d)", codexPid)

			// Every other bot or desktop process, environment and argv.
			procs, _ := filepath.Glob("/proc/[0-9]*")
			checked := 0
			for _, d := range procs {
				st, err := os.Stat(d)
				if err != nil || st.Sys().(*syscall.Stat_t).Uid == 0 {
					continue
				}
				if env, err := os.ReadFile(filepath.Join(d, "environ")); err == nil {
					checked++
					require.False(t, strings.Contains(string(env), rt.key), "the model key is in %s/environ", d)
				}
				if cmd, err := os.ReadFile(filepath.Join(d, "cmdline")); err == nil {
					require.False(t, strings.Contains(string(cmd), rt.key), "the model key is in %s/cmdline", d)
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
			// The jar exists: the allowed page sets a cookie, and the
			// cookie sync writes it into the jar (root reads it there).
			jar := filepath.Join(home, ".botd", "cookies.json")
			rt.open(t, rt.screenID, rt.page.URL+"/")
			deadline := time.Now().Add(60 * time.Second)
			for {
				b, err := os.ReadFile(jar)
				if err == nil && bytes.Contains(b, []byte(rtCookieName)) {
					break
				}
				require.True(t, time.Now().Before(deadline), "the page's cookie never reached the jar (%v)", err)
				time.Sleep(200 * time.Millisecond)
			}
			for _, u := range []string{"bot", "desktop"} {
				code, out := asUser(t, u, "ls", filepath.Join(home, ".botd"))
				require.NotEqual(t, 0, code, "%s listed botd's state: %s", u, out)
				require.Contains(t, out, "Permission denied")
				code, out = asUser(t, u, "cat", jar)
				require.NotEqual(t, 0, code, "%s read the jar", u)
				require.NotContains(t, out, rtCookieName)
				require.Contains(t, out, "Permission denied")
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
					"BOTD_LISTEN="+freePort(t), "SOCKS_LISTEN="+freePort(t))
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
		{"a viewer link works until its expiry, and not after", "network", func(t *testing.T) {
			status, body := rt.call("POST", "/screens/"+rt.screenID+"/viewer-token", map[string]any{"mode": "view", "ttlSeconds": 5})
			require.Equal(t, http.StatusOK, status, string(body))
			var link struct {
				VNCPath   string    `json:"vncPath"`
				ExpiresAt time.Time `json:"expiresAt"`
			}
			require.NoError(t, json.Unmarshal(body, &link))
			require.False(t, link.ExpiresAt.IsZero(), string(body))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Before its expiry the link opens the screen: a whole RFB
			// handshake through it.
			ws, _, err := websocket.Dial(ctx, "ws://"+rt.d.addr+link.VNCPath, &websocket.DialOptions{Subprotocols: []string{"binary"}})
			require.NoError(t, err, "the link did not open the screen before its expiry")
			defer ws.CloseNow()
			nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
			rfbGreet(t, nc)
			// The connection lasts until the expiry, and is closed then.
			_, err = io.Copy(io.Discard, nc)
			closed := time.Now()
			require.Equal(t, websocket.StatusCode(4005), websocket.CloseStatus(err), "%v", err)
			require.False(t, closed.Before(link.ExpiresAt), "closed at %v, before the link's expiry %v", closed, link.ExpiresAt)
			// After its expiry the link opens nothing.
			_, resp, err := websocket.Dial(ctx, "ws://"+rt.d.addr+link.VNCPath, &websocket.DialOptions{Subprotocols: []string{"binary"}})
			require.Error(t, err, "an expired link opened the screen")
			require.NotNil(t, resp, "%v", err)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%v", err)
		}},
		{"a page cannot reach loopback (botd, or any local port) around the proxy", "web page", func(t *testing.T) {
			require.Contains(t, rt.open(t, rt.screenID, rt.page.URL+"/"), "the allowed page", "control: an allowed page loads through the proxy")
			tr := newTrap(t)
			rt.open(t, rt.screenID, fmt.Sprintf("http://127.0.0.1:%d/", tr.port))
			rt.open(t, rt.screenID, fmt.Sprintf("http://localhost:%d/", tr.port))
			require.Zero(t, tr.leaks(t), "a page reached a loopback port")
			text := rt.open(t, rt.screenID, fmt.Sprintf("http://127.0.0.1:%d/healthz", botdPort))
			require.NotContains(t, text, `"ok"`, "a page read botd's /healthz")
		}},
		{"the SOCKS proxy refuses loopback destinations, however spelled", "network", func(t *testing.T) {
			// Control: an allowed loopback page (EGRESS_ALLOW) connects
			// through the proxy, so a refusal below is the policy's.
			pagePort, _ := strconv.Atoi(rt.page.URL[strings.LastIndex(rt.page.URL, ":")+1:])
			require.Zero(t, socksConnectIP(t, rt.socks, "127.0.0.1", pagePort), "control: the allowed page connects through the proxy")
			tr := newTrap(t)
			// Control: the trap answers when dialled directly (Linux sends
			// 0.0.0.0 to 127.0.0.1 and :: to ::1).
			for _, h := range []string{"127.0.0.1", "127.8.8.8", "::1", "0.0.0.0", "::ffff:127.8.8.8", "::", "localhost"} {
				tr.dial(t, h)
			}
			require.Zero(t, tr.leaks(t), "control: the trap counts only the test's own connections")
			// Control: a second botd whose EGRESS_ALLOW opens every range the
			// spellings below land in (the policy off for the trap). Each
			// spelling must reach the trap through it, so its refusal by
			// rt's botd is the policy's, not a resolver's or a parser's.
			openSocks := freePort(t)
			open := startDaemon(t, tempHome(t), randomKey("open-egress-token-"), "SOCKS_LISTEN="+openSocks,
				"EGRESS_ALLOW=0.0.0.0/8,127.0.0.0/8,::1/128,::/128")
			open.waitHealthy(90 * time.Second)
			type attempt struct {
				how  string
				send func(proxy string) byte
			}
			var attempts []attempt
			// Not here, because no botd dials them even with the policy off
			// (the open botd answered 4, host unreachable, and the trap saw
			// nothing), so a refusal would prove nothing: "127.1" (Go's
			// resolver does not read inet_aton's short forms; it asks DNS),
			// "localhost." (not in /etc/hosts with the dot, so DNS too) and
			// bracketed names such as "[::1]" (the dial address
			// "[[::1]]:port" does not split).
			for _, h := range []string{"127.0.0.1", "localhost", "LocalHost", "127.8.8.8", "0.0.0.0", "::1",
				"::ffff:127.8.8.8", "::ffff:7f08:808", "::"} {
				attempts = append(attempts, attempt{"name " + h, func(proxy string) byte { return socksConnect(t, proxy, h, tr.port) }})
			}
			for _, ip := range []string{"127.0.0.1", "127.8.8.8", "0.0.0.0", "::1", "::ffff:127.8.8.8", "::ffff:0.0.0.0", "::"} {
				attempts = append(attempts, attempt{"address " + ip, func(proxy string) byte { return socksConnectIP(t, proxy, ip, tr.port) }})
			}
			reached := 0
			for _, a := range attempts {
				rep := a.send(openSocks)
				require.Zero(t, rep, "control: %s does not connect even with the policy off", a.how)
				reached++
				require.Equal(t, reached, tr.leaks(t), "control: %s, with the policy off, did not reach the trap", a.how)
				rep = a.send(rt.socks)
				require.Equal(t, reached, tr.leaks(t), "%s reached the trap through the proxy (reply %d)", a.how, rep)
				// 5, connection refused: the policy's answer (a name that
				// does not resolve gets 4).
				require.Equal(t, byte(5), rep, "%s: the proxy's reply", a.how)
			}
			require.NotZero(t, socksConnect(t, rt.socks, "127.0.0.1", botdPort))
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

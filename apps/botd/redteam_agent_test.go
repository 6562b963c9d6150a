package main

// Red-team row (issue 25, requirement 1): the bot replaces its Codex. The bot
// user kills the Codex app-server botd started for it and races, in a loop,
// for every port and unix socket path that app-server listened on (and the
// old default 127.0.0.1:4500) with a program that answers like Codex; it
// also goes for the app-server's own stdin/stdout (reopened through /proc,
// taken with pidfd_getfd) and its memory, as the process's owner may. No
// /agent session may ever reach it. Display 540 and view ports 14000+ (no
// screen is started).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// racerScript runs as bot: argv is the kill phase in seconds and botd's pid
// (only botd's own children are attacked, so tests running beside this one
// keep their Codex). It prints one event per line.
const racerScript = `
import base64, ctypes, hashlib, json, os, socket, struct, sys, threading, time
me, kill_for, botd = os.getuid(), float(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)

def out(*a):
    sys.stdout.write(" ".join(str(x) for x in a) + "\n"); sys.stdout.flush()

def codex_pids():
    r = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat("/proc/" + d).st_uid != me:
                continue
            stat = open("/proc/%s/stat" % d).read()
            if stat[stat.rindex(")") + 2:].split()[1] != botd:
                continue
            cmd = open("/proc/%s/cmdline" % d, "rb").read()
        except (OSError, ValueError, IndexError):
            continue
        if b"\0app-server" in cmd:
            r.append(int(d))
    return r

def sockets_of(pid):
    s = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                l = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if l.startswith("socket:["):
                s.add(l[8:-1])
    except OSError:
        pass
    return s

def listeners(inodes):
    ports, paths = set(), set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].split(":")[1], 16))
    try:
        for ln in open("/proc/net/unix").read().splitlines()[1:]:
            f = ln.split()
            if len(f) >= 8 and f[6] in inodes and int(f[3], 16) & 0x10000:
                paths.add(f[7])
    except OSError:
        pass
    return ports, paths

def inject(pid):
    # A pipe reopened through /proc is the same pipe: a line written there
    # reaches botd as Codex's (fd 1) or Codex as the client's (fd 0).
    for fd in ("0", "1"):
        p = "/proc/%d/fd/%s" % (pid, fd)
        try:
            l = os.readlink(p)
        except OSError:
            continue
        if not (l.startswith("pipe:") or l.startswith("socket:")):
            continue
        try:
            f = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            out("reopen-refused", pid, fd, l, e.errno)
            continue
        try:
            os.write(f, b'{"id":1,"result":{"userAgent":"racer/0 (injected)","codexHome":"forged"}}\n')
            out("INJECTED", pid, fd, l)
        except OSError as e:
            out("reopened-but-write-failed", pid, fd, l, e.errno)
        finally:
            os.close(f)

def steal(pid):
    # As the process's owner: take a copy of its stdout/stdin (pidfd_getfd)
    # and write a forged answer there, or open its memory. Both need the
    # right to ptrace it, which a non-dumpable process does not give.
    pfd = libc.syscall(434, pid, 0)  # pidfd_open
    if pfd < 0:
        out("pidfd-refused", pid, ctypes.get_errno())
        return
    try:
        for target in (1, 0):
            fd = libc.syscall(438, pfd, target, 0)  # pidfd_getfd
            if fd < 0:
                out("getfd-refused", pid, target, ctypes.get_errno())
                continue
            try:
                os.write(fd, b'{"id":1,"result":{"userAgent":"racer/0 (stolen)","codexHome":"forged"}}\n')
                out("STOLEN", pid, target)
            except OSError as e:
                out("stolen-but-write-failed", pid, target, e.errno)
            finally:
                os.close(fd)
        try:
            os.close(os.open("/proc/%d/mem" % pid, os.O_RDWR))
            out("MEM-OPENED", pid)
        except OSError as e:
            out("mem-refused", pid, e.errno)
    finally:
        os.close(pfd)

def serve(conn, where):
    out("ACCEPTED", where)
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            ch = conn.recv(4096)
            if not ch:
                return
            data += ch
        head, buf = data.split(b"\r\n\r\n", 1)
        key = ""
        for ln in head.split(b"\r\n"):
            if ln.lower().startswith(b"sec-websocket-key:"):
                key = ln.split(b":", 1)[1].strip().decode()
        acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
        def need(n):
            nonlocal buf
            while len(buf) < n:
                ch = conn.recv(65536)
                if not ch:
                    raise EOFError
                buf += ch
            r, buf = buf[:n], buf[n:]
            return r
        while True:
            b0, b1 = need(2)
            op, n = b0 & 15, b1 & 127
            if n == 126:
                n = struct.unpack(">H", need(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", need(8))[0]
            mask = need(4) if b1 & 128 else b"\0\0\0\0"
            p = bytes(c ^ mask[i % 4] for i, c in enumerate(need(n)))
            if op == 8:
                return
            if op != 1:
                continue
            try:
                m = json.loads(p)
            except ValueError:
                continue
            if "id" in m and "method" in m:
                out("FORGED", m["method"])
                r = json.dumps({"id": m["id"], "result": {"userAgent": "racer/0 (forged)", "codexHome": "forged"}}).encode()
                hdr = bytes([0x81, len(r)]) if len(r) < 126 else bytes([0x81, 126]) + struct.pack(">H", len(r))
                conn.sendall(hdr + r)
    except Exception:
        pass
    finally:
        conn.close()

def acceptor(s, where):
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c, where), daemon=True).start()

def listen(kind, x):
    if kind == "tcp":
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", x))
    else:
        s = socket.socket(socket.AF_UNIX)
        if x.startswith("@"):
            s.bind("\0" + x[1:])
        else:
            try:
                os.unlink(x)
            except OSError:
                pass
            s.bind(x)
    s.listen(64)
    return s

ports, paths, held, kills = {4500}, set(), {}, 0
end = time.time() + kill_for
while True:
    killing = time.time() < end
    if killing:
        for pid in codex_pids():
            p, u = listeners(sockets_of(pid))
            for x in sorted(p - ports):
                out("codex-listens tcp", x)
            for x in sorted(u - paths):
                out("codex-listens unix", x)
            ports |= p
            paths |= u
            inject(pid)
            steal(pid)
            try:
                os.kill(pid, 9)
                kills += 1
                out("killed", pid)
            except OSError:
                pass
    for key in [("tcp", x) for x in ports] + [("unix", x) for x in paths]:
        if key in held:
            continue
        try:
            s = listen(*key)
        except OSError:
            continue
        held[key] = s
        out("holding", key[0], key[1])
        threading.Thread(target=acceptor, args=(s, "%s:%s" % key), daemon=True).start()
    if not killing:
        out("hold", kills)
        break
    time.sleep(0.01)
time.sleep(3600)
`

// racer is the bot's program, running.
type racer struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	events []string
	hold   chan struct{}
	// done is closed once the program has exited and its output is read;
	// then waitErr is how it ended and stderr what it printed there.
	done    chan struct{}
	waitErr error
	stderr  bytes.Buffer
}

// died describes the racer's exit (its status, stderr and last events), for a
// failure message; only valid once done is closed.
func (r *racer) died() string {
	ev := r.lines()
	if len(ev) > 10 {
		ev = ev[len(ev)-10:]
	}
	return fmt.Sprintf("the racer exited (%v); stderr: %q; last events: %q", r.waitErr, r.stderr.String(), ev)
}

func (r *racer) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// startRacer runs racerScript as bot for a kill phase of killFor.
func startRacer(t *testing.T, killFor time.Duration, botdPid int) *racer {
	t.Helper()
	r := &racer{hold: make(chan struct{}), done: make(chan struct{})}
	r.cmd = exec.Command("setpriv", "--reuid=bot", "--regid=bot", "--init-groups", "--reset-env", "--",
		"python3", "-u", "-", strconv.FormatFloat(killFor.Seconds(), 'f', 1, 64), strconv.Itoa(botdPid))
	r.cmd.Dir = "/"
	r.cmd.Stdin = strings.NewReader(racerScript)
	r.cmd.Stderr = &r.stderr
	out, err := r.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, r.cmd.Start())
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); <-r.done })
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(out)
		held := false
		for sc.Scan() {
			r.mu.Lock()
			r.events = append(r.events, sc.Text())
			r.mu.Unlock()
			if !held && strings.HasPrefix(sc.Text(), "hold ") {
				held = true
				close(r.hold)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		// Stdout is at EOF: the program (setpriv execs python3) has exited.
		r.waitErr = r.cmd.Wait()
	}()
	return r
}

// TestRedTeamCodexImpersonation: the bot kills Codex and races for its port
// and paths; every initialize through /agent is answered by the real Codex
// (its userAgent names this client, its codexHome is the managed one) or not
// at all, never by the bot's program.
func TestRedTeamCodexImpersonation(t *testing.T) {
	testenv.RequireTools(t, "setpriv", "python3")
	home := tempHome(t)
	d := startDaemon(t, home, randomKey("redteam-agent-token-"), "DISPLAY_BASE=540", "VIEW_PORT_BASE=14000")
	d.waitHealthy(90 * time.Second)
	codexHome := filepath.Join(home, "bot", ".codex")
	// Every wait below ends by this deadline (or the test's own): the kill
	// phase is 6 s, an attempt at most 30 s, the after phase at most 2 min.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	// attempt is one client: dial /agent, initialize; "" when the real Codex
	// answered, else what happened.
	attempt := func(ctx context.Context, client string) (real bool, what string) {
		c, resp, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent?token="+d.token, nil)
		if err != nil {
			if resp != nil {
				return false, "dial: " + strconv.Itoa(resp.StatusCode)
			}
			return false, "dial: " + err.Error()
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 24)
		res, rpcErr, err := tryInitialize(ctx, c, client)
		switch {
		case err != nil:
			return false, "no answer: " + err.Error()
		case rpcErr != nil:
			return false, "refused"
		}
		ua, _ := res["userAgent"].(string)
		require.NotContains(t, ua, "racer", "an initialize through /agent was answered by the bot's program: %v", res)
		require.Equal(t, codexHome, res["codexHome"], "an answer that is not the managed Codex's: %v", res)
		require.Contains(t, ua, "("+client+"; ", "Codex names its client in userAgent: %q", ua)
		return true, ""
	}

	// Control: before the attack, the real Codex answers.
	real, what := attempt(ctx, "redteam-control")
	require.True(t, real, "control: %s", what)

	r := startRacer(t, 6*time.Second, d.cmd.Process.Pid)
	// During the kill phase: clients keep coming; each is answered by the
	// real Codex or fails (its Codex was killed), never by the racer.
	// The phase ends when the racer says "hold"; if it exits first, or the
	// deadline passes, the test fails at once rather than looping on.
	outcomes := map[string]int{}
	for n := 0; ; n++ {
		select {
		case <-r.hold:
		case <-r.done:
			t.Fatalf("kill phase: %s before it said \"hold\" (outcomes so far: %v)", r.died(), outcomes)
		case <-ctx.Done():
			t.Fatalf("kill phase: the racer did not say \"hold\" in time (%v); outcomes so far: %v; racer: %s", context.Cause(ctx), outcomes, summarize(r.lines()))
		default:
			actx, acancel := context.WithTimeout(ctx, 15*time.Second)
			real, what := attempt(actx, "redteam-"+strconv.Itoa(n))
			acancel()
			if real {
				what = "answered by Codex"
			}
			outcomes[what]++
			continue
		}
		break
	}
	t.Logf("during the kill phase: %v", outcomes)

	// After it: the racer still holds every port and path it found; a run
	// starts as usual and reaches the real Codex.
	actx, acancel := context.WithTimeout(ctx, 2*time.Minute)
	defer acancel()
	for {
		select {
		case <-r.done:
			t.Fatalf("after the kill phase: %s while it should hold its listeners", r.died())
		default:
		}
		tctx, tcancel := context.WithTimeout(actx, 30*time.Second)
		real, what = attempt(tctx, "redteam-after")
		tcancel()
		if real {
			break
		}
		select {
		case <-actx.Done():
			t.Fatalf("no initialize reached Codex after the attack (%v): %s", context.Cause(actx), what)
		case <-r.done:
		case <-time.After(200 * time.Millisecond):
		}
	}
	select {
	case <-r.done:
		t.Fatalf("after the kill phase: %s while it should hold its listeners", r.died())
	default:
	}
	ev := r.lines()
	t.Logf("racer: %s", summarize(ev))
	kills, holds := 0, 0
	for _, e := range ev {
		require.False(t, strings.HasPrefix(e, "ACCEPTED") || strings.HasPrefix(e, "FORGED"), "botd connected to the bot's program: %s", e)
		require.False(t, strings.HasPrefix(e, "INJECTED"), "the bot wrote into Codex's stdio through /proc: %s", e)
		require.False(t, strings.HasPrefix(e, "STOLEN"), "the bot took Codex's stdio (pidfd_getfd) and wrote into it: %s", e)
		require.False(t, strings.HasPrefix(e, "MEM-OPENED"), "the bot opened Codex's memory: %s", e)
		require.False(t, strings.HasPrefix(e, "codex-listens"), "Codex listens where the bot can take over: %s", e)
		if strings.HasPrefix(e, "killed ") {
			kills++
		}
		if strings.HasPrefix(e, "holding ") {
			holds++
		}
	}
	require.Positive(t, kills, "control: the racer killed Codex at least once")
	require.Positive(t, holds, "control: the racer held a listener (the old default port at least)")
}

// summarize counts the racer's events by kind.
func summarize(ev []string) string {
	n := map[string]int{}
	var order []string
	for _, e := range ev {
		k := strings.Fields(e)[0]
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	var b strings.Builder
	for _, k := range order {
		b.WriteString(k + "=" + strconv.Itoa(n[k]) + " ")
	}
	return b.String()
}

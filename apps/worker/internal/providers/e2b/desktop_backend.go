package e2b

// Mode "desktop" (the vendor's stock desktop template, driven by commands as
// E2B's desktop SDK drives it): the sandbox runs no botd; the machine the
// adapter returns is the command-driven desktop machine
// (machines/desktop), and this file is its Backend on envd — processes
// through the Process service (Start with streamed output, SendInput and
// CloseStdin for stdin, SendSignal to kill), files through /files as the
// sandbox's user, and ports through a forwarder per port that adds the
// vendor's routing headers and the traffic token.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process"
)

// desktopUser is the user E2B's desktop template runs everything as.
const desktopUser = "user"

// envdBackend is desktop.Backend on one sandbox's envd.
type envdBackend struct {
	s       *session
	user    string
	screens int
}

var _ desktop.Backend = (*envdBackend)(nil)

// MaxScreens is the provider's configured screen count.
func (b *envdBackend) MaxScreens() int { return b.screens }

func (b *envdBackend) userOf(u string) string {
	if u == "" {
		return b.user
	}
	return u
}

func (b *envdBackend) startRequest(cmd desktop.Cmd, stdin bool) (*connect.Request[process.StartRequest], error) {
	if len(cmd.Argv) == 0 {
		return nil, errors.New("envd backend: empty argv")
	}
	cfg := &process.ProcessConfig{Cmd: cmd.Argv[0], Args: cmd.Argv[1:], Envs: cmd.Env}
	if cmd.Cwd != "" {
		cwd := cmd.Cwd
		cfg.Cwd = &cwd
	}
	req := connect.NewRequest(&process.StartRequest{Process: cfg, Stdin: ptrBool(stdin)})
	req.Header().Set("Authorization", basicUser(b.userOf(cmd.User)))
	return req, nil
}

// capBuf keeps at most max bytes and says whether it dropped any.
type capBuf struct {
	buf     bytes.Buffer
	max     int
	dropped bool
}

func (c *capBuf) write(p []byte) {
	room := c.max - c.buf.Len()
	if room >= len(p) {
		c.buf.Write(p)
		return
	}
	if room > 0 {
		c.buf.Write(p[:room])
	}
	c.dropped = true
}

// stdinChunk is the most one SendInput carries.
const stdinChunk = 32 << 10

// sendInput writes p to the process pid's stdin, in chunks.
func (b *envdBackend) sendInput(ctx context.Context, user string, pid uint32, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), stdinChunk)
		req := connect.NewRequest(&process.SendInputRequest{
			Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
			Input:   &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: p[:n]}},
		})
		req.Header().Set("Authorization", basicUser(user))
		if _, err := b.s.envd.proc.SendInput(ctx, req); err != nil {
			return fmt.Errorf("envd: stdin: %w", err)
		}
		p = p[n:]
	}
	return nil
}

func (b *envdBackend) closeStdin(ctx context.Context, user string, pid uint32) error {
	req := connect.NewRequest(&process.CloseStdinRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
	})
	req.Header().Set("Authorization", basicUser(user))
	if _, err := b.s.envd.proc.CloseStdin(ctx, req); err != nil {
		return fmt.Errorf("envd: close stdin: %w", err)
	}
	return nil
}

func (b *envdBackend) kill(ctx context.Context, user string, pid uint32) error {
	req := connect.NewRequest(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
		Signal:  process.Signal_SIGNAL_SIGKILL,
	})
	req.Header().Set("Authorization", basicUser(user))
	_, err := b.s.envd.proc.SendSignal(ctx, req)
	return err
}

// Exec runs cmd to completion through Process.Start; its stdin, when
// given, goes in through SendInput and ends with CloseStdin.
func (b *envdBackend) Exec(ctx context.Context, cmd desktop.Cmd) (desktop.Result, error) {
	req, err := b.startRequest(cmd, cmd.Stdin != nil)
	if err != nil {
		return desktop.Result{}, err
	}
	user := b.userOf(cmd.User)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.s.envd.proc.Start(sctx, req)
	if err != nil {
		return desktop.Result{}, fmt.Errorf("envd: start %s: %w", cmd.Argv[0], err)
	}
	defer stream.Close()
	max := cmd.MaxOutput
	if max <= 0 {
		max = 1 << 20
	}
	out, errb := &capBuf{max: max}, &capBuf{max: max}
	var (
		code  int
		ended bool
		// feeding: the stdin feeder's end (its error, nil when it fed all).
		feeding chan error
	)
	// Read to the stream's end, not the end event's: output may follow it.
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			if cmd.Stdin != nil && feeding == nil {
				pid := ev.GetStart().GetPid()
				feeding = make(chan error, 1)
				go func() {
					feeding <- b.feed(sctx, user, pid, cmd.Stdin)
				}()
			}
		case ev.GetData() != nil:
			d := ev.GetData()
			if p := d.GetStdout(); len(p) > 0 {
				out.write(p)
			}
			if p := d.GetStderr(); len(p) > 0 {
				errb.write(p)
			}
		case ev.GetEnd() != nil:
			code, ended = int(ev.GetEnd().GetExitCode()), true
		}
	}
	if !ended {
		if ctx.Err() != nil {
			return desktop.Result{}, ctx.Err()
		}
		if err := stream.Err(); err != nil {
			return desktop.Result{}, fmt.Errorf("envd: %s: %w", cmd.Argv[0], err)
		}
		return desktop.Result{}, fmt.Errorf("envd: %s: the stream ended before the process did", cmd.Argv[0])
	}
	return desktop.Result{ExitCode: code, Stdout: out.buf.Bytes(), Stderr: errb.buf.Bytes(), Truncated: out.dropped || errb.dropped}, nil
}

// feed copies r to the process's stdin and closes it.
func (b *envdBackend) feed(ctx context.Context, user string, pid uint32, r io.Reader) error {
	buf := make([]byte, stdinChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := b.sendInput(ctx, user, pid, buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return b.closeStdin(ctx, user, pid)
		}
		if rerr != nil {
			_ = b.closeStdin(ctx, user, pid)
			return rerr
		}
	}
}

// Start starts cmd with stdin open; the process's stdout streams from the
// Start stream, its stdin goes through SendInput. Close (or ctx ending)
// kills it with SIGKILL.
func (b *envdBackend) Start(ctx context.Context, cmd desktop.Cmd) (desktop.Process, error) {
	req, err := b.startRequest(cmd, true)
	if err != nil {
		return nil, err
	}
	user := b.userOf(cmd.User)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := b.s.envd.proc.Start(sctx, req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("envd: start %s: %w", cmd.Argv[0], err)
	}
	var pid uint32
	started := false
	for !started && stream.Receive() {
		ev := stream.Msg().GetEvent()
		if s := ev.GetStart(); s != nil {
			pid, started = s.GetPid(), true
		}
	}
	if !started {
		err := stream.Err()
		_ = stream.Close()
		cancel()
		if err == nil {
			err = errors.New("the stream ended without a start event")
		}
		return nil, fmt.Errorf("envd: start %s: %w", cmd.Argv[0], err)
	}
	pr, pw := io.Pipe()
	p := &envdProc{b: b, user: user, pid: pid, cancel: cancel, stdout: pr, errb: &capBuf{max: 64 << 10}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer stream.Close()
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			switch {
			case ev.GetData() != nil:
				d := ev.GetData()
				if e := d.GetStderr(); len(e) > 0 {
					p.mu.Lock()
					p.errb.write(e)
					p.mu.Unlock()
				}
				if o := d.GetStdout(); len(o) > 0 {
					if _, err := pw.Write(o); err != nil {
						// The reader is gone: keep draining for the end.
						continue
					}
				}
			case ev.GetEnd() != nil:
				p.mu.Lock()
				p.code, p.ended = int(ev.GetEnd().GetExitCode()), true
				p.mu.Unlock()
			}
		}
		p.mu.Lock()
		ended := p.ended
		p.mu.Unlock()
		if ended {
			pw.Close()
			return
		}
		err := stream.Err()
		if err == nil {
			err = errors.New("envd: the stream ended before the process did")
		}
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		pw.CloseWithError(err)
	}()
	p.stop = context.AfterFunc(ctx, func() { _ = p.Close() })
	return p, nil
}

type envdProc struct {
	b      *envdBackend
	user   string
	pid    uint32
	cancel context.CancelFunc
	stdout *io.PipeReader
	done   chan struct{}
	stop   func() bool

	mu     sync.Mutex
	errb   *capBuf
	code   int
	ended  bool
	err    error
	closed bool
}

type envdStdin struct{ p *envdProc }

func (s envdStdin) Write(b []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.p.b.sendInput(ctx, s.p.user, s.p.pid, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (s envdStdin) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.p.b.closeStdin(ctx, s.p.user, s.p.pid)
}

func (p *envdProc) Stdin() io.WriteCloser { return envdStdin{p} }
func (p *envdProc) Stdout() io.Reader     { return p.stdout }

func (p *envdProc) Stderr() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.errb.buf.Bytes()...)
}

// Wait waits for the end event.
func (p *envdProc) Wait() (int, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		return 0, p.err
	}
	return p.code, nil
}

// Close kills a process still running (SIGKILL by pid) and ends the
// stream.
func (p *envdProc) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	if p.stop != nil {
		p.stop()
	}
	select {
	case <-p.done:
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = p.b.kill(ctx, p.user, p.pid)
		cancel()
	}
	p.cancel()
	_ = p.stdout.Close()
	return nil
}

// ReadFile reads path as the sandbox's user through GET /files, at most
// max bytes.
func (b *envdBackend) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	e := b.s.envd
	q := url.Values{"path": {path}, "username": {b.user}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/files?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", basicUser(b.user))
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envd: read %s: %w", path, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("envd: %s: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("envd: read %s: %d %s", path, resp.StatusCode, envdMessage(msg))
	}
	return io.ReadAll(io.LimitReader(resp.Body, max))
}

// WriteFile writes path through POST /files as user (the sandbox's user
// when ""), so the file is user's.
func (b *envdBackend) WriteFile(ctx context.Context, path, user string, data []byte) error {
	return b.s.envd.writeFile(ctx, b.userOf(user), path, data)
}

// PortURL is the in-process forwarder to port in the sandbox: its base
// URL and the client that reaches it (no listener).
func (b *envdBackend) PortURL(ctx context.Context, port int) (string, *http.Client, error) {
	f, err := b.s.portForwarder(port)
	if err != nil {
		return "", nil, err
	}
	return f.URL(), f.Client(), nil
}

// portForwarder is the session's forwarder to port (made once).
func (s *session) portForwarder(port int) (*forwarder, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("e2b provider: port %d out of range", port)
	}
	s.portMu.Lock()
	defer s.portMu.Unlock()
	select {
	case <-s.done:
		return nil, fmt.Errorf("e2b provider: sandbox %s: the session ended (the computer was stopped)", s.id)
	default:
	}
	if f := s.ports[port]; f != nil {
		return f, nil
	}
	target, byHeader, err := sandboxTarget(s.p.o.SandboxURL, "https", s.domain, s.id, port)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	if s.traffic != "" {
		hdr.Set("E2b-Traffic-Access-Token", s.traffic)
	}
	rt := &router{next: s.p.o.Transport, sandboxID: s.id, port: port, byHeader: byHeader, set: hdr}
	f := newForwarder(target, rt, s.explain)
	s.ports[port] = f
	return f, nil
}

// desktopUp brings the sandbox's own display :0 up as E2B's desktop SDK
// does when it makes a sandbox (Xvfb :0, then an XFCE session on it,
// waiting until the panel and desktop are managed), unless :0 answers
// already. It prints when :0 came up (unix nanos), kept in the sandbox:
// the machine's boot time, which a reconnect finds again.
const desktopUp = `set -u
dir="${TMPDIR:-/tmp}/open-bot-desktop/sandbox"
mkdir -p "$dir"
up() { xdpyinfo -display :0 >/dev/null 2>&1; }
if ! up; then
  # Nothing answers on :0: a lock left by the display before a pause is
  # stale (its pid may name another process after the resume).
  rm -f /tmp/.X0-lock /tmp/.X11-unix/X0 2>/dev/null
  setsid Xvfb :0 -ac -screen 0 "$1x$2x24" -retro -dpi 96 -nolisten tcp >"$dir/xvfb.log" 2>&1 </dev/null &
  i=0; while ! up; do i=$((i+1)); [ $i -gt 150 ] && { echo "Xvfb :0 did not come up: $(tail -n 3 "$dir/xvfb.log")" >&2; exit 1; }; sleep 0.1; done
  date -u +%s%N >"$dir/booted"
  DISPLAY=:0 setsid startxfce4 >"$dir/xfce.log" 2>&1 </dev/null &
  i=0; while [ "$(DISPLAY=:0 xprop -root _NET_CLIENT_LIST 2>/dev/null | tr ',' '\n' | grep -c 0x)" -lt 2 ]; do i=$((i+1)); [ $i -gt 300 ] && break; sleep 0.1; done
fi
cat "$dir/booted" 2>/dev/null || true`

// desktopWidth and desktopHeight are display :0's geometry (the desktop
// machine's default, botd's).
const desktopWidth, desktopHeight = 1280, 800

// ReconnectDesktop connects to a desktop sandbox (resuming it when
// paused), brings its display :0 up when it is not, and returns the
// command-driven desktop machine on it (the same one while this provider's
// session with the sandbox lasts). ErrNotFound when the sandbox is gone.
func (p *Provider) ReconnectDesktop(ctx context.Context, ref string) (*desktop.Machine, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if !Desktop(r.Template) {
		return nil, fmt.Errorf("e2b provider: sandbox %s runs template %q, not the desktop", r.SandboxID, r.Template)
	}
	sb, resumed, err := p.api.connect(ctx, r.SandboxID, p.o.Timeout)
	if err != nil {
		return nil, err
	}
	if resumed {
		p.log.Info().Str("sandbox", r.SandboxID).Msg("resumed a paused sandbox")
	}
	sess, err := p.session(sb)
	if err != nil {
		return nil, err
	}
	defer sess.hold()()
	sess.portMu.Lock()
	m := sess.desk
	sess.portMu.Unlock()
	if m != nil {
		sess.fwd.touch()
		return m, nil
	}
	b := &envdBackend{s: sess, user: desktopUser, screens: p.o.MaxScreens}
	uctx, cancel := context.WithTimeout(ctx, p.o.ReadyTimeout)
	defer cancel()
	res, err := b.Exec(uctx, desktop.Cmd{Argv: []string{"sh", "-c", desktopUp, "sh", itoa(desktopWidth), itoa(desktopHeight)}, MaxOutput: 4 << 10})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, tail(res.Stderr))
	}
	if err != nil {
		return nil, fmt.Errorf("e2b provider: sandbox %s: start display :0: %w", r.SandboxID, err)
	}
	booted := time.Now()
	if n, perr := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64); perr == nil && n > 0 {
		booted = time.Unix(0, n)
	}
	m, err = desktop.New(desktop.Options{Backend: b, User: desktopUser, Width: desktopWidth, Height: desktopHeight,
		MaxScreens: p.o.MaxScreens, BootedAt: booted, HeldStream: !p.o.NoHeldStream, Log: p.log})
	if err != nil {
		return nil, err
	}
	sess.portMu.Lock()
	if sess.desk != nil {
		// Another reconnect made one first: keep one machine per session.
		other := sess.desk
		sess.portMu.Unlock()
		_ = m.Close()
		return other, nil
	}
	sess.desk = m
	sess.portMu.Unlock()
	sess.fwd.touch()
	if err := p.api.setTimeout(ctx, r.SandboxID, p.o.Timeout); err != nil {
		return nil, err
	}
	p.log.Info().Str("sandbox", r.SandboxID).Msg("desktop machine ready")
	return m, nil
}

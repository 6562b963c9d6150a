package daytona

// Mode "desktop" (the vendor's stock computer-use desktop): the sandbox runs
// no botd; the machine the adapter returns is the command-driven desktop
// machine (machines/desktop) on this Backend over the sandbox's toolbox:
//
//   - display :0 is the vendor's own computer-use desktop: brought up with
//     POST /computeruse/start, its geometry from /computeruse/display/info,
//     its screenshots from /computeruse/screenshot/compressed (JPEG) and its
//     input through /computeruse/mouse/… and /computeruse/keyboard/…
//     (desktop.ScreenAPI); more screens (:1, :2, …) are started by the
//     machine through commands;
//   - a command that runs to completion goes through POST /process/execute,
//     wrapped so its stdout and stderr come back apart and byte for byte
//     (base64), its stdin uploaded first as a file;
//   - a long-lived process (the agent, a workspace archive) runs in a
//     session (POST /process/session, exec with runAsync): its stdin goes
//     in through …/command/{id}/input and its stdout comes out of
//     …/command/{id}/logs, both hex-encoded lines so binary survives the
//     toolbox's strings (perl, in every Debian-based image, does the
//     encoding without buffering);
//   - files through /files/upload and /files/download;
//   - the machine's noVNC ports through preview-url and its token header,
//     one local forwarder per port (the worker's capability proxy is in
//     front of them, as for botd).
//
// Every toolbox call counts as use of the computer (the refresher keeps
// auto-stop away while the computer is in use), as do the forwarders'
// requests and open viewer connections.

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/base64"
	"encoding/hex"
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

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/pkg/shared"
)

// DesktopSnapshot is the vendor's stock computer-use desktop.
const DesktopSnapshot = "desktop"

// Desktop reports whether snapshot is the command-driven mode.
func Desktop(snapshot string) bool { return snapshot == DesktopSnapshot }

// The machine's own noVNC and x11vnc ports start above the computer-use
// stack's (noVNC 6080, x11vnc 5901), which display :0 keeps running.
const (
	desktopViewPortBase = 6082
	desktopRFBPortBase  = 5910
)

// call is one JSON exchange with the toolbox (body and out may be nil).
func (t *toolbox) call(ctx context.Context, op, method, path string, body, out any) error {
	defer t.hold()()
	_, err := t.a.do(ctx, request{op: op, method: method, url: t.base + path, json: body, out: out,
		idempotent: method == http.MethodGet})
	return err
}

// toolboxBackend is desktop.Backend (and desktop.ScreenAPI) on one
// sandbox's toolbox.
type toolboxBackend struct {
	s       *session
	user    string
	home    string
	screens int
}

var (
	_ desktop.Backend   = (*toolboxBackend)(nil)
	_ desktop.ScreenAPI = (*toolboxBackend)(nil)
)

func (b *toolboxBackend) MaxScreens() int { return b.screens }

// execTimeout is what process/execute is given: ctx's deadline, or an hour.
func execTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Second)
	}
	return time.Hour
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = cryptorand.Read(b)
	return hex.EncodeToString(b)
}

// execWrapper runs "$@" (after the stdin file $1 and the output cap $2)
// with its stdout and stderr in files, then prints a marker line, the exit
// code and both outputs base64-encoded: process/execute answers stdout and
// stderr combined, as text.
const execWrapper = `in="$1"; max="$2"; shift 2
d=$(mktemp -d "${TMPDIR:-/tmp}/open-bot-exec.XXXXXX") || exit 97
if [ -n "$in" ]; then "$@" >"$d/o" 2>"$d/e" <"$in"; c=$?; rm -f -- "$in"; else "$@" >"$d/o" 2>"$d/e" </dev/null; c=$?; fi
t=0; [ "$(wc -c <"$d/o")" -gt "$max" ] && t=1; [ "$(wc -c <"$d/e")" -gt "$max" ] && t=1
printf '\n@@open-bot-exec %s %s\n' "$c" "$t"
head -c "$max" "$d/o" | base64 | tr -d '\n'; echo
head -c "$max" "$d/e" | base64 | tr -d '\n'; echo
rm -rf -- "$d"`

const execMarker = "\n@@open-bot-exec "

// Exec runs cmd to completion through process/execute.
func (b *toolboxBackend) Exec(ctx context.Context, cmd desktop.Cmd) (desktop.Result, error) {
	if len(cmd.Argv) == 0 {
		return desktop.Result{}, errors.New("toolbox backend: empty argv")
	}
	max := cmd.MaxOutput
	if max <= 0 {
		max = 1 << 20
	}
	in := ""
	if cmd.Stdin != nil {
		data, err := io.ReadAll(cmd.Stdin)
		if err != nil {
			return desktop.Result{}, err
		}
		in = "/tmp/open-bot-stdin-" + randHex(8)
		if err := b.s.tb.upload(ctx, in, data); err != nil {
			return desktop.Result{}, fmt.Errorf("toolbox: stdin of %s: %w", cmd.Argv[0], err)
		}
	}
	words := []string{"sh", "-c", execWrapper, "sh", in, strconv.Itoa(max)}
	words = append(words, cmd.Argv...)
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shQuote(w)
	}
	body := map[string]any{"command": strings.Join(quoted, " "), "timeout": int(max64(execTimeout(ctx)/time.Second, 1))}
	if len(cmd.Env) > 0 {
		body["envs"] = cmd.Env
	}
	cwd := cmd.Cwd
	if cwd == "" {
		cwd = b.home
	}
	if cwd != "" {
		body["cwd"] = cwd
	}
	var r ExecResult
	if err := b.s.tb.call(ctx, "execute "+cmd.Argv[0], http.MethodPost, "/process/execute", body, &r); err != nil {
		if ctx.Err() != nil {
			return desktop.Result{}, ctx.Err()
		}
		return desktop.Result{}, err
	}
	return parseExec(r)
}

func max64(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// parseExec reads execWrapper's answer.
func parseExec(r ExecResult) (desktop.Result, error) {
	i := strings.LastIndex(r.Result, execMarker)
	if i < 0 {
		return desktop.Result{}, fmt.Errorf("toolbox: the command's wrapper did not finish (exit %d): %s", r.ExitCode, tail(r.Result))
	}
	lines := strings.SplitN(r.Result[i+len(execMarker):], "\n", 4)
	if len(lines) < 3 {
		return desktop.Result{}, errors.New("toolbox: a truncated answer from the command's wrapper")
	}
	var code, trunc int
	if _, err := fmt.Sscanf(lines[0], "%d %d", &code, &trunc); err != nil {
		return desktop.Result{}, fmt.Errorf("toolbox: the command's wrapper: %q", lines[0])
	}
	out, err1 := base64.StdEncoding.DecodeString(strings.TrimSpace(lines[1]))
	errb, err2 := base64.StdEncoding.DecodeString(strings.TrimSpace(lines[2]))
	if err := errors.Join(err1, err2); err != nil {
		return desktop.Result{}, fmt.Errorf("toolbox: the command's output: %w", err)
	}
	return desktop.Result{ExitCode: code, Stdout: out, Stderr: errb, Truncated: trunc != 0}, nil
}

// startWrapper runs "$@" (after its directory $1) in a session: stdin from
// hex lines (a line "." ends it), stdout as hex lines, the exit code kept
// in a file the last line prints.
const startWrapper = `cd -- "$1" 2>/dev/null || cd; shift
d=$(mktemp -d "${TMPDIR:-/tmp}/open-bot-proc.XXXXXX") || exit 97
perl -e '$|=1; binmode STDOUT; while (defined(my $l = <STDIN>)) { chomp $l; last if $l eq "."; print pack("H*", $l) }' |
{ env "$@"; echo $? >"$d/c"; } |
perl -e '$|=1; binmode STDIN; while (sysread(STDIN, my $b, 65536)) { print unpack("H*", $b), "\n" }'
c=$(cat "$d/c" 2>/dev/null || echo 127); rm -rf -- "$d"; exit "$c"`

// Start runs cmd in a session of its own (see startWrapper). Close, or
// ctx ending, deletes the session, which ends the process.
func (b *toolboxBackend) Start(ctx context.Context, cmd desktop.Cmd) (desktop.Process, error) {
	if len(cmd.Argv) == 0 {
		return nil, errors.New("toolbox backend: empty argv")
	}
	cwd := cmd.Cwd
	if cwd == "" {
		cwd = b.home
	}
	words := []string{"sh", "-c", startWrapper, "sh", cwd}
	for k, v := range cmd.Env {
		words = append(words, k+"="+v)
	}
	words = append(words, cmd.Argv...)
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shQuote(w)
	}
	sid := "open-bot-" + randHex(8)
	if err := b.s.tb.call(ctx, "create session", http.MethodPost, "/process/session", map[string]string{"sessionId": sid}, nil); err != nil {
		return nil, fmt.Errorf("toolbox: start %s: %w", cmd.Argv[0], err)
	}
	var ex struct {
		CmdID string `json:"cmdId"`
	}
	if err := b.s.tb.call(ctx, "session exec", http.MethodPost, "/process/session/"+url.PathEscape(sid)+"/exec",
		map[string]any{"command": strings.Join(quoted, " "), "runAsync": true}, &ex); err != nil || ex.CmdID == "" {
		b.deleteSession(sid)
		if err == nil {
			err = errors.New("the answer names no command")
		}
		return nil, fmt.Errorf("toolbox: start %s: %w", cmd.Argv[0], err)
	}
	pr, pw := io.Pipe()
	p := &sessionProc{b: b, sid: sid, cid: ex.CmdID, stdout: pr, done: make(chan struct{})}
	go p.pump(pw)
	p.stop = context.AfterFunc(ctx, func() { _ = p.Close() })
	return p, nil
}

func (b *toolboxBackend) deleteSession(sid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = b.s.tb.call(ctx, "delete session", http.MethodDelete, "/process/session/"+url.PathEscape(sid), nil, nil)
}

// sessionProc is a process started in a session.
type sessionProc struct {
	b        *toolboxBackend
	sid, cid string
	stdout   *io.PipeReader
	done     chan struct{}
	stop     func() bool

	inMu sync.Mutex // one input at a time, in order

	mu     sync.Mutex
	stderr string
	code   int
	ended  bool
	err    error
	closed bool
}

func (p *sessionProc) path(rest string) string {
	return "/process/session/" + url.PathEscape(p.sid) + "/command/" + url.PathEscape(p.cid) + rest
}

// pump polls the command's logs, passing new stdout on, until the command
// has an exit code (then once more, for what it wrote last).
func (p *sessionProc) pump(pw *io.PipeWriter) {
	defer close(p.done)
	ctx := context.Background()
	used := 0 // hex characters of stdout passed on
	wait := 20 * time.Millisecond
	fail := func(err error) {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		pw.CloseWithError(err)
	}
	for {
		var cmd struct {
			ExitCode *int `json:"exitCode"`
		}
		cerr := p.b.s.tb.call(ctx, "session command", http.MethodGet, p.path(""), nil, &cmd)
		var logs struct {
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
		}
		lerr := p.b.s.tb.call(ctx, "session command logs", http.MethodGet, p.path("/logs"), nil, &logs)
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			fail(errors.New("toolbox: the process was closed"))
			return
		}
		if err := errors.Join(cerr, lerr); err != nil {
			fail(fmt.Errorf("toolbox: follow the process: %w", err))
			return
		}
		p.mu.Lock()
		p.stderr = logs.Stderr
		p.mu.Unlock()
		fresh := false
		if len(logs.Stdout) > used {
			chunk := logs.Stdout[used:]
			if j := strings.LastIndexByte(chunk, '\n'); j >= 0 {
				chunk = chunk[:j+1]
				used += len(chunk)
				for _, l := range strings.Split(strings.TrimRight(chunk, "\n"), "\n") {
					data, err := hex.DecodeString(strings.TrimSpace(l))
					if err != nil {
						fail(fmt.Errorf("toolbox: the process's output: %w", err))
						return
					}
					if _, err := pw.Write(data); err != nil {
						// The reader is gone: keep following for the end.
						continue
					}
				}
				fresh = true
			}
		}
		if cmd.ExitCode != nil {
			p.mu.Lock()
			p.code, p.ended = *cmd.ExitCode, true
			p.mu.Unlock()
			if len(logs.Stdout) > used && !fresh {
				// The exit code came between the two reads: once more.
				continue
			}
			pw.Close()
			p.b.deleteSession(p.sid)
			return
		}
		if fresh {
			wait = 20 * time.Millisecond
		} else {
			wait = min(2*wait, 250*time.Millisecond)
		}
		time.Sleep(wait)
	}
}

// input sends text to the command's stdin.
func (p *sessionProc) input(data string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.b.s.tb.call(ctx, "session input", http.MethodPost, p.path("/input"), map[string]string{"data": data}, nil)
}

type sessionStdin struct{ p *sessionProc }

// stdinChunk is the most one input carries (bytes before hex encoding).
const stdinChunk = 32 << 10

func (s sessionStdin) Write(b []byte) (int, error) {
	s.p.inMu.Lock()
	defer s.p.inMu.Unlock()
	n := 0
	for n < len(b) {
		k := min(len(b)-n, stdinChunk)
		if err := s.p.input(hex.EncodeToString(b[n:n+k]) + "\n"); err != nil {
			return n, fmt.Errorf("toolbox: stdin: %w", err)
		}
		n += k
	}
	return n, nil
}

func (s sessionStdin) Close() error {
	s.p.inMu.Lock()
	defer s.p.inMu.Unlock()
	return s.p.input(".\n")
}

func (p *sessionProc) Stdin() io.WriteCloser { return sessionStdin{p} }
func (p *sessionProc) Stdout() io.Reader     { return p.stdout }

func (p *sessionProc) Stderr() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stderr
	if len(s) > 64<<10 {
		s = s[len(s)-64<<10:]
	}
	return []byte(s)
}

func (p *sessionProc) Wait() (int, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		return 0, p.err
	}
	return p.code, nil
}

// Close deletes the session (ending a process still running).
func (p *sessionProc) Close() error {
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
		p.b.deleteSession(p.sid)
	}
	_ = p.stdout.Close()
	return nil
}

// ReadFile reads path through /files/download, at most max bytes.
func (b *toolboxBackend) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	data, err := b.s.tb.download(ctx, path, max)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("toolbox: %s: %w", path, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		data = data[:max]
	}
	return data, nil
}

// WriteFile writes path through /files/upload (the toolbox writes as the
// sandbox's user, which every command of this backend runs as).
func (b *toolboxBackend) WriteFile(ctx context.Context, path, _ string, data []byte) error {
	return b.s.tb.upload(ctx, path, data)
}

// PortURL is the in-process forwarder to port's preview URL: its base URL
// and the client that reaches it (no listener).
func (b *toolboxBackend) PortURL(ctx context.Context, port int) (string, *http.Client, error) {
	f, err := b.s.portForwarder(ctx, port)
	if err != nil {
		return "", nil, err
	}
	return f.URL(), f.Client(), nil
}

// ---- display :0 through /computeruse ----

// Screenshot is /computeruse/screenshot/compressed as a quality-72 JPEG
// (botd's quality), the pointer drawn in.
func (b *toolboxBackend) Screenshot(ctx context.Context) ([]byte, shared.Point, error) {
	var r struct {
		Screenshot     string `json:"screenshot"`
		CursorPosition struct {
			X int `json:"x"`
			Y int `json:"y"`
		} `json:"cursorPosition"`
	}
	q := url.Values{"format": {"jpeg"}, "quality": {"72"}, "showCursor": {"true"}}
	if err := b.s.tb.call(ctx, "computer-use screenshot", http.MethodGet, "/computeruse/screenshot/compressed?"+q.Encode(), nil, &r); err != nil {
		return nil, shared.Point{}, err
	}
	img, err := base64.StdEncoding.DecodeString(r.Screenshot)
	if err != nil {
		return nil, shared.Point{}, fmt.Errorf("toolbox: the screenshot is not base64: %w", err)
	}
	return img, shared.Point{X: r.CursorPosition.X, Y: r.CursorPosition.Y}, nil
}

// Input performs a through the computer-use routes; a drag along more
// than two points, a horizontal scroll and a key the API names no way are
// left to xdotool.
func (b *toolboxBackend) Input(ctx context.Context, a shared.Action) (bool, error) {
	post := func(op, path string, body any) (bool, error) {
		return true, b.s.tb.call(ctx, op, http.MethodPost, path, body, nil)
	}
	switch a.Type {
	case shared.ActionMove:
		return post("computer-use move", "/computeruse/mouse/move", map[string]int{"x": *a.X, "y": *a.Y})
	case shared.ActionClick, shared.ActionDoubleClick:
		button := a.Button
		if button == "" || a.Type == shared.ActionDoubleClick {
			button = "left"
		}
		return post("computer-use click", "/computeruse/mouse/click",
			map[string]any{"x": *a.X, "y": *a.Y, "button": button, "double": a.Type == shared.ActionDoubleClick})
	case shared.ActionDrag:
		if len(a.Path) != 2 {
			return false, nil
		}
		return post("computer-use drag", "/computeruse/mouse/drag", map[string]any{
			"startX": a.Path[0].X, "startY": a.Path[0].Y, "endX": a.Path[1].X, "endY": a.Path[1].Y, "button": "left"})
	case shared.ActionScroll:
		if a.ScrollX != nil && *a.ScrollX != 0 {
			return false, nil
		}
		dy := 0
		if a.ScrollY != nil {
			dy = *a.ScrollY
		}
		dir, n := "down", wheelClicks(dy)
		if dy < 0 {
			dir = "up"
		}
		if n == 0 {
			return post("computer-use move", "/computeruse/mouse/move", map[string]int{"x": *a.X, "y": *a.Y})
		}
		return post("computer-use scroll", "/computeruse/mouse/scroll", map[string]any{"x": *a.X, "y": *a.Y, "direction": dir, "amount": n})
	case shared.ActionType:
		return post("computer-use type", "/computeruse/keyboard/type", map[string]any{"text": *a.Text, "delay": 8})
	case shared.ActionKeypress:
		names := make([]string, 0, len(a.Keys))
		for _, k := range a.Keys {
			n, ok := cuKey(k)
			if !ok {
				return false, nil
			}
			names = append(names, n)
		}
		if len(names) == 1 {
			return post("computer-use key", "/computeruse/keyboard/key", map[string]any{"key": names[0]})
		}
		return post("computer-use hotkey", "/computeruse/keyboard/hotkey", map[string]string{"keys": strings.Join(names, "+")})
	}
	return false, nil
}

// wheelClicks is how many wheel clicks px pixels are (the machine's 120).
func wheelClicks(px int) int {
	if px == 0 {
		return 0
	}
	if px < 0 {
		px = -px
	}
	return max(1, (px+60)/120)
}

// cuKeys are the computer-use API's names of the X keysyms KeyName gives
// (its daemon's key names: robotgo's).
var cuKeys = map[string]string{
	"Control_L": "ctrl", "Shift_L": "shift", "Alt_L": "alt", "Super_L": "cmd",
	"Return": "enter", "Tab": "tab", "Escape": "esc", "BackSpace": "backspace", "Delete": "delete",
	"Insert": "insert", "space": "space", "Up": "up", "Down": "down", "Left": "left", "Right": "right",
	"Prior": "pageup", "Next": "pagedown", "Home": "home", "End": "end", "Caps_Lock": "capslock",
}

func cuKey(k string) (string, bool) {
	ks, ok := shared.KeyName(k)
	if !ok {
		return "", false
	}
	if n, ok := cuKeys[ks]; ok {
		return n, true
	}
	if len(ks) >= 2 && ks[0] == 'F' {
		return strings.ToLower(ks), true
	}
	if len(ks) == 1 && (ks[0] >= 'a' && ks[0] <= 'z' || ks[0] >= 'A' && ks[0] <= 'Z' || ks[0] >= '0' && ks[0] <= '9') {
		return strings.ToLower(ks), true
	}
	return "", false
}

// ---- the session's ports and the desktop ----

// portForwarder is the session's forwarder to port's preview URL (made
// once per session).
func (s *session) portForwarder(ctx context.Context, port int) (*forwarder, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("daytona provider: port %d out of range", port)
	}
	s.portMu.Lock()
	f := s.ports[port]
	s.portMu.Unlock()
	if f != nil {
		return f, nil
	}
	pv, err := s.p.api.preview(ctx, s.id, port)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(pv.URL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") {
		return nil, fmt.Errorf("daytona: sandbox %s: preview URL for port %d is not http(s)", s.id, port)
	}
	nf := newForwarder(target, &previewHeaders{next: s.p.o.Transport, token: pv.Token}, s.explain)
	s.portMu.Lock()
	defer s.portMu.Unlock()
	select {
	case <-s.done:
		nf.close()
		return nil, fmt.Errorf("daytona provider: sandbox %s: the session ended (the computer was stopped)", s.id)
	default:
	}
	if f := s.ports[port]; f != nil {
		nf.close()
		return f, nil
	}
	s.ports[port] = nf
	return nf, nil
}

// ReconnectDesktop starts the sandbox when it is not running, brings the
// vendor's computer-use desktop (display :0) up and returns the
// command-driven desktop machine on it (the same one while this provider's
// session with the sandbox lasts). ErrNotFound when the sandbox is gone.
func (p *Provider) ReconnectDesktop(ctx context.Context, ref string) (*desktop.Machine, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if !Desktop(r.Snapshot) {
		return nil, fmt.Errorf("daytona provider: sandbox %s runs snapshot %q, not the desktop", r.SandboxID, r.Snapshot)
	}
	sb, err := p.started(ctx, r.SandboxID)
	if err != nil {
		return nil, err
	}
	sess, err := p.session(ctx, sb)
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
	uctx, cancel := context.WithTimeout(ctx, p.o.ReadyTimeout)
	defer cancel()
	fail := func(what string, err error) error {
		return fmt.Errorf("daytona provider: sandbox %s: %s: %w", r.SandboxID, what, err)
	}
	if err := sess.tb.call(uctx, "computer-use start", http.MethodPost, "/computeruse/start", nil, nil); err != nil {
		return nil, fail("start computer use", err)
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := sess.tb.call(uctx, "computer-use status", http.MethodGet, "/computeruse/status", nil, &st); err != nil {
		return nil, fail("computer-use status", err)
	}
	if st.Status != "active" {
		return nil, fail("computer use", fmt.Errorf("its status is %q after start", st.Status))
	}
	var info struct {
		Displays []struct {
			Width  int `json:"width"`
			Height int `json:"height"`
		} `json:"displays"`
	}
	if err := sess.tb.call(uctx, "computer-use display info", http.MethodGet, "/computeruse/display/info", nil, &info); err != nil {
		return nil, fail("display info", err)
	}
	if len(info.Displays) == 0 || info.Displays[0].Width <= 0 || info.Displays[0].Height <= 0 {
		return nil, fail("display info", errors.New("no display"))
	}
	var home struct {
		Dir string `json:"dir"`
	}
	if err := sess.tb.call(uctx, "user home dir", http.MethodGet, "/user-home-dir", nil, &home); err != nil {
		return nil, fail("home directory", err)
	}
	if home.Dir == "" || !strings.HasPrefix(home.Dir, "/") {
		return nil, fail("home directory", fmt.Errorf("%q is not absolute", home.Dir))
	}
	user := sb.User
	if user == "" {
		user = "root"
	}
	b := &toolboxBackend{s: sess, user: user, home: home.Dir, screens: p.o.MaxScreens}
	// When display :0 came up: its socket's time (kept on the disk, so a
	// reconnect finds the same boot; a start after a stop a new one).
	booted := time.Now()
	if res, err := b.Exec(uctx, desktop.Cmd{Argv: []string{"stat", "-c", "%Y", "/tmp/.X11-unix/X0"}, MaxOutput: 64}); err == nil && res.ExitCode == 0 {
		if n, perr := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64); perr == nil && n > 0 {
			booted = time.Unix(n, 0)
		}
	}
	w, h := info.Displays[0].Width, info.Displays[0].Height
	m, err = desktop.New(desktop.Options{Backend: b, User: user, Home: home.Dir, Width: w, Height: h,
		MaxScreens: p.o.MaxScreens, ViewPortBase: desktopViewPortBase, RFBPortBase: desktopRFBPortBase,
		BootedAt: booted, HeldStream: !p.o.NoHeldStream, Log: p.log})
	if err != nil {
		return nil, err
	}
	sess.portMu.Lock()
	if sess.desk != nil {
		other := sess.desk
		sess.portMu.Unlock()
		_ = m.Close()
		return other, nil
	}
	sess.desk = m
	sess.portMu.Unlock()
	sess.fwd.touch()
	if err := p.api.touch(ctx, r.SandboxID); err != nil {
		return nil, err
	}
	p.log.Info().Str("sandbox", r.SandboxID).Msg("desktop machine ready")
	return m, nil
}

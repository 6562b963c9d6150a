package box

// The desktop machine's Backend over Box's commands: Box has one shell
// command call (≤ 60 s, its output as text) and nothing else, so
//   - a command runs detached in the box (setsid, its output to files), and
//     the call that started it waits up to waitWindow for it; a longer one
//     is polled with further calls, each waiting up to waitWindow again;
//     its output comes back base64-encoded (binary screenshots survive the
//     API's text fields);
//   - standard input is written to a file (Exec) or a FIFO (Start) by the
//     shell's builtin printf piped into base64 -d, so its bytes (the model
//     key, for one) are in no process's argument list;
//   - files move base64-encoded in chunks;
//   - the box's desktop page (?vnc=1) is the only port the worker reaches:
//     the control port of screen 0 is a local forwarder to it.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
)

const (
	// waitWindow is how long one call waits for a detached command by
	// default (the call's own limit is 60 s; Options.CommandWait).
	waitWindow = 40
	// maxOut is the most of a stream one answer carries (base64: 4/3 of
	// it, within the emulator's 16 MiB).
	maxOut = 10 << 20
	// readChunk and writeChunk are the file chunks (raw bytes).
	readChunk  = 4 << 20
	writeChunk = 384 << 10
	// stdinChunk is what one stdin write carries.
	stdinChunk = 256 << 10
)

// cmdBackend is desktop.Backend on one box.
type cmdBackend struct {
	s    *session
	user string
}

var _ desktop.Backend = (*cmdBackend)(nil)

// MaxScreens: Box has one desktop per box.
func (b *cmdBackend) MaxScreens() int { return 1 }

// q quotes s for sh.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// run sends one command, as activity; the box's answer errors keep their
// type (ErrNotRunning, ErrNotFound).
func (b *cmdBackend) run(ctx context.Context, script string, timeout int) (CommandResult, error) {
	b.s.act.Used()
	r, err := b.s.p.api.command(ctx, b.s.id, script, "", timeout)
	if err != nil {
		return r, b.s.explainErr(err)
	}
	if r.TimedOut {
		return r, fmt.Errorf("box: box %s: a command ran past its %d s limit", b.s.id, timeout)
	}
	return r, nil
}

func (b *cmdBackend) checkUser(u string) error {
	if u != "" && u != b.user {
		return fmt.Errorf("box: commands run as the box's user %s only, not %s", b.user, u)
	}
	return nil
}

// words is the command line of cmd (env and argv, quoted).
func words(cmd desktop.Cmd) string {
	var w []string
	if len(cmd.Env) > 0 {
		w = append(w, "env", "--")
		keys := make([]string, 0, len(cmd.Env))
		for k := range cmd.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			w = append(w, k+"="+cmd.Env[k])
		}
	}
	w = append(w, cmd.Argv...)
	for i := range w {
		w[i] = q(w[i])
	}
	return strings.Join(w, " ")
}

// launch is the script part that starts cmd detached in dir $d, its stdin
// from "$d/in", its output in out and err, its exit code in code (written
// last). $d/pid is its process group.
func launch(cmd desktop.Cmd) string {
	cd := ""
	if cmd.Cwd != "" {
		cd = "cd " + q(cmd.Cwd) + " || exit 126; "
	}
	return `setsid sh -c '` + strings.ReplaceAll(cd, "'", `'\''`) + `"$@" <"$0/in" >"$0/out" 2>"$0/err"; echo $? >"$0/code.t"; mv "$0/code.t" "$0/code"' "$d" ` +
		words(cmd) + ` </dev/null >/dev/null 2>&1 &
echo $! >"$d/pid"
`
}

// await is the script part that waits (up to w s) for $d/code and prints
// "done <nonce> <code> <outsize> <errsize>", the output and the error
// (base64, each on its line, capped at $max), then removes $d; or
// "running <nonce>".
func await(n string, w, maxBytes int) string {
	return fmt.Sprintf(`i=0
while [ ! -e "$d/code" ]; do
  i=$((i+1)); if [ $i -le 20 ]; then sleep 0.01; else sleep 0.05; fi
  if [ $i -gt %d ]; then echo "running %s"; exit 0; fi
done
echo "done %s $(cat "$d/code") $(wc -c <"$d/out") $(wc -c <"$d/err")"
head -c %d "$d/out" | base64 -w0; echo
head -c %d "$d/err" | base64 -w0; echo
rm -rf "$d"
`, 20+w*20, n, n, maxBytes, maxBytes)
}

// parseDone reads await's answer.
func parseDone(out, n string, maxBytes int) (res desktop.Result, done bool, err error) {
	lines := strings.SplitN(out, "\n", 4)
	head := strings.Fields(lines[0])
	if len(head) == 2 && head[0] == "running" && head[1] == n {
		return res, false, nil
	}
	if len(head) != 5 || head[0] != "done" || head[1] != n || len(lines) < 3 {
		return res, false, fmt.Errorf("box: an unexpected answer from the command wrapper: %.200q", out)
	}
	code, _ := strconv.Atoi(head[2])
	osz, _ := strconv.Atoi(head[3])
	esz, _ := strconv.Atoi(head[4])
	o, err1 := base64.StdEncoding.DecodeString(strings.TrimSpace(lines[1]))
	e, err2 := base64.StdEncoding.DecodeString(strings.TrimSpace(lines[2]))
	if err := errors.Join(err1, err2); err != nil {
		return res, false, fmt.Errorf("box: the command's output: %w", err)
	}
	max := maxBytes
	return desktop.Result{ExitCode: code, Stdout: o, Stderr: e, Truncated: osz > max || esz > max}, true, nil
}

// Exec runs cmd to completion (see the file's comment).
func (b *cmdBackend) Exec(ctx context.Context, cmd desktop.Cmd) (desktop.Result, error) {
	if len(cmd.Argv) == 0 {
		return desktop.Result{}, errors.New("box backend: empty argv")
	}
	if err := b.checkUser(cmd.User); err != nil {
		return desktop.Result{}, err
	}
	maxBytes := cmd.MaxOutput
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	maxBytes = min(maxBytes, maxOut)
	var in []byte
	if cmd.Stdin != nil {
		var err error
		if in, err = io.ReadAll(io.LimitReader(cmd.Stdin, 64<<20)); err != nil {
			return desktop.Result{}, err
		}
	}
	n := nonce()
	d := "/tmp/.box-run/" + n
	var sb strings.Builder
	sb.WriteString(`d=` + q(d) + `; mkdir -p "$d" || exit 125; : >"$d/in"` + "\n")
	// Stdin, in pieces small enough for one command each: the first call
	// carries what fits, the rest go first.
	for len(in) > writeChunk {
		if _, err := b.run(ctx, `d=`+q(d)+`; mkdir -p "$d" && printf %s `+q(base64.StdEncoding.EncodeToString(in[:writeChunk]))+` | base64 -d >>"$d/in"`, MaxCommandSeconds); err != nil {
			return desktop.Result{}, err
		}
		in = in[writeChunk:]
		sb.Reset()
		sb.WriteString(`d=` + q(d) + "\n")
	}
	if len(in) > 0 {
		sb.WriteString(`printf %s ` + q(base64.StdEncoding.EncodeToString(in)) + ` | base64 -d >>"$d/in"` + "\n")
	}
	sb.WriteString(launch(cmd))
	sb.WriteString(await(n, b.s.p.wait(), maxBytes))
	r, err := b.run(ctx, sb.String(), MaxCommandSeconds)
	for err == nil {
		if r.ExitCode != 0 {
			return desktop.Result{}, fmt.Errorf("box: the command wrapper exited %d: %s", r.ExitCode, firstLine(r.Stderr))
		}
		res, done, perr := parseDone(r.Stdout, n, maxBytes)
		if perr != nil || done {
			return res, perr
		}
		// Still running: poll (the process outlives each call).
		r, err = b.run(ctx, `d=`+q(d)+"\n"+await(n, b.s.p.wait(), maxBytes), MaxCommandSeconds)
	}
	if ctx.Err() != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		_, _ = b.s.p.api.command(kctx, b.s.id, kill(d), "", 10)
		cancel()
		return desktop.Result{}, ctx.Err()
	}
	return desktop.Result{}, err
}

// kill ends the detached process of $d (its process group) and its stdin
// holder, and removes $d.
func kill(d string) string {
	return `d=` + q(d) + `
[ -f "$d/pid" ] && kill -KILL -- "-$(cat "$d/pid")" 2>/dev/null
[ -f "$d/holder" ] && kill -KILL "$(cat "$d/holder")" 2>/dev/null
rm -rf "$d"; exit 0`
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// Start starts cmd detached with its stdin a FIFO (kept open by a holder
// until Stdin().Close()), its stdout polled.
func (b *cmdBackend) Start(ctx context.Context, cmd desktop.Cmd) (desktop.Process, error) {
	if len(cmd.Argv) == 0 {
		return nil, errors.New("box backend: empty argv")
	}
	if err := b.checkUser(cmd.User); err != nil {
		return nil, err
	}
	d := "/tmp/.box-proc/" + nonce()
	script := `d=` + q(d) + `; mkdir -p "$d" && mkfifo "$d/in" || exit 125
setsid sh -c 'exec sleep 2147483647 >"$0/in"' "$d" </dev/null >/dev/null 2>&1 &
echo $! >"$d/holder"
` + launch(cmd) + `echo started`
	r, err := b.run(ctx, script, MaxCommandSeconds)
	if err != nil {
		return nil, err
	}
	if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "started" {
		return nil, fmt.Errorf("box: start %s: exit %d: %s", cmd.Argv[0], r.ExitCode, firstLine(r.Stderr))
	}
	pr, pw := io.Pipe()
	p := &proc{b: b, d: d, stdout: pr, done: make(chan struct{}), quit: make(chan struct{})}
	go p.pump(pw)
	p.stop = context.AfterFunc(ctx, func() { _ = p.Close() })
	return p, nil
}

type proc struct {
	b      *cmdBackend
	d      string
	stdout *io.PipeReader
	done   chan struct{}
	quit   chan struct{}
	stop   func() bool

	mu       sync.Mutex
	code     int
	ended    bool
	err      error
	stderr   []byte
	closed   bool
	inClosed bool
}

// pollScript waits (up to 2 s) for output past off or the end, then
// prints "<state> <size>" and up to n bytes from off (base64), and at the
// end the error output (its last 64 KiB).
func pollScript(d string, off int64, n int) string {
	return fmt.Sprintf(`d=%s; off=%d
[ -d "$d" ] || { echo gone; exit 0; }
i=0; while [ ! -e "$d/code" ] && [ "$(stat -c %%s "$d/out" 2>/dev/null || echo 0)" -le $off ] && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.02; done
if [ -e "$d/code" ]; then st="done $(cat "$d/code")"; else st=run; fi
echo "$st"
tail -c +$((off+1)) "$d/out" | head -c %d | base64 -w0; echo
case "$st" in done*) tail -c 65536 "$d/err" | base64 -w0; echo;; esac
`, q(d), off, n)
}

// pump reads the process's output into w until it ends.
func (p *proc) pump(w *io.PipeWriter) {
	defer close(p.done)
	var off int64
	for {
		select {
		case <-p.quit:
			w.CloseWithError(io.ErrClosedPipe)
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		r, err := p.b.s.p.api.command(ctx, p.b.s.id, pollScript(p.d, off, readChunk), "", MaxCommandSeconds)
		cancel()
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("box: poll exited %d: %s", r.ExitCode, firstLine(r.Stderr))
		}
		if err != nil {
			err = p.b.s.explainErr(err)
			p.finish(0, false, nil, err)
			w.CloseWithError(err)
			return
		}
		lines := strings.SplitN(r.Stdout, "\n", 4)
		st := strings.Fields(lines[0])
		if len(st) == 0 || st[0] == "gone" || len(lines) < 2 {
			err := errors.New("box: the process's directory is gone")
			p.finish(0, false, nil, err)
			w.CloseWithError(err)
			return
		}
		chunk, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(lines[1]))
		if derr != nil {
			p.finish(0, false, nil, derr)
			w.CloseWithError(derr)
			return
		}
		if len(chunk) > 0 {
			if _, err := w.Write(chunk); err != nil {
				p.finish(0, false, nil, err)
				return
			}
			off += int64(len(chunk))
		}
		if st[0] == "done" && len(chunk) == 0 {
			code, _ := strconv.Atoi(st[1])
			var errb []byte
			if len(lines) > 2 {
				errb, _ = base64.StdEncoding.DecodeString(strings.TrimSpace(lines[2]))
			}
			p.finish(code, true, errb, nil)
			w.Close()
			return
		}
	}
}

func (p *proc) finish(code int, ended bool, stderr []byte, err error) {
	p.mu.Lock()
	p.code, p.ended, p.stderr, p.err = code, ended, stderr, err
	p.mu.Unlock()
}

type procStdin struct{ p *proc }

// Write sends b to the FIFO, in chunks.
func (s procStdin) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := min(len(b), stdinChunk)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		r, err := s.p.b.run(ctx, `printf %s `+q(base64.StdEncoding.EncodeToString(b[:c]))+` | base64 -d >`+q(s.p.d+"/in"), MaxCommandSeconds)
		cancel()
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("box: stdin: exit %d: %s", r.ExitCode, firstLine(r.Stderr))
		}
		if err != nil {
			return n, err
		}
		n += c
		b = b[c:]
	}
	return n, nil
}

// Close ends the holder, so the process reads EOF.
func (s procStdin) Close() error {
	s.p.mu.Lock()
	if s.p.inClosed {
		s.p.mu.Unlock()
		return nil
	}
	s.p.inClosed = true
	s.p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.p.b.s.p.api.command(ctx, s.p.b.s.id, `d=`+q(s.p.d)+`; [ -f "$d/holder" ] && kill "$(cat "$d/holder")" 2>/dev/null; exit 0`, "", 10)
	return err
}

func (p *proc) Stdin() io.WriteCloser { return procStdin{p} }
func (p *proc) Stdout() io.Reader     { return p.stdout }

func (p *proc) Stderr() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.stderr...)
}

// Wait waits for the process's end.
func (p *proc) Wait() (int, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		if p.err == nil {
			return 0, errors.New("box: the process was closed before it ended")
		}
		return 0, p.err
	}
	return p.code, nil
}

// Close kills the process (if it runs) and removes its directory.
func (p *proc) Close() error {
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
	close(p.quit)
	_ = p.stdout.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.b.s.p.api.command(ctx, p.b.s.id, kill(p.d), "", 10)
	return err
}

// ReadFile reads path in chunks (base64), at most max bytes.
func (b *cmdBackend) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	var out bytes.Buffer
	for {
		n := min(int64(readChunk), max-int64(out.Len()))
		if n <= 0 {
			return out.Bytes(), nil
		}
		script := fmt.Sprintf(`p=%s
[ -e "$p" ] || { echo missing; exit 0; }
[ -f "$p" ] || { echo notfile; exit 0; }
[ -r "$p" ] || { echo denied; exit 0; }
echo "size $(stat -c %%s -- "$p")"
tail -c +%d -- "$p" | head -c %d | base64 -w0; echo`, q(path), out.Len()+1, n)
		r, err := b.run(ctx, script, MaxCommandSeconds)
		if err != nil {
			return nil, err
		}
		lines := strings.SplitN(r.Stdout, "\n", 3)
		switch strings.TrimSpace(lines[0]) {
		case "missing":
			return nil, fmt.Errorf("box: %s: %w", path, fs.ErrNotExist)
		case "notfile":
			return nil, fmt.Errorf("box: %s is not a regular file", path)
		case "denied":
			return nil, fmt.Errorf("box: %s: %w", path, fs.ErrPermission)
		}
		var size int64
		if _, err := fmt.Sscanf(lines[0], "size %d", &size); err != nil || len(lines) < 2 || r.ExitCode != 0 {
			return nil, fmt.Errorf("box: read %s: exit %d: %s", path, r.ExitCode, firstLine(r.Stderr))
		}
		chunk, err := base64.StdEncoding.DecodeString(strings.TrimSpace(lines[1]))
		if err != nil {
			return nil, fmt.Errorf("box: read %s: %w", path, err)
		}
		out.Write(chunk)
		if len(chunk) == 0 || int64(out.Len()) >= size {
			return out.Bytes(), nil
		}
	}
}

// WriteFile writes path in chunks (base64) to a part file, then renames
// it into place. Commands run as the box's user, who owns the file.
func (b *cmdBackend) WriteFile(ctx context.Context, path, user string, data []byte) error {
	if err := b.checkUser(user); err != nil {
		return err
	}
	part := path + ".box-part-" + nonce()
	first := true
	for {
		c := min(len(data), writeChunk)
		redir := ">>"
		if first {
			redir = ">"
		}
		script := `printf %s ` + q(base64.StdEncoding.EncodeToString(data[:c])) + ` | base64 -d ` + redir + q(part)
		data = data[c:]
		if len(data) == 0 {
			script += ` && mv -f -- ` + q(part) + ` ` + q(path)
		}
		script += `; s=$?; [ $s = 0 ] || rm -f -- ` + q(part) + `; exit $s`
		r, err := b.run(ctx, script, MaxCommandSeconds)
		if err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("box: write %s: exit %d: %s", path, r.ExitCode, firstLine(r.Stderr))
		}
		first = false
		if len(data) == 0 {
			return nil
		}
	}
}

// PortURL: the box's one desktop stream, for screen 0's control port
// only (Box's desktop takes input: there is no view-only stream to give
// the view port).
func (b *cmdBackend) PortURL(ctx context.Context, port int) (string, *http.Client, error) {
	if port != controlPort {
		return "", nil, fmt.Errorf("box: box %s: port %d is not reachable (Box publishes one desktop stream, which takes input; a view-only stream is not offered)", b.s.id, port)
	}
	f, err := b.s.desktopForwarder(ctx)
	if err != nil {
		return "", nil, err
	}
	return f.URL(), f.Client(), nil
}

// controlPort is the desktop machine's control port of screen 0.
const controlPort = 6081

// desktopTarget is the directory of a desktop URL (its page's
// neighbours, websockify among them, are under it).
func desktopTarget(desktopURL string) (*url.URL, error) {
	u, err := url.Parse(desktopURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("box: the desktop URL is not an http(s) URL")
	}
	if i := strings.LastIndexByte(u.Path, '/'); i >= 0 {
		u.Path = u.Path[:i]
	}
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u, nil
}

package providers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// startSecs is how long a botd must run before its exit counts as a crash
// to restart from rather than a start that failed (supervisord's startsecs).
const startSecs = 10 * time.Second

// localProc supervises one computer's botd: Starting → Running (restarted
// with capped backoff when it dies after startSecs) → Stopped on terminate,
// or Fatal when it exits during start (the reason is kept for Reconnect).
type localProc struct {
	ref, bin, api string
	pidFile       string // botd's pid, for a later worker to find it
	home          string // BOTD_HOME: botd is not started again when it is gone
	env           []string
	log           zerolog.Logger
	stop          chan struct{} // closed by terminate
	done          chan struct{} // closed when no process is left
	stopOnce      sync.Once

	// mu guards cmd, started, fatalErr and tail.
	mu       sync.Mutex
	cmd      *exec.Cmd
	started  time.Time
	fatalErr error
	tail     tailLines
}

func (p *localProc) startOnce() error {
	cmd := exec.Command(p.bin)
	cmd.Env = p.env
	w := tailWriter{p}
	cmd.Stdout, cmd.Stderr = w, w
	// Its own process group (a terminal's ^C is not for it) and SIGTERM when
	// the worker dies, so no botd outlives the worker that holds its token.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd, p.started = cmd, time.Now()
	p.mu.Unlock()
	if p.pidFile != "" {
		_ = os.WriteFile(p.pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	}
	return nil
}

// supervise waits for botd and restarts it after a crash until terminate.
func (p *localProc) supervise() {
	defer close(p.done)
	backoff := 500 * time.Millisecond
	for {
		p.mu.Lock()
		cmd, started := p.cmd, p.started
		p.mu.Unlock()
		err := cmd.Wait()
		ran := time.Since(started)
		select {
		case <-p.stop:
			return
		default:
		}
		reason := p.reason()
		// A machine lost with its process (its directory or home removed)
		// is gone however long botd ran: a replacement takes the home
		// over, and nothing here may start botd on it again. (Checked
		// before the start window too: a replacement lost in its first
		// seconds is gone, not a botd that failed to start.)
		if gone := p.gone(); gone != nil {
			p.setFatal(gone)
			p.log.Error().Err(gone).Msg("botd exited and its machine is gone; not restarting")
			return
		}
		if ran < startSecs {
			p.setFatal(fmt.Errorf("botd exited %s after start (%v): %s", ran.Round(time.Millisecond), err, reason))
			p.log.Error().Err(err).Str("reason", reason).Msg("botd failed to start")
			return
		}
		if ran > 5*time.Minute {
			backoff = 500 * time.Millisecond
		}
		p.log.Warn().Err(err).Str("reason", reason).Dur("backoff", backoff).Msg("botd exited; restarting")
		t := time.NewTimer(backoff)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 30*time.Second)
		if gone := p.gone(); gone != nil { // lost during the backoff
			p.setFatal(gone)
			p.log.Error().Err(gone).Msg("botd exited and its machine is gone; not restarting")
			return
		}
		if err := p.startOnce(); err != nil {
			p.setFatal(fmt.Errorf("restart botd: %w", err))
			return
		}
	}
}

// gone says why the machine is gone (ErrGone), or nil: its directory
// (token, machine.json) was removed, so a replacement takes its home over;
// or its home was (a disk gone, a directory removed: botd would make an
// empty one).
func (p *localProc) gone() error {
	if p.pidFile != "" && missing(filepath.Dir(p.pidFile)) {
		return fmt.Errorf("the machine's directory is gone: %w", ErrGone)
	}
	if p.home != "" && missing(p.home) {
		return fmt.Errorf("botd's home is gone: %w", ErrGone)
	}
	return nil
}

func (p *localProc) setFatal(err error) {
	p.mu.Lock()
	p.fatalErr = err
	p.mu.Unlock()
}

// fatal is why botd will not come up without a new start (nil otherwise).
func (p *localProc) fatal() error {
	select {
	case <-p.stop:
		return errors.New("stopped while starting")
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fatalErr
}

func (p *localProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return 0
	default:
	}
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// terminate stops botd: SIGTERM (botd stops its screens, browsers and Codex
// in order), SIGKILL after 20 s or when ctx ends.
func (p *localProc) terminate(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stop) })
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	p.log.Warn().Msg("botd did not stop on SIGTERM; killing it")
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
	<-p.done
	return nil
}

// reason is the line of botd's output that best says why it stopped.
func (p *localProc) reason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tail.reason()
}

// tailLines keeps botd's last output lines (botd never logs its token).
type tailLines struct {
	lines []string
	part  []byte
}

const tailMax = 20

func (t *tailLines) write(b []byte) {
	t.part = append(t.part, b...)
	for {
		i := bytes.IndexByte(t.part, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(t.part[:i]))
		t.part = t.part[i+1:]
		if line == "" {
			continue
		}
		if len(line) > 400 {
			line = line[:400] + "…"
		}
		t.lines = append(t.lines, line)
		if len(t.lines) > tailMax {
			t.lines = t.lines[1:]
		}
	}
	if len(t.part) > 4096 {
		t.part = t.part[:0]
	}
}

// reason prefers botd's own "botd: …" exit line, then the last error.
func (t *tailLines) reason() string {
	for i := len(t.lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(t.lines[i], "botd") {
			return t.lines[i]
		}
	}
	for i := len(t.lines) - 1; i >= 0; i-- {
		if strings.Contains(t.lines[i], `"level":"error"`) || strings.Contains(t.lines[i], `"level":"fatal"`) {
			return t.lines[i]
		}
	}
	if n := len(t.lines); n > 0 {
		return t.lines[n-1]
	}
	return "no output"
}

type tailWriter struct{ p *localProc }

func (w tailWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	w.p.tail.write(b)
	w.p.mu.Unlock()
	return len(b), nil
}

// missing reports whether path is known not to exist (another error, say
// a permission problem, is not taken as the home being lost).
func missing(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

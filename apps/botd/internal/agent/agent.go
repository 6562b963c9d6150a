package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/pkg/shared"
)

// Options configures the Codex app-server.
type Options struct {
	// Bin is the codex executable.
	Bin string
	// CodexHome is $CODEX_HOME (the managed config.toml lives there).
	CodexHome string
	// Home is the bot user's HOME for the process.
	Home string
	User osuser.User
	// ExtraConfig is appended to the managed config.toml.
	ExtraConfig string
	// Env is extra environment for Codex (the model proxy's per-boot
	// token; never a provider's key).
	Env []string
	// Provider, when set, is the model provider Codex uses by default
	// (botd's model proxy).
	Provider *Provider
	Sup      *supervisor.Supervisor
	// Changed is called after every change of State (health recomputes).
	Changed func()
	Log     zerolog.Logger
}

// Agent starts Codex's app-server as the bot user, one process per /agent
// connection, and talks to it over a socket pair only botd holds: the
// child's stdin and stdout (`codex app-server --listen stdio://`, JSON-RPC
// as JSON lines). Nothing listens on a port or a path, so nothing the bot
// user binds can stand in for Codex (it may kill its Codex; it cannot
// replace it). The pair is root's and a socket cannot be reopened through
// /proc/<pid>/fd (ENXIO); the app-server runs from an exec-only binary, so
// it is not dumpable and the bot cannot take its end of the pair either
// (execOnly).
type Agent struct {
	opts Options
	bin  string
	env  []string

	cfgMu sync.Mutex // cfgMu serializes the binary's check and config.toml rewrites (one temp name)
	seq   atomic.Int64

	// mu guards state, lastErr, changed and probing.
	mu      sync.Mutex
	state   shared.ProcessState
	lastErr string
	changed chan struct{}
	probing bool

	stop     chan struct{}
	stopOnce sync.Once
}

// readyID is the id of botd's own first request to a new app-server: a
// request that is refused before `initialize` ("Not initialized"), so its
// answer proves Codex reads and answers on the pipe without changing the
// session the client then initializes. The answer never reaches the client.
const readyID = `"botd-ready"`

var readyProbe = []byte(`{"id":` + readyID + `,"method":"thread/list","params":{}}` + "\n")

// readyTimeout bounds one app-server's start (spawn to the probe's answer).
const readyTimeout = 60 * time.Second

// Start writes the managed config and returns at once; a first app-server is
// started in the background to prove Codex starts and answers (State is
// starting until then, running after, crashed while it fails; a failing
// Codex is tried again with backoff). Use WaitReady for /readyz.
func Start(o Options) (*Agent, error) {
	if err := WriteConfig(o.CodexHome, o.User, o.Provider, o.ExtraConfig); err != nil {
		return nil, err
	}
	if o.Changed == nil {
		o.Changed = func() {}
	}
	bin, nativeEnv := resolveNative(o.Bin)
	a := &Agent{
		opts: o, bin: bin,
		env:   append(append([]string{"CODEX_HOME=" + o.CodexHome}, nativeEnv...), o.Env...),
		state: shared.StateStarting, changed: make(chan struct{}), stop: make(chan struct{}),
	}
	a.mu.Lock()
	a.probing = true
	a.mu.Unlock()
	go a.probeLoop()
	return a, nil
}

// State is the agent's health: running once an app-server started and
// answered (the last start did), crashed when the last start failed.
func (a *Agent) State() shared.ProcessState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// WaitReady blocks until a Codex app-server has started and answered (through
// retries) or ctx ends.
func (a *Agent) WaitReady(ctx context.Context) error {
	for {
		a.mu.Lock()
		st, ch, last := a.state, a.changed, a.lastErr
		a.mu.Unlock()
		switch st {
		case shared.StateRunning:
			return nil
		case shared.StateStopped:
			return errors.New("codex agent stopped")
		}
		select {
		case <-ctx.Done():
			if last != "" {
				return fmt.Errorf("codex app-server not ready (%s; last: %s): %w", st, last, ctx.Err())
			}
			return fmt.Errorf("codex app-server not ready (%s): %w", st, ctx.Err())
		case <-ch:
		}
	}
}

// Stop ends the background checks; the sessions' processes are the
// supervisor's (StopAll ends them).
func (a *Agent) Stop() {
	a.stopOnce.Do(func() { close(a.stop) })
	a.setState(shared.StateStopped, "")
}

func (a *Agent) stopped() bool {
	select {
	case <-a.stop:
		return true
	default:
		return false
	}
}

func (a *Agent) setState(st shared.ProcessState, errMsg string) {
	a.mu.Lock()
	if a.state == shared.StateStopped || (a.state == st && a.lastErr == errMsg) {
		a.mu.Unlock()
		return
	}
	a.state, a.lastErr = st, errMsg
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
	a.opts.Changed()
}

// failed records a start that failed and makes sure a background check runs
// until Codex starts again (health recovers without a client).
func (a *Agent) failed(err error) {
	if a.stopped() || errors.Is(err, supervisor.ErrClosed) {
		return
	}
	a.setState(shared.StateCrashed, err.Error())
	a.mu.Lock()
	start := !a.probing
	a.probing = true
	a.mu.Unlock()
	if start {
		go a.probeLoop()
	}
}

// probeLoop starts an app-server, checks that it answers and stops it, until
// one does (backoff between tries).
func (a *Agent) probeLoop() {
	defer func() {
		a.mu.Lock()
		a.probing = false
		a.mu.Unlock()
	}()
	delay := supervisor.BackoffInitial
	for !a.stopped() {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-a.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		s, err := a.open(ctx, "codex:check")
		cancel()
		if err == nil {
			// Running once the check's process is gone: a client that saw
			// health ok finds only its own app-server.
			s.Close()
			a.setState(shared.StateRunning, "")
			return
		}
		a.opts.Log.Warn().Err(err).Dur("retry_in", delay).Msg("codex app-server did not start")
		select {
		case <-a.stop:
			return
		case <-time.After(delay):
		}
		if delay *= 2; delay > supervisor.BackoffMax {
			delay = supervisor.BackoffMax
		}
	}
}

// Session is one app-server process and botd's end of its stdio.
type Session struct {
	proc  *supervisor.Proc
	conn  *net.UnixConn
	lines *bufio.Scanner
	once  sync.Once
}

// open checks the binary (execOnly), rewrites the managed config and starts
// an app-server as bot with a fresh socket pair as its stdin and stdout; it
// returns once the app-server has answered botd's probe. Failures (other
// than ctx ending) mark the agent crashed; the caller marks it running.
func (a *Agent) open(ctx context.Context, name string) (*Session, error) {
	a.cfgMu.Lock()
	changed, err := execOnly(a.bin)
	if err == nil && changed {
		a.opts.Log.Info().Str("bin", a.bin).Msg("made the Codex binary exec-only (its processes are not dumpable, so bot cannot take them over)")
	}
	if err == nil {
		err = WriteConfig(a.opts.CodexHome, a.opts.User, a.opts.Provider, a.opts.ExtraConfig)
	}
	a.cfgMu.Unlock()
	if err != nil {
		a.failed(err)
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("codex stdio: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "codex-stdio")
	theirs := os.NewFile(uintptr(fds[1]), "codex-stdio")
	fc, err := net.FileConn(mine) // a dup: mine is closed below either way
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("codex stdio: %w", err)
	}
	s := &Session{conn: fc.(*net.UnixConn)}
	s.lines = bufio.NewScanner(s.conn)
	s.lines.Buffer(make([]byte, 0, 64<<10), MaxMessage)
	// botd keeps only its own end: once the child has its copy, the child's
	// exit is an EOF here.
	var closeTheirs sync.Once
	dropTheirs := func() { closeTheirs.Do(func() { theirs.Close() }) }
	u := a.opts.User
	u.Home = a.opts.Home
	ready := make(chan error, 1)
	spec := supervisor.Spec{
		Name:    name,
		Restart: supervisor.RestartNever,
		Cmd: runner.Spec{
			Argv:   []string{a.bin, "app-server", "--listen", "stdio://"},
			User:   &u,
			Env:    a.env,
			Dir:    a.opts.Home,
			Stdin:  theirs,
			Stdout: theirs,
		},
		Ready: func(rctx context.Context) error {
			dropTheirs()
			err := s.handshake(rctx)
			ready <- err
			return err
		},
		ReadyTimeout: readyTimeout,
	}
	p, err := a.opts.Sup.Start(spec)
	if err != nil {
		dropTheirs()
		s.conn.Close()
		a.failed(err)
		return nil, fmt.Errorf("start codex app-server: %w", err)
	}
	s.proc = p
	select {
	case err = <-ready:
	case <-p.Done():
		// It never got as far as the check (it could not start).
		err = errors.New("codex app-server did not start")
		select {
		case err = <-ready:
			if err == nil {
				err = errors.New("codex app-server exited")
			}
		default:
		}
	case <-ctx.Done():
		dropTheirs()
		s.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		dropTheirs()
		s.Close()
		a.failed(err)
		return nil, err
	}
	return s, nil
}

// handshake sends the probe and waits for its answer (the first lines of a
// fresh app-server; anything before the answer is dropped).
func (s *Session) handshake(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := s.conn.Write(readyProbe); err != nil {
		return fmt.Errorf("codex app-server: write: %w", err)
	}
	for range 100 {
		if !s.lines.Scan() {
			err := s.lines.Err()
			if ctx.Err() != nil {
				return fmt.Errorf("codex app-server did not answer: %w", ctx.Err())
			}
			if err == nil {
				return errors.New("codex app-server exited before answering")
			}
			return fmt.Errorf("codex app-server: read: %w", err)
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(s.lines.Bytes(), &m) == nil && string(m.ID) == readyID {
			if !stop() {
				return fmt.Errorf("codex app-server did not answer: %w", ctx.Err())
			}
			return nil
		}
	}
	return errors.New("codex app-server: no answer to botd's check in its first 100 lines")
}

// Pid is the app-server's pid (0 once it is gone).
func (s *Session) Pid() int { return s.proc.Pid() }

// Close ends the session: its stdin closes (the app-server exits on EOF),
// then the supervisor stops what is left (SIGTERM, SIGKILL after a grace).
func (s *Session) Close() {
	s.once.Do(func() {
		s.conn.Close()
		if s.proc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*supervisor.StopGrace)
			defer cancel()
			_ = s.proc.Stop(ctx)
		}
	})
}

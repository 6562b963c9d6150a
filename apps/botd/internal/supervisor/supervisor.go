// Package supervisor starts and watches botd's children: each in its own
// process group, as its own user, with an optional readiness check, restarted
// with capped backoff when it should be, stopped with SIGTERM then SIGKILL.
// Every state change is published.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/pkg/shared"
)

// Restart says what happens when a process exits on its own.
type Restart int

const (
	// RestartNever leaves an exited process exited (browsers).
	RestartNever Restart = iota
	// RestartAlways restarts it after the backoff.
	RestartAlways
)

// Spec is one supervised process.
type Spec struct {
	// Name identifies it in logs and events (e.g. "codex", "xvfb:3").
	Name    string
	Cmd     runner.Spec
	Restart Restart
	// Ready, when set, is run after every start; the process is running only
	// once it returns nil. It should poll until ctx ends. A Ready that fails
	// (other than by ctx ending because the process exited) stops the process
	// and counts as a crash.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds Ready (default 30 s).
	ReadyTimeout time.Duration
}

// Event is published on every state change.
type Event struct {
	Name     string              `json:"name"`
	State    shared.ProcessState `json:"state"`
	Pid      int                 `json:"pid,omitempty"`
	ExitCode *int                `json:"exitCode,omitempty"`
	Error    string              `json:"error,omitempty"`
}

// Options configures a Supervisor; nil fields get defaults.
type Options struct {
	Runner runner.Runner
	Clock  Clock
	Log    *zerolog.Logger
	// OnEvent receives every state change (publish it on the hub).
	OnEvent func(Event)
}

// Supervisor owns a set of processes.
type Supervisor struct {
	runner  runner.Runner
	clock   Clock
	log     zerolog.Logger
	onEvent func(Event)

	// mu guards procs and closed.
	mu     sync.Mutex
	procs  map[*Proc]struct{}
	closed bool
}

// New returns a Supervisor.
func New(o Options) *Supervisor {
	s := &Supervisor{runner: o.Runner, clock: o.Clock, onEvent: o.OnEvent, procs: map[*Proc]struct{}{}}
	if s.runner == nil {
		s.runner = runner.Exec{}
	}
	if s.clock == nil {
		s.clock = RealClock{}
	}
	if o.Log != nil {
		s.log = *o.Log
	} else {
		s.log = zerolog.Nop()
	}
	if s.onEvent == nil {
		s.onEvent = func(Event) {}
	}
	return s
}

// ErrClosed is returned by Start after StopAll.
var ErrClosed = errors.New("supervisor: stopped")

// Start begins supervising spec and returns at once; the process goes
// through starting → running (→ crashed|stopped).
func (s *Supervisor) Start(spec Spec) (*Proc, error) {
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 30 * time.Second
	}
	p := &Proc{sup: s, spec: spec, stopReq: make(chan struct{}), done: make(chan struct{}), changed: make(chan struct{}), state: shared.StateStarting}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	go p.loop()
	return p, nil
}

// StopAll stops every process (in parallel) and refuses new ones.
func (s *Supervisor) StopAll(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	procs := make([]*Proc, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Stop(ctx) }()
	}
	wg.Wait()
}

func (s *Supervisor) forget(p *Proc) {
	s.mu.Lock()
	delete(s.procs, p)
	s.mu.Unlock()
}

// Proc is one supervised process.
type Proc struct {
	sup  *Supervisor
	spec Spec

	stopOnce sync.Once
	stopReq  chan struct{}
	done     chan struct{}

	// mu guards state, pid, changed, restarts and lastErr.
	mu       sync.Mutex
	state    shared.ProcessState
	pid      int
	changed  chan struct{} // closed and replaced on every state change
	restarts int
	lastErr  string
}

// Name is the spec's name.
func (p *Proc) Name() string { return p.spec.Name }

// State is the current state.
func (p *Proc) State() shared.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Pid is the current child's pid (0 when none).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Restarts counts how many times the process was started again.
func (p *Proc) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Done is closed once the process is finally stopped or, for RestartNever,
// has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// WaitRunning blocks until the process is running, or fails when it crashes
// or stops first (for RestartAlways it keeps waiting through restarts until
// ctx ends).
func (p *Proc) WaitRunning(ctx context.Context) error {
	for {
		p.mu.Lock()
		st, ch, last := p.state, p.changed, p.lastErr
		p.mu.Unlock()
		switch st {
		case shared.StateRunning:
			return nil
		case shared.StateStopped:
			return fmt.Errorf("%s stopped", p.spec.Name)
		case shared.StateCrashed:
			if p.spec.Restart == RestartNever {
				if last == "" {
					last = "exited"
				}
				return fmt.Errorf("%s crashed: %s", p.spec.Name, last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not running (%s): %w", p.spec.Name, st, ctx.Err())
		case <-ch:
		}
	}
}

// Stop ends the process: SIGTERM to its group, SIGKILL after StopGrace. It
// returns once the process is gone. Safe to call more than once.
func (p *Proc) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stopReq) })
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Proc) setState(st shared.ProcessState, pid int, exit *int, errMsg string) {
	p.mu.Lock()
	p.state, p.pid, p.lastErr = st, pid, errMsg
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	ev := p.sup.log.Info()
	if st == shared.StateCrashed {
		ev = p.sup.log.Warn()
	}
	ev = ev.Str("process", p.spec.Name).Str("state", string(st))
	if pid != 0 {
		ev = ev.Int("pid", pid)
	}
	if exit != nil {
		ev = ev.Int("exit_code", *exit)
	}
	if errMsg != "" {
		ev = ev.Str("error", errMsg)
	}
	ev.Msg("process state")
	p.sup.onEvent(Event{Name: p.spec.Name, State: st, Pid: pid, ExitCode: exit, Error: errMsg})
}

func (p *Proc) stopping() bool {
	select {
	case <-p.stopReq:
		return true
	default:
		return false
	}
}

// loop runs the process until it is stopped (or exits, for RestartNever).
func (p *Proc) loop() {
	defer close(p.done)
	defer p.sup.forget(p)
	var delay time.Duration
	first := true
	for {
		if p.stopping() {
			p.setState(shared.StateStopped, 0, nil, "")
			return
		}
		if !first {
			p.mu.Lock()
			p.restarts++
			p.mu.Unlock()
			p.setState(shared.StateStarting, 0, nil, "")
		}
		first = false
		up, crashed := p.runOnce()
		if !crashed {
			return // stopped on request, or a clean exit of a RestartNever process
		}
		if p.spec.Restart == RestartNever {
			return
		}
		delay = nextBackoff(delay, up)
		select {
		case <-p.stopReq:
			p.setState(shared.StateStopped, 0, nil, "")
			return
		case <-p.sup.clock.After(delay):
		}
	}
}

// runOnce starts the child once and waits for it to end. It reports how long
// it was up and whether it ended as a crash (false when stopped on request
// or, for RestartNever, exited with status 0).
func (p *Proc) runOnce() (time.Duration, bool) {
	proc, err := p.sup.runner.Start(p.spec.Cmd)
	if err != nil {
		p.setState(shared.StateCrashed, 0, nil, err.Error())
		return 0, true
	}
	started := p.sup.clock.Now()
	pid := proc.Pid()
	exited := make(chan int, 1)
	go func() {
		code, _ := proc.Wait()
		exited <- code
	}()
	if p.spec.Ready == nil {
		p.setState(shared.StateRunning, pid, nil, "")
	} else {
		p.setState(shared.StateStarting, pid, nil, "")
	}
	readyErr := make(chan error, 1)
	readyCtx, cancelReady := context.WithTimeout(context.Background(), p.spec.ReadyTimeout)
	defer cancelReady()
	if p.spec.Ready != nil {
		go func() { readyErr <- p.spec.Ready(readyCtx) }()
	}
	for {
		select {
		case err := <-readyErr:
			if err == nil {
				p.setState(shared.StateRunning, pid, nil, "")
				continue
			}
			// Not ready in time: this start failed. Kill it and count a crash.
			p.sup.log.Warn().Str("process", p.spec.Name).Err(err).Msg("readiness check failed")
			code := p.kill(proc, exited)
			// The group may hold grandchildren; they die with it.
			_ = proc.SignalGroup(syscall.SIGKILL)
			if p.stopping() {
				p.setState(shared.StateStopped, 0, &code, "")
				return p.sup.clock.Now().Sub(started), false
			}
			p.setState(shared.StateCrashed, 0, &code, "not ready: "+err.Error())
			return p.sup.clock.Now().Sub(started), true
		case code := <-exited:
			cancelReady()
			// Whatever the leader left behind in its group dies with it.
			_ = proc.SignalGroup(syscall.SIGKILL)
			up := p.sup.clock.Now().Sub(started)
			if p.stopping() {
				p.setState(shared.StateStopped, 0, &code, "")
				return up, false
			}
			if code == 0 && p.spec.Restart == RestartNever {
				p.setState(shared.StateStopped, 0, &code, "")
				return up, false
			}
			p.setState(shared.StateCrashed, 0, &code, fmt.Sprintf("exited with status %d", code))
			return up, true
		case <-p.stopReq:
			cancelReady()
			code := p.kill(proc, exited)
			_ = proc.SignalGroup(syscall.SIGKILL)
			p.setState(shared.StateStopped, 0, &code, "")
			return p.sup.clock.Now().Sub(started), false
		}
	}
}

// kill sends SIGTERM to the group and SIGKILL after StopGrace; it returns
// the exit code once the leader is gone.
func (p *Proc) kill(proc runner.Process, exited <-chan int) int {
	_ = proc.SignalGroup(syscall.SIGTERM)
	select {
	case code := <-exited:
		return code
	case <-p.sup.clock.After(StopGrace):
		p.sup.log.Warn().Str("process", p.spec.Name).Int("pid", proc.Pid()).Msg("did not stop after SIGTERM; sending SIGKILL")
		_ = proc.SignalGroup(syscall.SIGKILL)
		return <-exited
	}
}

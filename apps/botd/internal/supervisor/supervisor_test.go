package supervisor

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/pkg/shared"
)

func TestNextBackoff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prev, up time.Duration
		want     time.Duration
	}{
		{"first crash", 0, time.Second, 500 * time.Millisecond},
		{"doubles", 500 * time.Millisecond, time.Second, time.Second},
		{"doubles again", 4 * time.Second, 0, 8 * time.Second},
		{"caps at 15s", 8 * time.Second, 0, 15 * time.Second},
		{"stays capped", 15 * time.Second, 59 * time.Second, 15 * time.Second},
		{"resets after a minute up", 15 * time.Second, 60 * time.Second, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, nextBackoff(tc.prev, tc.up))
		})
	}
}

// fakeClock hands out timers the test fires by hand; no test sleeps.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers chan fakeTimer
}

type fakeTimer struct {
	d  time.Duration
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_700_000_000, 0), timers: make(chan fakeTimer, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.timers <- fakeTimer{d: d, ch: ch}
	return ch
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// nextTimer waits for the supervisor to ask for a timer.
func (c *fakeClock) nextTimer(t *testing.T) fakeTimer {
	t.Helper()
	select {
	case tm := <-c.timers:
		return tm
	case <-time.After(5 * time.Second):
		t.Fatal("supervisor asked for no timer")
		return fakeTimer{}
	}
}

// fakeRunner records starts; each fake process exits when the test says.
type fakeRunner struct {
	mu      sync.Mutex
	started chan *fakeProc
	failN   int
}

func newFakeRunner() *fakeRunner { return &fakeRunner{started: make(chan *fakeProc, 16)} }

func (r *fakeRunner) Start(s runner.Spec) (runner.Process, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failN > 0 {
		r.failN--
		return nil, errors.New("exec failed")
	}
	p := &fakeProc{pid: 1000 + len(r.started), exit: make(chan int, 1), signals: make(chan syscall.Signal, 8)}
	r.started <- p
	return p, nil
}

func (r *fakeRunner) next(t *testing.T) *fakeProc {
	t.Helper()
	select {
	case p := <-r.started:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no process started")
		return nil
	}
}

type fakeProc struct {
	pid     int
	exit    chan int
	signals chan syscall.Signal
	// ignoreTerm makes SIGTERM do nothing, like a stubborn child.
	ignoreTerm bool
}

func (p *fakeProc) Pid() int           { return p.pid }
func (p *fakeProc) Wait() (int, error) { return <-p.exit, nil }
func (p *fakeProc) SignalGroup(sig syscall.Signal) error {
	p.signals <- sig
	if sig == syscall.SIGKILL || (sig == syscall.SIGTERM && !p.ignoreTerm) {
		select {
		case p.exit <- -1:
		default:
		}
	}
	return nil
}

type recorder struct {
	mu     sync.Mutex
	events []Event
	ch     chan Event
}

func newRecorder() *recorder { return &recorder{ch: make(chan Event, 64)} }

func (r *recorder) on(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.ch <- e
}

func (r *recorder) waitState(t *testing.T, st shared.ProcessState) Event {
	t.Helper()
	for {
		select {
		case e := <-r.ch:
			if e.State == st {
				return e
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", st)
		}
	}
}

func TestRestartAlwaysBacksOffAndResets(t *testing.T) {
	clk, run, rec := newFakeClock(), newFakeRunner(), newRecorder()
	s := New(Options{Runner: run, Clock: clk, OnEvent: rec.on})
	p, err := s.Start(Spec{Name: "codex", Restart: RestartAlways})
	require.NoError(t, err)

	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 15 * time.Second, 15 * time.Second}
	for i, d := range want {
		fp := run.next(t)
		rec.waitState(t, shared.StateRunning)
		fp.exit <- 1
		e := rec.waitState(t, shared.StateCrashed)
		require.Equal(t, 1, *e.ExitCode)
		tm := clk.nextTimer(t)
		require.Equal(t, d, tm.d, "backoff before restart %d", i+1)
		tm.ch <- clk.Now()
	}
	// Up for a minute: the next crash starts the backoff over.
	fp := run.next(t)
	rec.waitState(t, shared.StateRunning)
	clk.advance(61 * time.Second)
	fp.exit <- 2
	rec.waitState(t, shared.StateCrashed)
	require.Equal(t, 500*time.Millisecond, clk.nextTimer(t).d)
	require.Equal(t, len(want), p.Restarts())
}

func TestRestartNeverStaysDown(t *testing.T) {
	clk, run, rec := newFakeClock(), newFakeRunner(), newRecorder()
	s := New(Options{Runner: run, Clock: clk, OnEvent: rec.on})
	p, err := s.Start(Spec{Name: "chromium", Restart: RestartNever})
	require.NoError(t, err)
	run.next(t).exit <- 3
	rec.waitState(t, shared.StateCrashed)
	<-p.Done()
	require.Equal(t, shared.StateCrashed, p.State())
	require.Error(t, p.WaitRunning(context.Background()))
	select {
	case <-run.started:
		t.Fatal("a restart=never process was restarted")
	default:
	}
}

func TestReadyGatesRunning(t *testing.T) {
	clk, run, rec := newFakeClock(), newFakeRunner(), newRecorder()
	s := New(Options{Runner: run, Clock: clk, OnEvent: rec.on})
	ready := make(chan struct{})
	p, err := s.Start(Spec{Name: "xvfb", Restart: RestartNever, Ready: func(ctx context.Context) error {
		select {
		case <-ready:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	require.NoError(t, err)
	run.next(t)
	rec.waitState(t, shared.StateStarting)
	require.Equal(t, shared.StateStarting, p.State())
	close(ready)
	require.NoError(t, p.WaitRunning(testCtx(t)))
}

func TestStopEscalatesToKillAfterGrace(t *testing.T) {
	clk, run, rec := newFakeClock(), newFakeRunner(), newRecorder()
	s := New(Options{Runner: run, Clock: clk, OnEvent: rec.on})
	p, err := s.Start(Spec{Name: "stubborn", Restart: RestartAlways})
	require.NoError(t, err)
	fp := run.next(t)
	fp.ignoreTerm = true
	rec.waitState(t, shared.StateRunning)
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(context.Background()) }()
	require.Equal(t, syscall.SIGTERM, <-fp.signals)
	tm := clk.nextTimer(t)
	require.Equal(t, StopGrace, tm.d)
	select {
	case <-stopped:
		t.Fatal("stopped before the grace period ended")
	default:
	}
	tm.ch <- clk.Now()
	require.Equal(t, syscall.SIGKILL, <-fp.signals)
	require.NoError(t, <-stopped)
	require.Equal(t, shared.StateStopped, p.State())
	require.NoError(t, p.Stop(context.Background()), "Stop is safe twice")
}

func TestStartFailureIsACrashAndRetried(t *testing.T) {
	clk, run, rec := newFakeClock(), newFakeRunner(), newRecorder()
	run.failN = 1
	s := New(Options{Runner: run, Clock: clk, OnEvent: rec.on})
	_, err := s.Start(Spec{Name: "codex", Restart: RestartAlways})
	require.NoError(t, err)
	e := rec.waitState(t, shared.StateCrashed)
	require.Contains(t, e.Error, "exec failed")
	clk.nextTimer(t).ch <- clk.Now()
	run.next(t)
	rec.waitState(t, shared.StateRunning)
	s.StopAll(context.Background())
}

func TestStartAfterStopAllRefused(t *testing.T) {
	s := New(Options{Runner: newFakeRunner(), Clock: newFakeClock()})
	s.StopAll(context.Background())
	_, err := s.Start(Spec{Name: "x"})
	require.ErrorIs(t, err, ErrClosed)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

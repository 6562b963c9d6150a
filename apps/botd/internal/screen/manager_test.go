package screen

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func codeOf(err error) shared.Code {
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func intp(v int) *int       { return &v }
func strp(v string) *string { return &v }

func TestEnsureSharesOneStart(t *testing.T) {
	f := newFixture(t, 4, 0)
	f.be.gate = make(chan struct{})
	const n = 8
	got := make(chan *Screen, n)
	for i := 0; i < n; i++ {
		go func() {
			s, err := f.m.Ensure(ctxT(t), "a")
			require.NoError(t, err)
			got <- s
		}()
	}
	var open sync.Once
	release := func() { open.Do(func() { close(f.be.gate) }) }
	t.Cleanup(release) // a failed wait below must not leave the start hanging
	eventually(t, "a start", func() bool { return f.be.starts.Load() == 1 })
	// Every caller (the one that began it too) is parked on that one start,
	// none starting its own.
	eventually(t, "every caller waiting on the start", func() bool { return goroutinesIn("screen.(*op).wait") == n })
	release()
	first := <-got
	for i := 1; i < n; i++ {
		require.Same(t, first, <-got)
	}
	require.EqualValues(t, 1, f.be.starts.Load())
	require.Equal(t, "a@0", f.running())
}

// probeLikeHost is a slotFree that, like the host probe, holds the slot's
// ports for a moment: a probe that overlaps another finds the slot taken.
func probeLikeHost() func(int) bool {
	var busy sync.Mutex
	return func(int) bool {
		if !busy.TryLock() {
			return false
		}
		defer busy.Unlock()
		time.Sleep(2 * time.Millisecond)
		return true
	}
}

// Concurrent starts, of one screen or of several, never see each other's
// host probe as a slot in use: one screen gets slot 0, and several all
// start (none told "no free display slot").
func TestConcurrentStartsProbeOneAtATime(t *testing.T) {
	for round := 0; round < 20; round++ {
		f := &fixture{be: &fakeBackend{}, clk: &fakeClock{now: time.Unix(1_700_000_000, 0)}, ev: &recorder{}}
		f.m = New(Options{Home: t.TempDir(), MaxScreens: 4, Clock: f.clk, Events: f.ev, Log: zerolog.Nop(),
			backend: f.be, slotFree: probeLikeHost()})
		var wg sync.WaitGroup
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := f.m.Ensure(ctxT(t), "a")
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		require.Equal(t, "a@0", f.running(), "round %d", round)
		for _, id := range []string{"b", "c", "d"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := f.m.Ensure(ctxT(t), id)
				assert.NoError(t, err, "round %d: %s", round, id)
			}()
		}
		wg.Wait()
		require.Len(t, strings.Fields(f.running()), 4, "round %d", round)
		f.m.Close(context.Background())
	}
}

func TestSlotsLowestFreeAndReuse(t *testing.T) {
	f := newFixture(t, 4, 0)
	for _, id := range []string{"a", "b", "c"} {
		_, err := f.m.Ensure(ctxT(t), id)
		require.NoError(t, err)
	}
	require.Equal(t, "a@0 b@1 c@2", f.running())
	require.NoError(t, f.m.Stop(ctxT(t), "b"))
	_, err := f.m.Ensure(ctxT(t), "d")
	require.NoError(t, err)
	require.Equal(t, "a@0 c@2 d@1", f.running())
	in, _ := f.m.Info("d")
	require.Equal(t, ":11", in.Display)
	require.Equal(t, Ports{View: 6082, Control: 6083}, *in.Ports)
}

func TestEvictionOrder(t *testing.T) {
	type setup struct {
		held, watched bool
		usedAgo       time.Duration
	}
	for _, tc := range []struct {
		name        string
		a, b        setup
		wantRunning string // after ensuring c
		wantCode    shared.Code
	}{
		{"least recently used goes", setup{usedAgo: 10 * time.Minute}, setup{usedAgo: time.Minute}, "b@1 c@0", ""},
		{"unwatched before watched", setup{watched: true, usedAgo: 10 * time.Minute}, setup{usedAgo: time.Minute}, "a@0 c@1", ""},
		{"both watched: LRU", setup{watched: true, usedAgo: time.Minute}, setup{watched: true, usedAgo: 10 * time.Minute}, "a@0 c@1", ""},
		{"held is never stopped", setup{held: true, usedAgo: 10 * time.Minute}, setup{usedAgo: time.Minute}, "a@0 c@1", ""},
		{"held beats unwatched", setup{held: true}, setup{watched: true}, "a@0 c@1", ""},
		{"all held: MULTI_SCREEN_UNAVAILABLE", setup{held: true}, setup{held: true}, "a@0 b@1", shared.CodeMultiScreen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 2, 0)
			base := f.clk.Now()
			for _, x := range []struct {
				id string
				s  setup
			}{{"a", tc.a}, {"b", tc.b}} {
				_, err := f.m.Ensure(ctxT(t), x.id)
				require.NoError(t, err)
				if x.s.held {
					_, err := f.m.Leases().Acquire(x.id, lease.Agent, "run-"+x.id, time.Hour)
					require.NoError(t, err)
				}
				if x.s.watched {
					_, err := f.m.Watch(x.id)
					require.NoError(t, err)
				}
				s := f.m.Get(x.id)
				f.m.mu.Lock()
				s.lastUsed = base.Add(-x.s.usedAgo)
				f.m.mu.Unlock()
			}
			_, err := f.m.Ensure(ctxT(t), "c")
			require.Equal(t, tc.wantCode, codeOf(err))
			require.Equal(t, tc.wantRunning, f.running())
		})
	}
}

func TestWatchNeverStarts(t *testing.T) {
	f := newFixture(t, 2, 0)
	release, err := f.m.Watch("a")
	require.NoError(t, err)
	in, ok := f.m.Info("a")
	require.True(t, ok)
	require.Equal(t, shared.StateStopped, in.State)
	require.Equal(t, 1, in.Watchers)
	release()
	release()
	in, _ = f.m.Info("a")
	require.Equal(t, 0, in.Watchers)
	require.EqualValues(t, 0, f.be.starts.Load())
}

func TestIdleStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		held     bool
		after    time.Duration
		wantStop bool
	}{
		{"used recently", false, 19 * time.Minute, false},
		{"idle too long", false, 20 * time.Minute, true},
		{"idle but held", true, 30 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 4, 20*time.Minute)
			_, err := f.m.Ensure(ctxT(t), "a")
			require.NoError(t, err)
			if tc.held {
				_, err := f.m.Leases().Acquire("a", lease.Agent, "run", time.Hour)
				require.NoError(t, err)
			}
			f.clk.advance(tc.after)
			f.m.Sweep()
			if tc.wantStop {
				eventually(t, "idle stop", func() bool { return f.running() == "" })
				require.Contains(t, f.be.events(), "stop a")
			} else {
				// Sweep begins any stop before it returns: none began.
				sa := f.m.Get("a")
				f.m.mu.Lock()
				stopping := sa.stop != nil
				f.m.mu.Unlock()
				require.False(t, stopping, "the sweep began a stop")
				require.Equal(t, "a@0", f.running())
				require.NotContains(t, f.be.events(), "stop a")
			}
		})
	}
}

func TestLeaseSweptEveryRun(t *testing.T) {
	f := newFixture(t, 4, 0)
	_, err := f.m.Register("a")
	require.NoError(t, err)
	_, err = f.m.Leases().Acquire("a", lease.Agent, "run", 10*time.Second)
	require.NoError(t, err)
	f.clk.advance(11 * time.Second)
	f.m.Sweep()
	require.True(t, f.ev.has("lease a expired"))
}

func TestStopRunsBeforeStopHooksFirst(t *testing.T) {
	f := newFixture(t, 4, 0)
	f.m.BeforeStop(func(ctx context.Context, s *Screen) { f.be.record("browser " + s.ID) })
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	require.NoError(t, f.m.Stop(ctxT(t), "a"))
	require.Equal(t, "start a slot=0\nbrowser a\nstop a", f.be.events())
}

func TestForgetDeletesProfile(t *testing.T) {
	f := newFixture(t, 4, 0)
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	dir := f.m.ProfileDir("a")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "chromium"), 0o700))
	_, err = f.m.Leases().Acquire("a", lease.Agent, "run", 0)
	require.NoError(t, err)
	require.NoError(t, f.m.Forget(ctxT(t), "a"))
	require.NoDirExists(t, dir)
	require.Nil(t, f.m.Get("a"))
	require.False(t, f.m.Leases().Held("a"))
	require.Contains(t, f.be.events(), "stop a")
	require.Equal(t, shared.CodeNotFound, codeOf(f.m.WithLease(ctxT(t), "a", "x", func(context.Context, *Screen) error { return nil })))
}

func leased(t *testing.T, f *fixture, id string, kind lease.Kind) lease.Lease {
	t.Helper()
	_, err := f.m.Register(id)
	require.NoError(t, err)
	l, err := f.m.Leases().Acquire(id, kind, "h-"+string(kind), 0)
	require.NoError(t, err)
	return l
}

func act(f *fixture, ctx context.Context, id, leaseID string, actions ...shared.Action) (*ActResult, error) {
	var res *ActResult
	err := f.m.WithLease(ctx, id, leaseID, func(ctx context.Context, s *Screen) error {
		var err error
		res, err = s.Act(ctx, actions)
		return err
	})
	return res, err
}

func TestLeaseRules(t *testing.T) {
	f := newFixture(t, 4, 0)
	l := leased(t, f, "a", lease.Agent)
	move := shared.Action{Type: shared.ActionMove, X: intp(1), Y: intp(2)}
	_, err := act(f, ctxT(t), "a", "wrong", move)
	require.Equal(t, shared.CodeLeaseRequired, codeOf(err))
	_, err = act(f, ctxT(t), "a", "", move)
	require.Equal(t, shared.CodeLeaseRequired, codeOf(err))
	res, err := act(f, ctxT(t), "a", l.ID, move)
	require.NoError(t, err)
	require.True(t, res.Results[0].OK)
	require.NotEmpty(t, res.Observation.Image)
	_, err = act(f, ctxT(t), "nope", l.ID, move)
	require.Equal(t, shared.CodeNotFound, codeOf(err))
}

func TestPreemptionCancelsInFlightAction(t *testing.T) {
	f := newFixture(t, 4, 0)
	l := leased(t, f, "a", lease.Agent)
	s, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	gen := s.Generation()
	errc := make(chan error, 1)
	go func() {
		_, err := act(f, ctxT(t), "a", l.ID, shared.Action{Type: shared.ActionType, Text: strp("block")})
		errc <- err
	}()
	<-f.be.stack("a").drv.started
	u, err := f.m.Leases().Acquire("a", lease.User, "ann", 0)
	require.NoError(t, err)
	select {
	case err := <-errc:
		require.Equal(t, shared.CodeUserHasControl, codeOf(err))
	case <-time.After(5 * time.Second):
		t.Fatal("the in-flight action was not cut off")
	}
	require.Greater(t, s.Generation(), gen)
	require.True(t, f.ev.has("preempted a preempted"))
	// The agent's old lease now meets the user.
	_, err = act(f, ctxT(t), "a", l.ID, shared.Action{Type: shared.ActionScreenshot})
	require.Equal(t, shared.CodeUserHasControl, codeOf(err))
	// The user acts.
	_, err = act(f, ctxT(t), "a", u.ID, shared.Action{Type: shared.ActionScreenshot})
	require.NoError(t, err)
}

func TestPreemptionDuringWaitReturnsNoFrame(t *testing.T) {
	f := newFixture(t, 4, 0)
	l := leased(t, f, "a", lease.Agent)
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	errc := make(chan error, 1)
	var res *ActResult
	go func() {
		var err error
		res, err = act(f, ctxT(t), "a", l.ID, shared.Action{Type: shared.ActionWait, Ms: intp(5000)})
		errc <- err
	}()
	eventually(t, "in flight", func() bool {
		s := f.m.Get("a")
		s.inMu.Lock()
		defer s.inMu.Unlock()
		return len(s.inflight) == 1
	})
	_, err = f.m.Leases().Acquire("a", lease.User, "ann", 0)
	require.NoError(t, err)
	// Left alone, the 5 s wait would succeed (or time out at ctxT's 10 s
	// with another code): the user's code is the preemption itself.
	require.Equal(t, shared.CodeUserHasControl, codeOf(<-errc))
	require.Nil(t, res)
}

func TestActionsOnOneScreenRunInArrivalOrder(t *testing.T) {
	f := newFixture(t, 4, 0)
	l := leased(t, f, "a", lease.Agent)
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	s := f.m.Get("a")
	hold, holding := make(chan struct{}), make(chan struct{})
	go func() {
		_ = f.m.WithLease(ctxT(t), "a", l.ID, func(context.Context, *Screen) error { close(holding); <-hold; return nil })
	}()
	<-holding // the first holds the queue
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := act(f, ctxT(t), "a", l.ID, shared.Action{Type: shared.ActionMove, X: intp(i), Y: intp(0)})
			require.NoError(t, err)
		}()
		eventually(t, "queued", func() bool { return s.q.Queued() == i+1 })
	}
	close(hold)
	wg.Wait()
	require.Equal(t, []string{"move:0", "move:1", "move:2", "move:3", "move:4"}, f.be.stack("a").drv.actions())
}

// TestTwoScreensActInParallel: a long action on one screen does not hold
// another screen's actions: b's whole batch runs while a's is in flight.
func TestTwoScreensActInParallel(t *testing.T) {
	f := newFixture(t, 4, 0)
	la, lb := leased(t, f, "a", lease.Agent), leased(t, f, "b", lease.Agent)
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	actx, acancel := context.WithCancel(ctxT(t))
	defer acancel()
	errc := make(chan error, 1)
	go func() {
		_, err := act(f, actx, "a", la.ID, shared.Action{Type: shared.ActionWait, Ms: intp(60_000)})
		errc <- err
	}()
	inflight := func() int {
		s := f.m.Get("a")
		s.inMu.Lock()
		defer s.inMu.Unlock()
		return len(s.inflight)
	}
	eventually(t, "a's wait in flight", func() bool { return inflight() == 1 })
	_, err = act(f, ctxT(t), "b", lb.ID, shared.Action{Type: shared.ActionWait, Ms: intp(1)}, shared.Action{Type: shared.ActionMove, X: intp(3), Y: intp(4)})
	require.NoError(t, err, "screens should not wait for each other")
	require.Equal(t, 1, inflight(), "b finished while a was still acting")
	require.Equal(t, []string{"move:3"}, f.be.stack("b").drv.actions())
	acancel()
	require.Error(t, <-errc)
}

// goroutinesIn counts the goroutines whose stack is inside fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), fn+"(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestDisplayGoneMarksCrashedAndRestarts(t *testing.T) {
	f := newFixture(t, 4, 0)
	l := leased(t, f, "a", lease.Agent)
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	_, err = act(f, ctxT(t), "a", l.ID, shared.Action{Type: shared.ActionType, Text: strp("gone")})
	require.Equal(t, shared.CodeScreenUnavailable, codeOf(err))
	eventually(t, "crashed", func() bool { in, _ := f.m.Info("a"); return in.State == shared.StateCrashed && in.Slot == nil })
	_, err = act(f, ctxT(t), "a", l.ID, shared.Action{Type: shared.ActionScreenshot})
	require.NoError(t, err)
	require.EqualValues(t, 2, f.be.starts.Load())
}

func TestCrashWatcher(t *testing.T) {
	f := newFixture(t, 4, 0)
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	f.be.stack("a").die()
	eventually(t, "crashed", func() bool { in, _ := f.m.Info("a"); return in.State == shared.StateCrashed && in.Slot == nil })
	require.True(t, f.ev.has("screen a crashed"))
	_, err = f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	require.Equal(t, "a@0", f.running())
}

func TestStartFailure(t *testing.T) {
	f := newFixture(t, 4, 0)
	f.be.fail = true
	_, err := f.m.Ensure(ctxT(t), "a")
	require.Equal(t, shared.CodeScreenUnavailable, codeOf(err))
	in, _ := f.m.Info("a")
	require.Equal(t, shared.StateCrashed, in.State)
	require.Nil(t, in.Slot, "a failed start frees its slot")
}

func TestUnchangedFrame(t *testing.T) {
	f := newFixture(t, 4, 0)
	l := leased(t, f, "a", lease.Agent)
	observe := func(leaseID string) *Observation {
		var obs *Observation
		require.NoError(t, f.m.WithLease(ctxT(t), "a", leaseID, func(ctx context.Context, s *Screen) error {
			var err error
			obs, err = s.Observe(ctx)
			return err
		}))
		return obs
	}
	o1 := observe(l.ID)
	require.False(t, o1.Unchanged)
	require.NotEmpty(t, o1.Image)
	o2 := observe(l.ID)
	require.True(t, o2.Unchanged)
	require.Empty(t, o2.Image)
	require.Equal(t, o1.FrameHash, o2.FrameHash)
	require.Equal(t, o1.Pointer, o2.Pointer)
	f.be.stack("a").drv.setHash(2)
	o3 := observe(l.ID)
	require.False(t, o3.Unchanged)
	require.NotEmpty(t, o3.Image)
	// A new holder has never seen the frame: it gets the bytes.
	require.NoError(t, f.m.Leases().Release("a", l.ID))
	l2, err := f.m.Leases().Acquire("a", lease.Agent, "run2", 0)
	require.NoError(t, err)
	o4 := observe(l2.ID)
	require.False(t, o4.Unchanged)
	require.NotEmpty(t, o4.Image)
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{
		"a": true, "bot-1_X": true, string(make([]byte, 65)): false, "": false,
		"a/b": false, "..": false, "a b": false, "é": false,
	} {
		require.Equal(t, ok, ValidID(id) == nil, "%q", id)
	}
}

func TestProfilesOnDiskAreKnownAfterRestart(t *testing.T) {
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, "desktop", "screens", "old-bot", "chromium"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(home, "desktop", "screens", "bad.id"), 0o755))
	m := New(Options{Home: home, backend: &fakeBackend{}, slotFree: func(int) bool { return true }})
	require.NotNil(t, m.Get("old-bot"))
	require.Nil(t, m.Get("bad.id"))
	in, _ := m.Info("old-bot")
	require.Equal(t, shared.StateStopped, in.State)
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	f := &fixture{be: &fakeBackend{}, clk: &fakeClock{now: time.Unix(1_700_000_000, 0)}, ev: &recorder{}}
	m := New(Options{Home: t.TempDir(), Clock: f.clk, backend: f.be, slotFree: func(int) bool { return true }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	for _, id := range []string{"a", "b"} {
		_, err := m.Ensure(ctxT(t), id)
		require.NoError(t, err)
	}
	cancel()
	<-done
	m.Close(ctxT(t))
	m.Close(ctxT(t)) // safe twice
	eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	_, err := m.Ensure(ctxT(t), "c")
	require.Equal(t, shared.CodeUnavailable, codeOf(err))
}

func TestLongBatchRenewsItsLease(t *testing.T) {
	f := newFixture(t, 4, 0)
	_, err := f.m.Register("a")
	require.NoError(t, err)
	l, err := f.m.Leases().Acquire("a", lease.Agent, "run", 10*time.Second)
	require.NoError(t, err)
	var did int
	require.NoError(t, f.m.WithLease(ctxT(t), "a", l.ID, func(ctx context.Context, s *Screen) error {
		for i := 0; i < 5; i++ {
			f.clk.advance(6 * time.Second) // each step outlasts half the TTL
			if err := s.Held(ctx); err != nil {
				return err
			}
			did++
		}
		return nil
	}))
	require.Equal(t, 5, did)
}

func TestOnStartHooksSeeTheTarget(t *testing.T) {
	f := newFixture(t, 4, 0)
	var got Target
	var ok bool
	f.m.OnStart(func(ctx context.Context, s *Screen) error {
		got, ok = f.m.Target(s.ID)
		return nil
	})
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ":10", got.Display)
	require.Equal(t, filepath.Join(f.m.DesktopHome(), ".Xauthority-0"), got.XAuthority)
	require.NoError(t, f.m.Stop(ctxT(t), "a"))
	_, ok = f.m.Target("a")
	require.False(t, ok)
}

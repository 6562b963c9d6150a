package screen

import (
	"context"
	"fmt"
	"image"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/pkg/shared"
)

// fakeClock is set by hand; its After never fires (tests call Sweep).
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *fakeClock) After(time.Duration) <-chan time.Time { return make(chan time.Time) }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fakeBackend records starts and stops instead of running processes.
type fakeBackend struct {
	// mu guards log, starts and stacks.
	mu     sync.Mutex
	log    []string
	starts atomic.Int32
	stacks map[string]*fakeStack
	// gate, when set, holds every start until closed.
	gate chan struct{}
	// fail makes starts fail.
	fail bool
}

func (b *fakeBackend) record(s string) {
	b.mu.Lock()
	b.log = append(b.log, s)
	b.mu.Unlock()
}

func (b *fakeBackend) events() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.log, "\n")
}

func (b *fakeBackend) start(ctx context.Context, s *Screen, slot int) (stack, error) {
	b.starts.Add(1)
	if b.gate != nil {
		<-b.gate
	}
	if b.fail {
		return nil, fmt.Errorf("no X")
	}
	b.record(fmt.Sprintf("start %s slot=%d", s.ID, slot))
	st := &fakeStack{b: b, id: s.ID, dead: make(chan struct{}), drv: newFakeDriver()}
	b.mu.Lock()
	if b.stacks == nil {
		b.stacks = map[string]*fakeStack{}
	}
	b.stacks[s.ID] = st
	b.mu.Unlock()
	return st, nil
}

func (b *fakeBackend) stack(id string) *fakeStack {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stacks[id]
}

type fakeStack struct {
	b       *fakeBackend
	id      string
	dead    chan struct{}
	dieOnce sync.Once
	drv     *fakeDriver
	clip    string
}

func (f *fakeStack) died() <-chan struct{}  { return f.dead }
func (f *fakeStack) drawn() <-chan struct{} { c := make(chan struct{}); close(c); return c }
func (f *fakeStack) die()                   { f.dieOnce.Do(func() { close(f.dead) }) }
func (f *fakeStack) driver() Driver         { return f.drv }
func (f *fakeStack) stop(ctx context.Context) error {
	f.b.record("stop " + f.id)
	f.die() // like Xvfb's Done, which closes however X ends
	return nil
}
func (f *fakeStack) readClipboard(ctx context.Context) (string, error) {
	f.b.record("clipboard read " + f.id)
	return f.clip, nil
}
func (f *fakeStack) writeClipboard(ctx context.Context, text string) error {
	f.b.record("clipboard write " + f.id)
	f.clip = text
	return nil
}
func (f *fakeStack) launch(ctx context.Context, name string, argv []string) (int, error) {
	f.b.record("launch " + f.id + " " + strings.Join(argv, " "))
	return 42, nil
}

// fakeDriver records actions. A "type" of "block" blocks until its ctx is
// cancelled (like an input process SIGKILLed on preemption); "gone" fails
// as a dead display.
type fakeDriver struct {
	// mu guards did and hash.
	mu   sync.Mutex
	did  []string
	hash uint64
	// started is signalled when a blocking action begins.
	started chan struct{}
}

func newFakeDriver() *fakeDriver { return &fakeDriver{hash: 1, started: make(chan struct{}, 16)} }

func (d *fakeDriver) Do(ctx context.Context, a shared.Action) error {
	desc := a.Type
	if a.Text != nil {
		desc += ":" + *a.Text
	}
	if a.X != nil {
		desc += fmt.Sprintf(":%d", *a.X)
	}
	d.mu.Lock()
	d.did = append(d.did, desc)
	d.mu.Unlock()
	if a.Text != nil && *a.Text == "block" {
		d.started <- struct{}{}
		<-ctx.Done()
		return fmt.Errorf("input killed: %w", ctx.Err())
	}
	if a.Text != nil && *a.Text == "gone" {
		return fmt.Errorf("xtest: %w", ErrDisplayGone)
	}
	return nil
}

func (d *fakeDriver) actions() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.did...)
}

func (d *fakeDriver) setHash(h uint64) {
	d.mu.Lock()
	d.hash = h
	d.mu.Unlock()
}

func (d *fakeDriver) CaptureIfChanged(ctx context.Context, prev uint64) (Frame, bool, error) {
	d.mu.Lock()
	h := d.hash
	d.mu.Unlock()
	f := Frame{Width: Width, Height: Height, Pointer: image.Pt(3, 4), Hash: h}
	if prev != 0 && h == prev {
		return f, false, nil
	}
	f.JPEG = []byte(fmt.Sprintf("jpeg-%d", h))
	return f, true, nil
}

func (d *fakeDriver) Close() error { return nil }

func (d *fakeDriver) Windows(ctx context.Context) ([]shared.Window, error) {
	return []shared.Window{{ID: "0x1", Title: "fake", App: "Fake", Box: shared.Rect{W: 10, H: 10}}}, nil
}

func (d *fakeDriver) TypeSecret(ctx context.Context, secret string) error {
	d.mu.Lock()
	d.did = append(d.did, "secret")
	d.mu.Unlock()
	return nil
}

// recorder collects published events.
type recorder struct {
	// mu guards evs.
	mu  sync.Mutex
	evs []string
}

func (r *recorder) Publish(typ string, data any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch d := data.(type) {
	case leaseEvent:
		r.evs = append(r.evs, typ+" "+d.Screen+" "+d.What)
	case screenEvent:
		r.evs = append(r.evs, typ+" "+d.ID+" "+d.State)
	default:
		r.evs = append(r.evs, typ)
	}
}

func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.evs {
		if e == s {
			return true
		}
	}
	return false
}

type fixture struct {
	m   *Manager
	be  *fakeBackend
	clk *fakeClock
	ev  *recorder
}

func newFixture(t *testing.T, max int, idle time.Duration) *fixture {
	t.Helper()
	f := &fixture{be: &fakeBackend{}, clk: &fakeClock{now: time.Unix(1_700_000_000, 0)}, ev: &recorder{}}
	f.m = New(Options{Home: t.TempDir(), MaxScreens: max, Idle: idle, Clock: f.clk, Events: f.ev, Log: zerolog.Nop(),
		backend: f.be, slotFree: func(int) bool { return true }})
	t.Cleanup(func() { f.m.Close(context.Background()) })
	return f
}

// running lists running screens as "id@slot", sorted.
func (f *fixture) running() string {
	var out []string
	for _, in := range f.m.List() {
		if in.State == shared.StateRunning {
			out = append(out, fmt.Sprintf("%s@%d", in.ID, *in.Slot))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

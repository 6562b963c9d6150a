// Package screen owns the computer's screens: one real desktop per teammate
// (Xvfb, an XFCE session and x11vnc, all as the desktop user under the
// supervisor), their slots, MAX_SCREENS eviction and idle stop, the leases
// that decide who may act, and the serialized, preemptible desktop actions
// on top of package desktop. It also serves the /screens routes.
package screen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/fifo"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Fixed geometry of every screen.
const (
	Width  = 1280
	Height = 800
	// MaxSlots caps MAX_SCREENS: at most this many screens (a spare
	// counted) hold a slot at once.
	MaxSlots = 32
	// SlotSpan is how many slots exist: 0..SlotSpan-1, slot n drawing on
	// display DisplayBase+n. Far more than MaxSlots, so that display
	// numbers someone else holds (any fixed set a bot can squat) never
	// leave a screen without one (xdisplay.go).
	SlotSpan = 1024
	// SweepEvery is how often leases and idle screens are swept.
	SweepEvery = 5 * time.Second
	// StartTimeout bounds one start of a screen's whole stack.
	StartTimeout = 30 * time.Second
	// StopTimeout bounds one stop.
	StopTimeout = 20 * time.Second
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID checks a screen id: [A-Za-z0-9_-]{1,64}, else 400 invalid_id.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidID, "screen id must match [A-Za-z0-9_-]{1,64}")
	}
	return nil
}

// Clock is the time the manager sees; tests inject a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Publisher receives events for /events (health.Hub satisfies it).
type Publisher interface {
	Publish(typ string, data any)
}

// Options configures a Manager. Zero values get the design's defaults.
type Options struct {
	// Home is BOTD_HOME; Xauthority files and profiles live under
	// Home/desktop.
	Home         string
	DisplayBase  int
	ViewPortBase int
	MaxScreens   int
	// Idle stops screens nobody used for this long (0 = never).
	Idle time.Duration
	// ExtraEnv is added to every screen process's environment (e.g.
	// XDG_CONFIG_DIRS in tests).
	ExtraEnv []string
	// Desktop is the user every screen process runs as.
	Desktop osuser.User
	// Runner and Supervisor start the processes (defaults: real ones).
	Runner     runner.Runner
	Supervisor *supervisor.Supervisor
	Clock      Clock
	Log        zerolog.Logger
	// Events receives screen, lease and preempted events (may be nil).
	Events Publisher
	// Changed is called after any change health shows (may be nil).
	Changed func()
	// NewDriver makes the input/capture driver of a running screen
	// (default: desktop.New).
	NewDriver func(Target) (Driver, error)
	// Blocked returns what the apply guard blocked on a screen since the
	// last observation (the browser package supplies it; may be nil).
	Blocked func(id string) []any
	// BrowserState reports a screen's browser for health (may be nil).
	BrowserState func(id string) shared.ProcessState

	// backend replaces the real process stack in unit tests.
	backend backend
	// slotFree reports whether nothing outside botd holds a slot's display
	// (tests replace it).
	slotFree func(slot int) bool
}

// Manager owns every screen.
type Manager struct {
	o      Options
	log    zerolog.Logger
	clock  Clock
	leases *lease.Table
	be     backend

	// hooksMu guards onStart, beforeStop, blocked and browserState.
	hooksMu      sync.Mutex
	required     []func(ctx context.Context, s *Screen) error
	onStart      []func(ctx context.Context, s *Screen) error
	beforeStop   []func(ctx context.Context, s *Screen)
	blocked      func(id string) []any
	browserState func(id string) shared.ProcessState

	// elemMu guards elements and desk.
	elemMu   sync.Mutex
	elements ElementSource
	desk     *desktopElems // desktop_elements.go

	// launchMu guards launchers.
	launchMu  sync.Mutex
	launchers map[string]Launcher

	// bg counts background starts (takeover wakes the screen).
	bg sync.WaitGroup

	// probeMu keeps host probes (slotFree) one at a time: a probe binds a
	// display's abstract X name for a moment, and a second probe running
	// alongside would find it taken by the first.
	probeMu sync.Mutex

	// mu guards screens, closed, spare and every Screen's lifecycle fields
	// (see Screen).
	mu      sync.Mutex
	screens map[string]*Screen
	closed  bool
	// spare is a started stack the next screen takes (spare.go).
	spare *spareStack

	// recOnce makes recState, the screens' recordings (record.go).
	recOnce  sync.Once
	recState *recordings
}

// New returns a Manager. Call Run to sweep, Close to stop every screen.
func New(o Options) *Manager {
	if o.DisplayBase == 0 {
		o.DisplayBase = 10
	}
	if o.ViewPortBase == 0 {
		o.ViewPortBase = 6080
	}
	if o.MaxScreens <= 0 {
		o.MaxScreens = 4
	}
	if o.MaxScreens > MaxSlots {
		o.MaxScreens = MaxSlots
	}
	if o.Runner == nil {
		o.Runner = runner.Exec{}
	}
	if o.Clock == nil {
		o.Clock = supervisor.RealClock{}
	}
	m := &Manager{o: o, log: o.Log.With().Str("component", "screen").Logger(), clock: o.Clock, screens: map[string]*Screen{}, launchers: defaultLaunchers()}
	if o.Supervisor == nil {
		l := m.log
		m.o.Supervisor = supervisor.New(supervisor.Options{Runner: o.Runner, Log: &l, OnEvent: func(e supervisor.Event) {
			if o.Events != nil {
				o.Events.Publish(shared.EventProcess, e)
			}
		}})
	}
	if m.o.slotFree == nil {
		m.o.slotFree = m.slotFreeOnHost
	}
	if m.o.NewDriver == nil {
		m.o.NewDriver = m.defaultDriver
	}
	m.be = o.backend
	if m.be == nil {
		m.be = &procBackend{m: m}
	}
	m.leases = lease.New(lease.Options{Now: o.Clock.Now, OnChange: m.leaseChanged})
	m.blocked, m.browserState = o.Blocked, o.BrowserState
	m.registerProfiles()
	return m
}

// registerProfiles makes every screen with a profile on disk known (as
// stopped), so after a botd restart GET /screens lists them and their
// teammates' next action starts them again.
func (m *Manager) registerProfiles() {
	ents, err := os.ReadDir(filepath.Join(m.DesktopHome(), "screens"))
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range ents {
		if e.IsDir() && ValidID(e.Name()) == nil && m.screens[e.Name()] == nil {
			m.newScreenLocked(e.Name())
		}
	}
}

// SetBlocked sets the source of an observation's "blocked" list (the
// browser package's apply guard).
func (m *Manager) SetBlocked(fn func(id string) []any) {
	m.hooksMu.Lock()
	defer m.hooksMu.Unlock()
	m.blocked = fn
}

// SetBrowserState sets how health learns a screen's browser state.
func (m *Manager) SetBrowserState(fn func(id string) shared.ProcessState) {
	m.hooksMu.Lock()
	defer m.hooksMu.Unlock()
	m.browserState = fn
}

// Leases is the lease table (for the routes and for tests).
func (m *Manager) Leases() *lease.Table { return m.leases }

// OnStart registers fn to run after a screen's stack is running and before
// Ensure returns (Target and Env already answer). An error is logged; the
// screen still runs.
func (m *Manager) OnStart(fn func(ctx context.Context, s *Screen) error) {
	m.hooksMu.Lock()
	defer m.hooksMu.Unlock()
	m.onStart = append(m.onStart, fn)
}

// OnStartRequired registers fn like OnStart, but its error fails the start
// (the stack is stopped and Ensure fails): a listener that cannot bind
// means someone else holds the port.
func (m *Manager) OnStartRequired(fn func(ctx context.Context, s *Screen) error) {
	m.hooksMu.Lock()
	defer m.hooksMu.Unlock()
	m.required = append(m.required, fn)
}

// BeforeStop registers fn to run first when a screen stops (the browser
// package stops Chromium here, so it saves its tabs), before anything that
// draws on the display is stopped. It also runs when the display died.
func (m *Manager) BeforeStop(fn func(ctx context.Context, s *Screen)) {
	m.hooksMu.Lock()
	defer m.hooksMu.Unlock()
	m.beforeStop = append(m.beforeStop, fn)
}

// op is one start or stop in flight; everyone who needs it waits on done.
type op struct {
	done chan struct{}
	err  error
}

func newOp() *op { return &op{done: make(chan struct{})} }

func (o *op) wait(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Screen is one teammate's desktop.
type Screen struct {
	// ID is the teammate's (or helper task's) id.
	ID string
	m  *Manager

	// These are guarded by m.mu.
	state     shared.ProcessState
	slot      int // -1 when it holds none
	stack     stack
	start     *op // a start in flight
	stop      *op // a stop in flight
	forgotten bool
	lastUsed  time.Time
	watchers  int
	lastErr   string
	// ports are the view and control ports package vnc bound for this
	// start (SetPorts); nil until then.
	ports *Ports

	// q serializes everything that acts on or observes the screen, in
	// arrival order.
	q fifo.Lock

	// inMu guards gen, inflight, nextTicket, lastHash, lastLease.
	inMu       sync.Mutex
	gen        uint64
	inflight   map[int]context.CancelCauseFunc
	nextTicket int
	lastHash   uint64
	lastLease  string
}

func (m *Manager) newScreenLocked(id string) *Screen {
	s := &Screen{ID: id, m: m, state: shared.StateStopped, slot: -1, lastUsed: m.clock.Now(), inflight: map[int]context.CancelCauseFunc{}}
	m.screens[id] = s
	return s
}

// Get returns the screen with id, or nil when botd does not know it (never
// started, leased or watched, or forgotten).
func (m *Manager) Get(id string) *Screen {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.screens[id]
}

// Register makes id known without starting it (acquiring a lease does this,
// so the first action starts the screen).
func (m *Manager) Register(id string) (*Screen, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	s := m.screens[id]
	if s == nil {
		s = m.newScreenLocked(id)
	}
	return s, nil
}

var errClosed = shared.Errorf(http.StatusServiceUnavailable, shared.CodeUnavailable, "botd is shutting down")

// Slot values of a running screen. A slot below MaxScreens asks for its
// own view and control ports (ViewPortBase+2*slot, +1: the ports a
// provider publishes or reserves for this botd); a higher one, and one
// whose own ports someone else holds, gets ports the kernel picks (0 here;
// package vnc reports the bound ones through SetPorts).
func (m *Manager) display(slot int) int { return m.o.DisplayBase + slot }
func (m *Manager) viewPort(slot int) int {
	if slot >= m.o.MaxScreens {
		return 0
	}
	return m.o.ViewPortBase + 2*slot
}
func (m *Manager) controlPort(slot int) int {
	if slot >= m.o.MaxScreens {
		return 0
	}
	return m.o.ViewPortBase + 2*slot + 1
}

// slotSpan is how many slots this botd has: SlotSpan, fewer when
// DisplayBase is so high that display numbers would pass 65535.
func (m *Manager) slotSpan() int {
	return max(1, min(SlotSpan, 65536-m.o.DisplayBase))
}

// SetPorts records the view and control ports package vnc bound for
// screen id's running stack (Info shows them); ignored when the screen
// holds no slot.
func (m *Manager) SetPorts(id string, p Ports) {
	m.mu.Lock()
	if s := m.screens[id]; s != nil && s.slot >= 0 {
		s.ports = &p
	}
	m.mu.Unlock()
}

// DesktopHome is $BOTD_HOME/desktop.
func (m *Manager) DesktopHome() string { return filepath.Join(m.o.Home, "desktop") }

// xauthPath is the per-slot cookie file.
func (m *Manager) xauthPath(slot int) string {
	return filepath.Join(m.DesktopHome(), fmt.Sprintf(".Xauthority-%d", slot))
}

// ProfileDir is the screen's durable profile directory (its Chromium
// profile lives under it).
func (m *Manager) ProfileDir(id string) string {
	return filepath.Join(m.DesktopHome(), "screens", id)
}

// Ensure starts screen id if it is not running and returns it once it is:
// X accepts our cookie and the window manager is up. Concurrent callers
// share one start. ctx bounds only this caller's wait: the start itself
// belongs to botd and goes on for the others.
func (m *Manager) Ensure(ctx context.Context, id string) (*Screen, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	// hostFree is which slots nothing outside botd holds, probed without
	// m.mu (the probe touches /tmp and binds ports), then used under it.
	var hostFree map[int]bool
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, errClosed
		}
		s := m.screens[id]
		if s == nil {
			s = m.newScreenLocked(id)
		}
		if s.forgotten {
			m.mu.Unlock()
			return nil, shared.Errorf(http.StatusConflict, shared.CodeConflict, "screen %s is being forgotten", id)
		}
		if o := s.start; o != nil {
			m.mu.Unlock()
			if err := o.wait(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if o := s.stop; o != nil {
			m.mu.Unlock()
			if err := o.wait(ctx); err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		if s.state == shared.StateRunning {
			s.lastUsed = m.clock.Now()
			m.mu.Unlock()
			return s, nil
		}
		if s.stack != nil {
			// Crashed with processes left over: tear them down first.
			o := m.beginStopLocked(s, "crashed")
			m.mu.Unlock()
			_ = o.wait(ctx)
			continue
		}
		if sp, starting := m.takeSpareLocked(); sp != nil {
			// A spare is running: this screen takes it (spare.go).
			o := newOp()
			s.start, s.slot, s.state, s.lastErr = o, sp.slot, shared.StateStarting, ""
			m.mu.Unlock()
			m.screenChanged(s)
			go m.runStartWith(s, sp.slot, o, m.adopt(s, sp))
			if err := o.wait(ctx); err != nil {
				return nil, err
			}
			continue
		} else if starting != nil {
			m.mu.Unlock()
			select {
			case <-starting:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		if m.busyLocked() >= m.o.MaxScreens {
			v := m.victimLocked()
			if v == nil {
				m.mu.Unlock()
				return nil, shared.Errorf(http.StatusConflict, shared.CodeMultiScreen, "all %d screens are held; release one first", m.o.MaxScreens)
			}
			m.log.Info().Str("screen", v.ID).Str("for", id).Msg("stopping an idle screen to make room")
			o := m.beginStopLocked(v, "evicted")
			m.mu.Unlock()
			if err := o.wait(ctx); err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		if hostFree == nil {
			cands := m.unusedSlotsLocked()
			m.mu.Unlock()
			hostFree = m.probeHost(cands)
			continue
		}
		slot := m.freeSlotLocked(hostFree)
		probed := len(hostFree)
		hostFree = nil
		if slot < 0 {
			m.mu.Unlock()
			if probed > 0 {
				// Another start took the slot found free while the
				// mutex was let go: probe again.
				continue
			}
			return nil, shared.Errorf(http.StatusConflict, shared.CodeMultiScreen, "no free display slot")
		}
		o := newOp()
		s.start, s.slot, s.state, s.lastErr = o, slot, shared.StateStarting, ""
		m.mu.Unlock()
		m.screenChanged(s)
		go m.runStart(s, slot, o)
		if err := o.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// probeHost returns the first of cands (lowest first) that nothing outside
// botd holds, as a one-entry set, or an empty set. Called without m.mu.
func (m *Manager) probeHost(cands []int) map[int]bool {
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	free := map[int]bool{}
	for _, i := range cands {
		if m.o.slotFree(i) {
			free[i] = true
			break
		}
	}
	return free
}

// busyLocked counts screens that hold a slot (a spare holds one too).
func (m *Manager) busyLocked() int {
	n := 0
	if m.spare != nil {
		n++
	}
	for _, s := range m.screens {
		if s.slot >= 0 {
			n++
		}
	}
	return n
}

// unusedSlotsLocked lists the slots no screen holds, lowest first.
func (m *Manager) unusedSlotsLocked() []int {
	used := map[int]bool{}
	if m.spare != nil {
		used[m.spare.slot] = true
	}
	for _, s := range m.screens {
		if s.slot >= 0 {
			used[s.slot] = true
		}
	}
	var out []int
	for i := 0; i < m.slotSpan(); i++ {
		if !used[i] {
			out = append(out, i)
		}
	}
	return out
}

// freeSlotLocked is the lowest slot no screen holds among hostFree (probed
// by slotFree without the mutex), or -1.
func (m *Manager) freeSlotLocked(hostFree map[int]bool) int {
	for _, i := range m.unusedSlotsLocked() {
		if hostFree[i] {
			return i
		}
	}
	return -1
}

func (m *Manager) runStart(s *Screen, slot int, o *op) {
	m.runStartWith(s, slot, o, func(ctx context.Context) (stack, error) {
		return m.startMovingOn(ctx, s, slot, func(n int) { s.slot = n })
	})
}

// runStartWith is runStart with the stack from start (a new one, or a
// spare's).
func (m *Manager) runStartWith(s *Screen, slot int, o *op, start func(ctx context.Context) (stack, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	began := m.clock.Now()
	m.mu.Lock()
	s.ports = nil // this start's ports are bound by its hooks
	m.mu.Unlock()
	st, err := start(ctx)
	if err == nil {
		// The hooks may already ask for Target and Env.
		m.mu.Lock()
		s.stack = st
		m.mu.Unlock()
		m.hooksMu.Lock()
		required := append(([]func(context.Context, *Screen) error)(nil), m.required...)
		hooks := append(([]func(context.Context, *Screen) error)(nil), m.onStart...)
		m.hooksMu.Unlock()
		for _, h := range required {
			if err = h(ctx, s); err != nil {
				break
			}
		}
		if err != nil {
			hooks = nil
			m.mu.Lock()
			s.stack = nil
			m.mu.Unlock()
			sctx, scancel := context.WithTimeout(context.Background(), StopTimeout)
			_ = st.stop(sctx)
			scancel()
		}
		for _, h := range hooks {
			if herr := h(ctx, s); herr != nil {
				m.log.Warn().Str("screen", s.ID).Err(herr).Msg("start hook failed")
			}
		}
	}
	m.mu.Lock()
	s.start = nil
	slot = s.slot // start may have moved on to another slot (xdisplay.go)
	if err != nil {
		s.state, s.slot, s.lastErr = shared.StateCrashed, -1, err.Error()
		o.err = shared.Errorf(http.StatusServiceUnavailable, shared.CodeScreenUnavailable, "screen %s did not start", s.ID)
	} else {
		s.state, s.stack = shared.StateRunning, st
		s.lastUsed = m.clock.Now()
	}
	m.mu.Unlock()
	s.resetLastFrame()
	if err != nil {
		m.log.Error().Str("screen", s.ID).Int("slot", slot).Err(err).Msg("screen did not start")
	} else {
		m.log.Info().Str("screen", s.ID).Int("slot", slot).Int("display", m.display(slot)).Int64("elapsed_ms", m.clock.Now().Sub(began).Milliseconds()).Msg("screen running")
		go m.watchCrash(s, st)
	}
	close(o.done)
	m.screenChanged(s)
}

// watchCrash marks s crashed when its display dies on its own, cuts off
// in-flight actions and tears the rest of the stack down; the next Ensure
// starts it again.
func (m *Manager) watchCrash(s *Screen, st stack) {
	<-st.died()
	m.mu.Lock()
	if s.stack != st || s.stop != nil {
		m.mu.Unlock()
		return // a stop we asked for
	}
	s.state, s.lastErr = shared.StateCrashed, "the display died"
	m.beginStopLocked(s, "crashed")
	m.mu.Unlock()
	m.log.Warn().Str("screen", s.ID).Msg("display died; screen crashed")
}

// markCrashed is called when an action found the display gone before the
// watcher did.
func (m *Manager) markCrashed(s *Screen) {
	m.mu.Lock()
	if s.stack == nil || s.stop != nil {
		m.mu.Unlock()
		return
	}
	s.state, s.lastErr = shared.StateCrashed, "the display died"
	m.beginStopLocked(s, "crashed")
	m.mu.Unlock()
}

// errScreenStopped is the cause of an action cut off by a stop.
var errScreenStopped = errors.New("screen stopped")

// beginStopLocked starts stopping s in the background and returns the op.
// Order: in-flight actions are cut off, the BeforeStop hooks run (the
// browser first), then everything that draws, the X server last.
func (m *Manager) beginStopLocked(s *Screen, reason string) *op {
	if s.stop != nil {
		return s.stop
	}
	o := newOp()
	s.stop = o
	st, slot := s.stack, s.slot
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		s.cutOff(errScreenStopped)
		m.hooksMu.Lock()
		hooks := append(([]func(context.Context, *Screen))(nil), m.beforeStop...)
		m.hooksMu.Unlock()
		for _, h := range hooks {
			h(ctx, s)
		}
		var err error
		if st != nil {
			err = st.stop(ctx)
		}
		if slot >= 0 {
			_ = os.Remove(m.xauthPath(slot))
		}
		m.mu.Lock()
		s.stack, s.slot, s.stop = nil, -1, nil
		if s.state != shared.StateCrashed {
			s.state = shared.StateStopped
		}
		o.err = err
		m.mu.Unlock()
		if err != nil {
			m.log.Warn().Str("screen", s.ID).Str("reason", reason).Err(err).Msg("screen stop")
		} else {
			m.log.Info().Str("screen", s.ID).Str("reason", reason).Msg("screen stopped")
		}
		close(o.done)
		m.screenChanged(s)
	}()
	return o
}

// Stop stops screen id (its lease, if any, stays; the next action starts
// it again). Unknown ids are 404.
func (m *Manager) Stop(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	s := m.Get(id)
	if s == nil {
		return notFound(id)
	}
	return m.stopScreen(ctx, s, "requested")
}

func (m *Manager) stopScreen(ctx context.Context, s *Screen, reason string) error {
	for {
		m.mu.Lock()
		if o := s.start; o != nil {
			m.mu.Unlock()
			if err := o.wait(ctx); err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		if s.stack == nil && s.stop == nil {
			if s.state == shared.StateCrashed {
				s.state = shared.StateStopped
				m.mu.Unlock()
				m.screenChanged(s)
				return nil
			}
			m.mu.Unlock()
			return nil
		}
		o := m.beginStopLocked(s, reason)
		m.mu.Unlock()
		return o.wait(ctx)
	}
}

// Forget stops screen id, drops its lease and deletes its profile.
func (m *Manager) Forget(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	m.mu.Lock()
	s := m.screens[id]
	if s != nil {
		s.forgotten = true
	}
	m.mu.Unlock()
	if s != nil {
		if err := m.stopScreen(ctx, s, "forgotten"); err != nil {
			m.mu.Lock()
			s.forgotten = false // the caller may try again
			m.mu.Unlock()
			return err
		}
		m.mu.Lock()
		if m.screens[id] == s {
			delete(m.screens, id)
		}
		m.mu.Unlock()
	}
	m.leases.Drop(id)
	// desktop owns everything below $BOTD_HOME/desktop and may have put a
	// link anywhere in it: the profile goes through directory fds from
	// root's $BOTD_HOME, a link is removed as a link and never followed,
	// and a link in place of a parent ("screens") is refused.
	if err := safefs.RemoveAllNoFollow(m.o.Home, filepath.Join("desktop", "screens", id)); err != nil {
		if errors.Is(err, safefs.ErrUnsafe) {
			m.log.Warn().Str("screen", id).Err(err).Msg("forget refused a link planted in the desktop home")
			return shared.Errorf(http.StatusConflict, shared.CodeConflict, "screen %s: its directory is reached through a link botd does not follow; nothing was removed", id)
		}
		return fmt.Errorf("forget %s: %w", id, err)
	}
	if s != nil {
		m.publish(shared.EventScreen, screenEvent{ID: id, State: "forgotten"})
		m.changed()
	}
	return nil
}

// Watch marks id as watched (a viewer is connected) without starting it;
// watched screens are evicted last. Call release when the viewer leaves.
func (m *Manager) Watch(id string) (release func(), err error) {
	s, err := m.Register(id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	s.watchers++
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			s.watchers--
			m.mu.Unlock()
		})
	}, nil
}

// victimLocked picks the screen to stop to make room: running, not held,
// not busy starting or stopping; unwatched before watched, then least
// recently used. nil when every running screen is held.
func (m *Manager) victimLocked() *Screen {
	var cands []*Screen
	for _, s := range m.screens {
		if s.slot < 0 || s.start != nil || s.stop != nil {
			continue
		}
		if m.leases.Held(s.ID) {
			continue
		}
		cands = append(cands, s)
	}
	if len(cands) == 0 {
		return nil
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if (a.watchers > 0) != (b.watchers > 0) {
			return a.watchers == 0
		}
		if !a.lastUsed.Equal(b.lastUsed) {
			return a.lastUsed.Before(b.lastUsed)
		}
		return a.ID < b.ID
	})
	return cands[0]
}

// Sweep expires leases and stops screens idle for longer than Options.Idle
// (a held screen is never idle-stopped). Run calls it every SweepEvery.
func (m *Manager) Sweep() {
	m.leases.Sweep()
	if m.o.Idle <= 0 {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.screens {
		if s.state != shared.StateRunning || s.start != nil || s.stop != nil {
			continue
		}
		if now.Sub(s.lastUsed) < m.o.Idle || m.leases.Held(s.ID) {
			continue
		}
		m.log.Info().Str("screen", s.ID).Dur("idle", now.Sub(s.lastUsed)).Msg("stopping an idle screen")
		m.beginStopLocked(s, "idle")
	}
}

// Run sweeps every SweepEvery until ctx ends (Close stops the screens).
func (m *Manager) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(SweepEvery):
			m.Sweep()
		}
	}
}

// Close stops every screen (browsers first, via BeforeStop) and refuses
// new starts. Safe to call more than once.
func (m *Manager) Close(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	var all []*Screen
	for _, s := range m.screens {
		all = append(all, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.closeSpare(ctx) }()
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.stopScreen(ctx, s, "shutdown") }()
	}
	wg.Wait()
}

func notFound(id string) error {
	return shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no screen %s", id)
}

// touch records use (for idle stop and LRU eviction).
func (m *Manager) touch(s *Screen) {
	m.mu.Lock()
	s.lastUsed = m.clock.Now()
	m.mu.Unlock()
}

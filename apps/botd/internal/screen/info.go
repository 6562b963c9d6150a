package screen

import (
	"sort"
	"time"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Ports are a running screen's view and control ports, the
// noVNC-compatible websocket ports served by package vnc. x11vnc itself has
// no port: it listens on a unix socket only root and desktop can reach
// (VNCSocket).
type Ports struct {
	View    int `json:"view"`
	Control int `json:"control"`
}

// Info is one screen as GET /screens shows it.
type Info struct {
	ID      string              `json:"id"`
	State   shared.ProcessState `json:"state"`
	Slot    *int                `json:"slot"`
	Display string              `json:"display,omitempty"`
	Ports   *Ports              `json:"ports"`
	Lease   *shared.LeaseInfo   `json:"lease"`
	// Watchers counts connected viewers.
	Watchers   int       `json:"watchers"`
	LastUsedAt time.Time `json:"lastUsedAt"`
	// Error says why the screen crashed or did not start.
	Error string `json:"error,omitempty"`
}

func (m *Manager) infoLocked(s *Screen) Info {
	in := Info{ID: s.ID, State: s.state, Watchers: s.watchers, LastUsedAt: s.lastUsed.UTC(), Error: s.lastErr}
	if s.slot >= 0 {
		slot := s.slot
		in.Slot = &slot
		in.Display = ":" + itoa(m.display(slot))
		if s.ports != nil {
			p := *s.ports
			in.Ports = &p
		} else {
			// Not bound yet: the ones the start asks for (0: any).
			in.Ports = &Ports{View: m.viewPort(slot), Control: m.controlPort(slot)}
		}
	}
	in.Lease = m.leases.Current(s.ID).Info()
	return in
}

// Info describes screen id (ok false when unknown).
func (m *Manager) Info(id string) (Info, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.screens[id]
	if s == nil {
		return Info{}, false
	}
	return m.infoLocked(s), true
}

// List describes every known screen, by id.
func (m *Manager) List() []Info {
	m.mu.Lock()
	out := make([]Info, 0, len(m.screens))
	for _, s := range m.screens {
		out = append(out, m.infoLocked(s))
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Health is the Screens source of the health model.
func (m *Manager) Health() []shared.ScreenHealth {
	list := m.List()
	m.hooksMu.Lock()
	browser := m.browserState
	m.hooksMu.Unlock()
	out := make([]shared.ScreenHealth, 0, len(list))
	for _, in := range list {
		h := shared.ScreenHealth{ID: in.ID, State: in.State, Browser: shared.StateStopped, Lease: in.Lease}
		if browser != nil {
			h.Browser = browser(in.ID)
		}
		out = append(out, h)
	}
	return out
}

// Target is the X display of a running screen, for package desktop and the
// browser (ok false when it is not running).
func (m *Manager) Target(id string) (Target, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.screens[id]
	if !s.upLocked() {
		return Target{}, false
	}
	u := m.o.Desktop
	return Target{Display: ":" + itoa(m.display(s.slot)), XAuthority: m.xauthPath(s.slot), User: &u, Width: Width, Height: Height}, true
}

// VNCSocket is the unix socket of screen id's x11vnc (ok false when the
// screen holds no slot).
func (m *Manager) VNCSocket(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.screens[id]
	if s == nil || s.slot < 0 {
		return "", false
	}
	return vncSocket(runDirFor(m.display(s.slot))), true
}

// Env is the environment a process needs to run on screen id as the
// desktop user (DISPLAY, XAUTHORITY, HOME, the session bus); ok false when
// it is not running.
func (m *Manager) Env(id string) ([]string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.screens[id]
	if !s.upLocked() {
		return nil, false
	}
	b := &procBackend{m: m}
	return b.env(s.slot, runDirFor(m.display(s.slot))), true
}

// upLocked: the screen's processes are up (running, or starting and in its
// OnStart hooks). m.mu must be held.
func (s *Screen) upLocked() bool {
	return s != nil && s.slot >= 0 && s.stack != nil && s.stop == nil &&
		(s.state == shared.StateRunning || s.state == shared.StateStarting)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// screenEvent is the payload of a "screen" event.
type screenEvent struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Slot    *int   `json:"slot,omitempty"`
	Display string `json:"display,omitempty"`
	Error   string `json:"error,omitempty"`
}

// leaseEvent is the payload of "lease" and "preempted" events. It never
// carries a lease id (a capability).
type leaseEvent struct {
	Screen string            `json:"screen"`
	What   string            `json:"what"`
	Old    *shared.LeaseInfo `json:"old,omitempty"`
	New    *shared.LeaseInfo `json:"new,omitempty"`
}

func (m *Manager) publish(typ string, data any) {
	if m.o.Events != nil {
		m.o.Events.Publish(typ, data)
	}
}

func (m *Manager) changed() {
	if m.o.Changed != nil {
		m.o.Changed()
	}
}

// screenChanged publishes s's state. Never call it holding m.mu.
func (m *Manager) screenChanged(s *Screen) {
	m.mu.Lock()
	in := m.infoLocked(s)
	m.mu.Unlock()
	m.publish(shared.EventScreen, screenEvent{ID: in.ID, State: string(in.State), Slot: in.Slot, Display: in.Display, Error: in.Error})
	m.changed()
}

// leaseChanged hears every lease change. A preemption cuts the old
// holder off before Acquire returns: the input generation is bumped and
// every in-flight action's context is cancelled, which kills its input
// command. It may run under the lease table's callers' locks only through
// Acquire, Check, Release, Drop and Sweep, none of which the manager calls
// while holding m.mu.
func (m *Manager) leaseChanged(c lease.Change) {
	ev := leaseEvent{Screen: c.Screen, What: c.What, Old: c.Old.Info(), New: c.New.Info()}
	if c.What == "preempted" {
		if s := m.Get(c.Screen); s != nil {
			s.cutOff(errPreempted)
		}
		m.log.Info().Str("screen", c.Screen).Str("by", c.New.Holder).Str("from", c.Old.Holder).Msg("user took the screen")
		m.publish(shared.EventPreempted, ev)
	}
	m.publish(shared.EventLease, ev)
	m.changed()
}

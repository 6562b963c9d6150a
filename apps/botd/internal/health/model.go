package health

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// Sources are the functions the model reads ComputerHealth from. Any may be
// nil until its component exists.
type Sources struct {
	Agent   func() shared.ProcessState
	Screens func() []shared.ScreenHealth
	Egress  func() shared.EgressHealth
}

// Model derives ComputerHealth from its sources (state is read, not pushed)
// and publishes it on the hub whenever it differs from the last one sent.
type Model struct {
	hub      *Hub
	bootedAt time.Time

	// mu guards src and last.
	mu   sync.Mutex
	src  Sources
	last []byte
}

// NewModel returns a model publishing on hub.
func NewModel(hub *Hub, bootedAt time.Time) *Model {
	return &Model{hub: hub, bootedAt: bootedAt.UTC()}
}

// SetSources replaces the sources (wiring happens as components start).
func (m *Model) SetSources(s Sources) {
	m.mu.Lock()
	m.src = s
	m.mu.Unlock()
	m.Changed()
}

// Snapshot computes the current ComputerHealth.
func (m *Model) Snapshot() shared.ComputerHealth {
	m.mu.Lock()
	src := m.src
	m.mu.Unlock()
	h := shared.ComputerHealth{BootedAt: m.bootedAt, Agent: shared.StateStopped, Screens: []shared.ScreenHealth{}, Egress: shared.EgressHealth{Mode: "direct"}}
	if src.Agent != nil {
		h.Agent = src.Agent()
	}
	if src.Screens != nil {
		if s := src.Screens(); s != nil {
			h.Screens = s
		}
	}
	if src.Egress != nil {
		h.Egress = src.Egress()
	}
	h.OK = h.Agent == shared.StateRunning
	return h
}

// Changed recomputes health and publishes it if it differs from the last.
// Components call it after any state change; it is cheap and idempotent.
func (m *Model) Changed() {
	h := m.Snapshot()
	b, _ := json.Marshal(h)
	m.mu.Lock()
	same := string(b) == string(m.last)
	if !same {
		m.last = b
	}
	m.mu.Unlock()
	if !same && m.hub != nil {
		m.hub.Publish(shared.EventHealth, h)
	}
}

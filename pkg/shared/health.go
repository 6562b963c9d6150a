package shared

import "time"

// ProcessState is a supervised process's state. It only moves
// starting → running → crashed|stopped (and back to starting on a restart).
type ProcessState string

// The supervisor's states.
const (
	StateStarting ProcessState = "starting"
	StateRunning  ProcessState = "running"
	StateCrashed  ProcessState = "crashed"
	StateStopped  ProcessState = "stopped"
)

// ComputerHealth is what GET /health returns and /events pushes on change.
type ComputerHealth struct {
	// OK is true while Codex's app-server runs.
	OK       bool           `json:"ok"`
	BootedAt time.Time      `json:"bootedAt"`
	Agent    ProcessState   `json:"agent"`
	Screens  []ScreenHealth `json:"screens"`
	Egress   EgressHealth   `json:"egress"`
}

// ScreenHealth is one screen's line in ComputerHealth.
type ScreenHealth struct {
	ID      string       `json:"id"`
	State   ProcessState `json:"state"`
	Browser ProcessState `json:"browser"`
	Lease   *LeaseInfo   `json:"lease"`
}

// LeaseInfo describes who holds a screen, without the lease id (which is a
// capability for the holder only).
type LeaseInfo struct {
	Kind      string    `json:"kind"`
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// EgressHealth reports the SOCKS egress proxy.
type EgressHealth struct {
	Mode            string `json:"mode"`
	AgentOnline     bool   `json:"agentOnline"`
	TunnelConnected bool   `json:"tunnelConnected"`
}

// Event is one message on the /events websocket.
type Event struct {
	Type string    `json:"type"`
	At   time.Time `json:"at"`
	// Data is the event's payload; its shape depends on Type.
	Data any `json:"data,omitempty"`
}

// Event types pushed on /events.
const (
	EventHealth     = "health"
	EventProcess    = "process"
	EventScreen     = "screen"
	EventLease      = "lease"
	EventPreempted  = "preempted"
	EventApplyGuard = "apply_guard"
	EventEgress     = "egress"
)

// Package events follows each running computer's event stream into runs
// (issue 15, requirement 4): the worker keeps one connection to each
// running computer's events (the machine's DialEvents: botd's /events),
// reconnecting with backoff, and turns what concerns a teammate into an
// event of that bot's live run ("botd" events in the run's stream and
// store): apply-guard blocks, a crashed browser or screen process, a
// preemption (a person took the screen), and egress loss (every run of the
// computer).
package events

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/pkg/shared"
)

// RunEventBotd is the run event type of what botd reported.
const RunEventBotd = "botd"

// MaxBotdEvent bounds one message on botd's /events (a health snapshot
// with every screen is a few KiB). A larger one ends the connection, which
// is dialled again with backoff; what a message adds to a run is bounded
// per run (runs.MaxBotdNotes, each text field cut at runs.MaxNoteField).
const MaxBotdEvent = 256 << 10

// clip cuts a text field botd sent for a run event.
func clip(s string) string { return codexrpc.Clip(s, runs.MaxNoteField) }

// Follower keeps a follower per running computer.
type Follower struct {
	comps *computers.Service
	runs  *runs.Manager
	log   zerolog.Logger
	// every is how often the computer list is looked at.
	every time.Duration

	// mu guards follows and connected.
	mu      sync.Mutex
	follows map[string]context.CancelFunc
	// connected counts live /events connections by computer (tests wait
	// on it so a trigger is not fired before anyone listens).
	connected map[string]int
}

// New returns a follower of comps' running computers into m's runs.
func New(comps *computers.Service, m *runs.Manager, log zerolog.Logger) *Follower {
	return &Follower{comps: comps, runs: m, log: log, every: 2 * time.Second,
		follows: map[string]context.CancelFunc{}, connected: map[string]int{}}
}

// Run follows every running computer until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		f.sync(ctx)
		select {
		case <-ctx.Done():
			f.mu.Lock()
			for id, cancel := range f.follows {
				cancel()
				delete(f.follows, id)
			}
			f.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

// sync starts followers for running computers and stops the others.
func (f *Follower) sync(ctx context.Context) {
	cs, err := f.comps.List(ctx)
	if err != nil {
		return
	}
	want := map[string]bool{}
	for _, c := range cs {
		if c.State == "running" && f.comps.Owns(c.ID) { // a group's other members follow theirs
			want[c.ID] = true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, cancel := range f.follows {
		if !want[id] {
			cancel()
			delete(f.follows, id)
		}
	}
	for id := range want {
		if _, ok := f.follows[id]; !ok {
			cctx, cancel := context.WithCancel(ctx)
			f.follows[id] = cancel
			go f.follow(cctx, id)
		}
	}
}

// Connected reports whether computer id's /events is being followed now.
func (f *Follower) Connected(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connected[id] > 0
}

// follow reads one computer's /events, reconnecting with backoff (250 ms
// doubling to 15 s, reset after a connection that lasted).
func (f *Follower) follow(ctx context.Context, id string) {
	backoff := 250 * time.Millisecond
	egressUp := true
	for ctx.Err() == nil {
		start := time.Now()
		err := f.once(ctx, id, &egressUp)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 30*time.Second {
			backoff = 250 * time.Millisecond
		}
		f.log.Debug().Str("computer", id).AnErr("err", err).Dur("retry_in", backoff).Msg("botd events: reconnecting")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > 15*time.Second {
			backoff = 15 * time.Second
		}
	}
}

func (f *Follower) once(ctx context.Context, id string, egressUp *bool) error {
	m, err := f.comps.Machine(ctx, id)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := m.DialEvents(dctx)
	cancel()
	if err != nil {
		return err
	}
	defer c.CloseNow()
	c.SetReadLimit(MaxBotdEvent)
	f.mu.Lock()
	f.connected[id]++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.connected[id]--
		f.mu.Unlock()
	}()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		var ev struct {
			Type string          `json:"type"`
			At   time.Time       `json:"at"`
			Data json.RawMessage `json:"data"`
		}
		if json.Unmarshal(b, &ev) != nil {
			continue
		}
		f.apply(id, ev.Type, ev.At, ev.Data, egressUp)
	}
}

// apply turns one botd event into run events.
func (f *Follower) apply(computerID, typ string, at time.Time, data json.RawMessage, egressUp *bool) {
	note := func(screen string, payload map[string]any) {
		r, ok := f.runs.ScreenRun(computerID, screen)
		if !ok {
			return
		}
		payload["screen"], payload["at"] = clip(screen), at
		r.Note(RunEventBotd, payload)
	}
	switch typ {
	case shared.EventApplyGuard:
		var d struct {
			Screen, Method, URL string
		}
		if json.Unmarshal(data, &d) == nil && d.Screen != "" {
			note(d.Screen, map[string]any{"kind": "apply_guard_blocked", "method": clip(d.Method), "url": clip(d.URL),
				"message": "the apply guard blocked a request that looked like submitting an application"})
		}
	case shared.EventProcess:
		var d struct {
			Name   string `json:"name"`
			Screen string `json:"screen"`
			State  string `json:"state"`
			Error  string `json:"error"`
		}
		if json.Unmarshal(data, &d) != nil || d.State != string(shared.StateCrashed) {
			return
		}
		proc, screen, _ := strings.Cut(d.Name, ":")
		if d.Screen != "" {
			screen = d.Screen
		}
		if screen == "" {
			return
		}
		kind := "process_crashed"
		if proc == "chromium" {
			kind = "browser_crashed"
		}
		note(screen, map[string]any{"kind": kind, "process": clip(proc), "error": clip(d.Error)})
	case shared.EventPreempted:
		var d struct {
			Screen string            `json:"screen"`
			Old    *shared.LeaseInfo `json:"old"`
			New    *shared.LeaseInfo `json:"new"`
		}
		if json.Unmarshal(data, &d) == nil && d.Screen != "" {
			p := map[string]any{"kind": "preempted", "message": "a person took control of the screen"}
			if d.New != nil {
				p["by"] = clip(d.New.Kind)
			}
			note(d.Screen, p)
		}
	case shared.EventEgress, shared.EventHealth:
		// The health snapshot (sent on every connect) carries egress too,
		// so a tunnel that was already down when we connected is noticed.
		var h shared.EgressHealth
		if typ == shared.EventHealth {
			var ch shared.ComputerHealth
			if json.Unmarshal(data, &ch) != nil {
				return
			}
			h = ch.Egress
		} else if json.Unmarshal(data, &h) != nil {
			return
		}
		if h.Mode != "tunnel" {
			return
		}
		up := h.TunnelConnected && h.AgentOnline
		if up == *egressUp {
			return
		}
		*egressUp = up
		kind := "egress_restored"
		if !up {
			kind = "egress_lost"
		}
		for _, r := range f.runs.ComputerRuns(computerID) {
			r.Note(RunEventBotd, map[string]any{"kind": kind, "at": at, "tunnelConnected": h.TunnelConnected, "agentOnline": h.AgentOnline})
		}
	}
}

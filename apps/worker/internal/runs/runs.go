// Package runs drives teammates' runs: one Codex thread per run over botd's
// /agent relay, the tools registered as dynamic tools, every server request
// answered, events recorded (in the store) and streamed. One computer-use run
// per bot: a run holds the bot's fenced lease in the store, and every write
// it makes carries the lease's epoch, so a run that lost its lease (a
// restarted worker took over) can no longer change anything.
package runs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/metrics"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/responses"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/apps/worker/internal/tracing"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Status is a run's state. It only moves forward:
// queued → running ⇄ waiting_takeover → completed | failed | stopped.
type Status string

// Run states.
const (
	StatusQueued          Status = "queued"
	StatusRunning         Status = "running"
	StatusWaitingTakeover Status = "waiting_takeover"
	StatusCompleted       Status = "completed"
	StatusFailed          Status = "failed"
	StatusStopped         Status = "stopped"
)

// Ended reports whether s is final.
func (s Status) Ended() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusStopped
}

// ApprovalPolicy is how the worker answers Codex's approval requests. Whether
// Codex asks at all is Options.AskFor (Codex's own approval policy): with
// "never" (the default) none should come; if one does, the stated policy
// decides instead of leaving the turn stalled.
type ApprovalPolicy string

// Codex's approval policies (its AskForApproval: untrusted, on-request,
// never, granular) the worker offers as the thread's "approvalPolicy". The
// worker's threads run with sandbox "danger-full-access" (the computer is the
// boundary); under it "on-request" never asks, not even when the model asks
// for escalation (seen with Codex 0.171), so only these two mean something:
const (
	// AskNever: Codex runs its built-in commands without asking.
	AskNever = "never"
	// AskUntrusted: Codex asks before running its built-in commands (with
	// Codex 0.171 even ls), and Approvals answers.
	AskUntrusted = "untrusted"
)

// ValidAskFor reports whether s is one of the policies above.
func ValidAskFor(s string) bool {
	return s == AskNever || s == AskUntrusted
}

// Approval policies.
const (
	// ApproveNone declines every command, file change and permission request
	// (the default: teammates act through the tools, which botd checks).
	ApproveNone ApprovalPolicy = "decline"
	// ApproveAll accepts them (the computer is the boundary).
	ApproveAll ApprovalPolicy = "accept"
)

// MaxPrompt bounds a run's prompt.
const MaxPrompt = 64 << 10

// LeaseTTL is the bot lease's lifetime; a live run renews it every third.
const LeaseTTL = 60 * time.Second

// Options configures the manager.
type Options struct {
	Store     store.Store
	Computers *computers.Service
	Model     string
	// ModelProvider, when set, is passed on thread/start.
	ModelProvider string
	Approvals     ApprovalPolicy
	// AskFor is Codex's approval policy for each thread (AskNever when empty).
	AskFor string
	Log    zerolog.Logger
	// TurnTimeout bounds one run (default 30 min).
	TurnTimeout time.Duration
	// TakeoverLink, when set, is called when the model asks for a person
	// (request_takeover): it takes the bot's screen for a person and returns
	// the control link the run's event carries (see internal/takeover).
	TakeoverLink func(ctx context.Context, computerID, botID, screen string) (url string, expiresAt time.Time, err error)
	// TakeoverDone, when set, is called when the wait ends (the person
	// released, or the run was resumed or stopped): the person's hold on the
	// screen ends so the run can use it again.
	TakeoverDone func(ctx context.Context, computerID, botID string)
	// Model is the worker runtime's model API (MODEL_UPSTREAM_URL and the
	// key: they stay in the worker); nil leaves runs with the worker
	// runtime unavailable.
	Responses *responses.Client
	// Loop bounds the worker runtime's runs (defaults: DefaultLoop).
	Loop LoopLimits
	// Metrics counts the runs' ends (nil: none).
	Metrics *metrics.Metrics
	// Tracing makes each run's span, the parent of its tool calls' (nil:
	// none).
	Tracing *tracing.Tracing
}

// Manager holds the live runs of this worker process (the store holds all).
type Manager struct {
	o Options
	// mu guards runs.
	mu   sync.Mutex
	runs map[string]*Run
}

// NewManager returns a manager.
func NewManager(o Options) *Manager {
	if o.Approvals == "" {
		o.Approvals = ApproveNone
	}
	if o.AskFor == "" {
		o.AskFor = AskNever
	}
	if o.TurnTimeout == 0 {
		o.TurnTimeout = 30 * time.Minute
	}
	o.Loop = o.Loop.withDefaults()
	return &Manager{o: o, runs: map[string]*Run{}}
}

// StartRequest starts a run.
type StartRequest struct {
	BotID  string `json:"botId"`
	Prompt string `json:"prompt"`
	Model  string `json:"model,omitempty"`
	// Record records the bot's screen from the run's start to its end
	// (record.go); the recording stays with the run.
	Record bool `json:"record,omitempty"`
	// Runtime is where the agent loop runs: "worker" (the worker's own
	// loop; the model key stays in the worker) or "machine" (Codex in the
	// machine, botd machines only). Empty: the computer's default —
	// "machine" where Codex is, "worker" on stock desktops.
	Runtime string `json:"runtime,omitempty"`
}

// Event is one entry of a run's stream.
type Event struct {
	Seq  int       `json:"seq"`
	At   time.Time `json:"at"`
	Type string    `json:"type"` // status, notification, tool_call, tool_result, error
	Data any       `json:"data,omitempty"`
}

// ToolCall records one tool call the model made.
type ToolCall struct {
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Success   bool            `json:"success"`
	Output    string          `json:"output"` // text parts only
	Images    int             `json:"images"`
	Ms        int64           `json:"ms"`
}

// Snapshot is a run as the API shows it.
type Snapshot struct {
	ID         string `json:"id"`
	ComputerID string `json:"computerId"`
	BotID      string `json:"botId"`
	// Runtime is where the run's agent loop runs: "worker" or "machine".
	Runtime   string     `json:"runtime"`
	Status    Status     `json:"status"`
	Error     string     `json:"error,omitempty"`
	ThreadID  string     `json:"threadId,omitempty"`
	TurnID    string     `json:"turnId,omitempty"`
	Message   string     `json:"message,omitempty"`
	ToolCalls []ToolCall `json:"toolCalls"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	Takeover  string     `json:"takeoverReason,omitempty"`
	// Recording is the run's screen recording (record: true).
	Recording *RunRecording `json:"recording,omitempty"`
}

// Run is one teammate run.
type Run struct {
	m          *Manager
	id         string
	botID      string
	computerID string
	machine    machines.Machine
	leaseKey   string
	epoch      int64
	session    *tools.Session
	cancel     context.CancelFunc
	// abort cancels the run's context with the cap it exceeded.
	abort context.CancelCauseFunc
	// fenced is set when the store refused a write as stale, or this
	// worker stopped acting for the computer: the run stops. Read without
	// r.mu: a store write in flight holds r.mu, and fencing never waits.
	fenced atomic.Bool
	// writes is the context of the run's store writes; fence cancels it,
	// so that a write stuck on a store that no longer answers (this worker
	// cut off) lets go of r.mu at once.
	writesOnce sync.Once
	writes     context.Context
	stopWrites context.CancelFunc
	// resumed: a previous worker process started this run; screen leases it
	// took under the run's holder name are given back at the end too.
	resumed bool
	// private: the computer is a Private one, whose only bot has the whole
	// workspace as its home (set by botDir, before the thread starts).
	private bool
	// runtime is providers.RuntimeWorker or providers.RuntimeMachine.
	runtime string
	// span is the run's span (invalid without tracing), the parent of
	// tool calls that arrive on a context without it (Codex's); endSpan
	// ends it. Both are set (traceRun) before the run's goroutines start.
	span    trace.SpanContext
	endSpan func(state string)

	// mu guards everything below.
	mu        sync.Mutex
	snap      Snapshot
	events    []Event
	subs      map[chan Event]struct{}
	done      chan struct{}
	takeover  chan struct{} // closed by Resume while waiting
	turnDone  chan codexrpc.Turn
	agentText strings.Builder
	// textCut: agentText stopped at MaxAgentText.
	textCut bool
	// violation is the first cap the computer exceeded (the run's reason).
	violation *codexrpc.LimitError
	// evCount and evBytes count the recorded events under the caps
	// (MaxRunEvents, MaxRunEventBytes); notes counts botd's (MaxBotdNotes).
	evCount, evBytes, notes int
}

// ErrNotFound is returned for unknown run ids.
var ErrNotFound = shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such run")

// runsWhere is this process's runs that keep says so (m.mu is taken, and
// released before it returns).
func (m *Manager) runsWhere(keep func(*Run) bool) []*Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []*Run
	for _, r := range m.runs {
		if keep(r) {
			rs = append(rs, r)
		}
	}
	return rs
}

// endingWait bounds how long a new run of a bot waits for the bot's last
// run on this worker to finish its end and give the lease back.
const endingWait = 30 * time.Second

// acquireBotLease takes the bot's lease (key) for run id. A run reports
// its outcome before its end is done (the recording stopped, the
// checkpoint taken), and holds the lease until then: a new run of the
// same bot that this worker's ended run still holds the lease of waits
// for that end (at most endingWait) instead of failing with 409. A run
// still going, or one on another worker, is busy at once.
func (m *Manager) acquireBotLease(ctx context.Context, key, id string) (store.Lease, error) {
	l, err := m.o.Store.AcquireLease(ctx, key, id, LeaseTTL)
	if !errors.Is(err, store.ErrBusy) {
		return l, err
	}
	same := m.runsWhere(func(r *Run) bool { return r.leaseKey == key })
	if len(same) == 0 || slices.ContainsFunc(same, func(r *Run) bool { return !r.Snapshot().Status.Ended() }) {
		return l, err
	}
	t := time.NewTimer(endingWait)
	defer t.Stop()
	for _, r := range same {
		select {
		case <-r.done:
		case <-t.C:
			return l, err
		case <-ctx.Done():
			return l, ctx.Err()
		}
	}
	return m.o.Store.AcquireLease(ctx, key, id, LeaseTTL)
}

// Start begins a run of req.BotID on computer computerID and returns at
// once; 409 while that bot has a run (one that has reported its outcome
// and is finishing its end is waited for, see acquireBotLease).
func (m *Manager) Start(ctx context.Context, computerID string, req StartRequest) (*Run, error) {
	if len(req.Prompt) > MaxPrompt {
		return nil, shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "prompt is %d bytes; the limit is %d", len(req.Prompt), MaxPrompt)
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "prompt is required")
	}
	c, err := m.o.Computers.HasBot(ctx, computerID, req.BotID)
	if err != nil {
		return nil, err
	}
	machine, err := m.o.Computers.Machine(ctx, computerID)
	if err != nil {
		return nil, err
	}
	// The runtime: Codex in the machine needs a machine on which an agent
	// may run (never a vendor's stock desktop, where the model key would
	// be the bot's to read); the worker's loop runs anywhere. Either is
	// refused before a lease is held or anything is started there.
	rt, err := m.runtimeFor(machine, req.Runtime)
	if err != nil {
		return nil, err
	}
	if req.Record {
		if err := canRecord(ctx, machine, req.BotID); err != nil {
			return nil, err
		}
	}
	id := newID()
	key := computers.LeaseKey(c, req.BotID)
	lease, err := m.acquireBotLease(ctx, key, id)
	if errors.Is(err, store.ErrBusy) {
		return nil, shared.Errorf(http.StatusConflict, shared.CodeConflict, "bot %s already has a computer-use run; stop it first", req.BotID)
	}
	if err != nil {
		return nil, err
	}
	model := req.Model
	if model == "" {
		model = m.o.Model
	}
	if err := m.o.Store.CreateRun(ctx, store.Run{ID: id, ComputerID: c.ID, BotID: req.BotID, LeaseKey: key, Epoch: lease.Epoch,
		State: string(StatusQueued), Prompt: req.Prompt, Model: model, Runtime: rt}); err != nil {
		_ = m.o.Store.ReleaseLease(context.WithoutCancel(ctx), key, lease.Epoch)
		return nil, err
	}
	sess, err := tools.NewSession(machine, req.BotID, "run-"+id)
	if err != nil {
		return nil, err
	}
	sess.CheckScreen = machine.CheckScreen
	sess.Secret, sess.SecretNames = m.o.Computers.SecretOpener(c.ID)
	m.o.Computers.InstrumentTools(ctx, sess, c.ID, c.Provider)
	// The run outlives the request but stays in its trace.
	tctx, cancel := context.WithTimeout(m.o.Tracing.Detach(ctx), m.o.TurnTimeout)
	rctx, abort := context.WithCancelCause(tctx)
	r := &Run{m: m, id: id, botID: req.BotID, computerID: c.ID, machine: machine, leaseKey: key, epoch: lease.Epoch,
		session: sess, cancel: cancel, abort: abort, subs: map[chan Event]struct{}{}, runtime: rt,
		done: make(chan struct{}), turnDone: make(chan codexrpc.Turn, 4),
		snap: Snapshot{ID: id, ComputerID: c.ID, BotID: req.BotID, Runtime: rt, Status: StatusQueued, StartedAt: time.Now().UTC(), ToolCalls: []ToolCall{}}}
	sess.Takeover = r.waitTakeover
	rctx = r.traceRun(rctx)
	m.mu.Lock()
	m.runs[id] = r
	m.mu.Unlock()
	go r.renew(rctx)
	go r.run(rctx, func(ctx context.Context) error {
		if req.Record {
			r.startRecording(ctx)
		}
		if rt == providers.RuntimeWorker {
			return r.driveWorker(ctx, req.Prompt, model, false)
		}
		return r.drive(ctx, req.Prompt, model)
	})
	return r, nil
}

// renew keeps the bot's lease alive while the run lives; losing it (a
// stale epoch) fences the run.
func (r *Run) renew(ctx context.Context) {
	t := time.NewTicker(LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.done:
			return
		case <-t.C:
			if _, err := r.m.o.Store.RenewLease(ctx, r.leaseKey, r.epoch, LeaseTTL); errors.Is(err, store.ErrStaleEpoch) {
				r.fence()
				return
			}
		}
	}
}

// fence stops a run whose lease moved on: it must not act any more. It
// takes no lock: the run's store write in flight (holding r.mu, up to its
// timeout when the store does not answer) is cancelled, not waited for, so
// the run stops before the computer's new owner resumes it.
func (r *Run) fence() {
	if r.fenced.Swap(true) {
		return
	}
	r.writeCtx()
	r.stopWrites()
	r.traced(r.m.o.Log.Warn()).Str("run", r.id).Msg("run lost its bot lease (stale epoch); stopping it")
	r.cancel()
}

// writeCtx is the parent context of the run's store writes (cancelled
// when the run is fenced).
func (r *Run) writeCtx() context.Context {
	r.writesOnce.Do(func() { r.writes, r.stopWrites = context.WithCancel(context.Background()) })
	return r.writes
}

// Live returns a run of this process by id.
func (m *Manager) Live(id string) (*Run, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[id]
	return r, ok
}

// Get returns run id of computer computerID: the live one's snapshot, or
// the stored record of one that is not live in this process.
func (m *Manager) Get(ctx context.Context, computerID, id string) (Snapshot, *Run, error) {
	if r, ok := m.Live(id); ok {
		if r.computerID != computerID {
			return Snapshot{}, nil, ErrNotFound
		}
		return r.Snapshot(), r, nil
	}
	if !computers.ValidID(id) {
		return Snapshot{}, nil, ErrNotFound
	}
	sr, err := m.o.Store.GetRun(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sr.ComputerID != computerID) {
		return Snapshot{}, nil, ErrNotFound
	}
	if err != nil {
		return Snapshot{}, nil, err
	}
	snap := Snapshot{ID: sr.ID, ComputerID: sr.ComputerID, BotID: sr.BotID, Runtime: sr.Runtime, Status: Status(sr.State), Error: sr.Error,
		ThreadID: sr.ThreadID, TurnID: sr.TurnID, Message: sr.Message, StartedAt: sr.CreatedAt, ToolCalls: []ToolCall{}}
	if !sr.EndedAt.IsZero() {
		t := sr.EndedAt
		snap.EndedAt = &t
	}
	evs, err := m.o.Store.Events(ctx, id, 0)
	if err != nil {
		return Snapshot{}, nil, err
	}
	for _, e := range evs {
		if e.Type == "tool_result" {
			var tc ToolCall
			if json.Unmarshal(e.Data, &tc) == nil {
				snap.ToolCalls = append(snap.ToolCalls, tc)
			}
		}
		if e.Type == EventRecording {
			snap.Recording = recordingFrom(snap.Recording, e.Data)
		}
	}
	return snap, nil, nil
}

// StoredEvents returns a run's recorded events (for runs not live here).
func (m *Manager) StoredEvents(ctx context.Context, id string) ([]Event, error) {
	evs, err := m.o.Store.Events(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, Event{Seq: int(e.Seq), At: e.At, Type: e.Type, Data: json.RawMessage(e.Data)})
	}
	return out, nil
}

// Recover runs at start, before the API serves: no run stays running
// forever. Each run a previous worker left unfinished is fenced first (its
// lease re-taken by the same holder, bumping the epoch, so a zombie writer
// is refused). A run whose Codex thread had started is resumed: the thread
// is picked up again, the orphaned turn interrupted and a new turn tells the
// model the worker restarted. Any other (or one whose resume fails) is
// failed with the reason and its lease released.
func (m *Manager) Recover(ctx context.Context) error {
	left, err := m.o.Store.ListRuns(ctx, "", string(StatusQueued), string(StatusRunning), string(StatusWaitingTakeover))
	if err != nil {
		return err
	}
	for _, sr := range left {
		lease, err := m.o.Store.AcquireLease(ctx, sr.LeaseKey, sr.ID, LeaseTTL)
		if err != nil {
			m.o.Log.Warn().Str("run", sr.ID).Err(err).Msg("cannot fence a run left running; another holder has its bot")
			continue
		}
		if err := m.recoverOne(ctx, sr, lease); err != nil {
			return err
		}
	}
	return nil
}

// RecoverComputer takes over the runs of computer computerID that its
// previous owner in a worker group left (a worker that died or was cut
// off): each run's lease is taken under fence, this worker's ownership of
// the computer, whoever held it, and the run resumes from the store.
func (m *Manager) RecoverComputer(ctx context.Context, computerID string, fence store.Fence) error {
	left, err := m.o.Store.ListRuns(ctx, computerID, string(StatusQueued), string(StatusRunning), string(StatusWaitingTakeover))
	if err != nil {
		return err
	}
	for _, sr := range left {
		if _, ok := m.Live(sr.ID); ok {
			continue // still running here (this worker owned it all along)
		}
		lease, err := m.o.Store.TakeLease(ctx, sr.LeaseKey, sr.ID, LeaseTTL, fence.Key, fence.Epoch)
		if err != nil {
			m.o.Log.Warn().Str("run", sr.ID).Err(err).Msg("cannot take over a run of a computer this worker now owns")
			continue
		}
		if err := m.recoverOne(ctx, sr, lease); err != nil {
			return err
		}
	}
	return nil
}

// Abandon stops every run of computer computerID in this process without
// writing anything: this worker no longer owns the computer, and the new
// owner resumes the runs.
func (m *Manager) Abandon(computerID string) {
	for _, r := range m.runsWhere(func(r *Run) bool { return r.computerID == computerID }) {
		r.fence()
	}
}

// recoverOne resumes stored run sr under lease, or fails it with the
// reason when it cannot be resumed.
func (m *Manager) recoverOne(ctx context.Context, sr store.Run, lease store.Lease) error {
	if (sr.ThreadID != "" || (sr.Runtime == providers.RuntimeWorker && m.o.Responses != nil)) && m.o.Computers != nil {
		m.resume(sr, lease)
		return nil
	}
	msg := "the worker restarted while this run was " + sr.State + "; the run was not resumed"
	if sr.ThreadID != "" {
		msg += " (Codex thread " + sr.ThreadID + ")"
	}
	b, _ := json.Marshal(map[string]string{"status": string(StatusFailed), "error": msg})
	_, _ = m.o.Store.AppendEvent(ctx, sr.ID, lease.Epoch, "status", b)
	if _, err := m.o.Store.UpdateRun(ctx, sr.ID, lease.Epoch, store.RunUpdate{State: ptr(string(StatusFailed)), Error: &msg}); err != nil {
		return err
	}
	_ = m.o.Store.ReleaseLease(ctx, sr.LeaseKey, lease.Epoch)
	m.o.Log.Info().Str("run", sr.ID).Str("bot", sr.BotID).Msg("run left by a previous worker failed with the reason")
	go m.releaseScreens(context.WithoutCancel(ctx), sr.ComputerID, "run-"+sr.ID)
	return nil
}

// resume brings back a run a previous worker left mid-turn, under its new
// epoch, with its recorded events; failing that, it fails the run with the
// reason.
func (m *Manager) resume(sr store.Run, lease store.Lease) {
	tctx, cancel := context.WithTimeout(context.Background(), m.o.TurnTimeout)
	ctx, abort := context.WithCancelCause(tctx)
	r := &Run{m: m, id: sr.ID, botID: sr.BotID, computerID: sr.ComputerID, leaseKey: sr.LeaseKey, epoch: lease.Epoch, runtime: sr.Runtime,
		cancel: cancel, abort: abort, resumed: true, subs: map[chan Event]struct{}{}, done: make(chan struct{}), turnDone: make(chan codexrpc.Turn, 4),
		snap: Snapshot{ID: sr.ID, ComputerID: sr.ComputerID, BotID: sr.BotID, Runtime: sr.Runtime, Status: Status(sr.State), ThreadID: sr.ThreadID,
			TurnID: sr.TurnID, StartedAt: sr.CreatedAt, ToolCalls: []ToolCall{}}}
	if evs, err := m.StoredEvents(ctx, sr.ID); err == nil {
		r.events = evs
		for _, e := range evs {
			if raw, ok := e.Data.(json.RawMessage); ok && !ownEvents[e.Type] {
				r.evCount++
				r.evBytes += len(raw)
			}
			if raw, ok := e.Data.(json.RawMessage); ok && e.Type == "tool_result" {
				var tc ToolCall
				if json.Unmarshal(raw, &tc) == nil {
					r.snap.ToolCalls = append(r.snap.ToolCalls, tc)
				}
			}
		}
	}
	ctx = r.traceRun(ctx)
	m.mu.Lock()
	m.runs[r.id] = r
	m.mu.Unlock()
	go r.renew(ctx)
	go r.run(ctx, func(ctx context.Context) error {
		machine, err := m.o.Computers.Machine(ctx, sr.ComputerID)
		if err != nil {
			return fmt.Errorf("the worker restarted mid-run and the computer did not answer: %w", err)
		}
		sess, err := tools.NewSession(machine, sr.BotID, "run-"+sr.ID)
		if err != nil {
			return err
		}
		sess.CheckScreen = machine.CheckScreen
		sess.Secret, sess.SecretNames = m.o.Computers.SecretOpener(sr.ComputerID)
		m.o.Computers.InstrumentTools(ctx, sess, sr.ComputerID, "")
		sess.Takeover = r.waitTakeover
		r.mu.Lock()
		r.machine, r.session = machine, sess
		r.mu.Unlock()
		// The dead process's screen leases were held by this same holder:
		// botd hands them back to the session on first use.
		if sr.Runtime == providers.RuntimeWorker {
			// The worker's loop kept its conversation in memory: a new one
			// starts, telling the model what happened.
			r.emit("resumed", map[string]string{"runtime": providers.RuntimeWorker})
			if err := r.driveWorker(ctx, sr.Prompt, sr.Model, true); err != nil {
				return fmt.Errorf("the worker restarted mid-run; the resumed run failed: %w", err)
			}
			return nil
		}
		if err := r.driveResumed(ctx, sr.Prompt, sr.ThreadID, sr.TurnID); err != nil {
			return fmt.Errorf("the worker restarted mid-run; resuming its Codex thread failed: %w", err)
		}
		return nil
	})
	m.o.Log.Info().Str("run", sr.ID).Str("bot", sr.BotID).Str("thread", sr.ThreadID).Msg("resuming a run a previous worker left mid-turn")
}

// releaseScreens gives back the botd screen leases a dead run held, so its
// bot's screens are free now rather than when the leases expire. botd hands
// the same holder its own lease back, which is then released.
func (m *Manager) releaseScreens(ctx context.Context, computerID, holder string) {
	if m.o.Computers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	machine, err := m.o.Computers.Machine(ctx, computerID)
	if err != nil {
		return
	}
	list, err := machine.Screens(ctx)
	if err != nil {
		return
	}
	for _, sc := range list {
		if sc.Lease == nil || sc.Lease.Holder != holder || sc.Lease.Kind != "agent" {
			continue
		}
		if l, err := machine.AcquireLease(ctx, sc.ID, "agent", holder, tools.LeaseTTL); err == nil {
			_ = machine.ReleaseLease(ctx, sc.ID, l.LeaseID)
			m.o.Log.Info().Str("screen", sc.ID).Msg("released a dead run's screen lease")
		}
	}
}

func ptr[T any](v T) *T { return &v }

// ID is the run's id.
func (r *Run) ID() string { return r.id }

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Snapshot returns the run's current state.
func (r *Run) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.snap
	s.ToolCalls = append([]ToolCall{}, r.snap.ToolCalls...)
	return s
}

// Stop ends the run (its turn is interrupted and its lease released).
func (r *Run) Stop() {
	r.setStatus(StatusStopped, "stopped by request")
	r.cancel()
}

// Resume hands the screen back after a takeover.
func (r *Run) Resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snap.Status != StatusWaitingTakeover || r.takeover == nil {
		return errors.New("the run is not waiting for a takeover")
	}
	close(r.takeover)
	r.takeover = nil
	return nil
}

// Subscribe replays the events so far and then streams new ones; the channel
// closes when the run ends (after its last event) or on cancel.
func (r *Run) Subscribe() (<-chan Event, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan Event, len(r.events)+256)
	for _, e := range r.events {
		ch <- e
	}
	if r.snap.Status.Ended() {
		close(ch)
		return ch, func() {}
	}
	r.subs[ch] = struct{}{}
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.subs[ch]; ok {
			delete(r.subs, ch)
			close(ch)
		}
	}
}

func (r *Run) emitLocked(typ string, data any) {
	b, _ := json.Marshal(data)
	if !ownEvents[typ] {
		if r.violation != nil {
			return // the run is ending for an excess; nothing more is kept
		}
		if r.evCount+1 > MaxRunEvents {
			r.violateLocked(codexrpc.Limitf("the computer caused more than %d events in this run; the cap is %d", MaxRunEvents, MaxRunEvents))
			return
		}
		if r.evBytes+len(b) > MaxRunEventBytes {
			r.violateLocked(codexrpc.Limitf("the computer caused more than %s of events in this run; the cap is %s",
				codexrpc.Size(MaxRunEventBytes), codexrpc.Size(MaxRunEventBytes)))
			return
		}
		r.evCount++
		r.evBytes += len(b)
	}
	e := Event{Seq: len(r.events) + 1, At: time.Now().UTC(), Type: typ, Data: data}
	if !r.fenced.Load() {
		ctx, cancel := context.WithTimeout(r.writeCtx(), 10*time.Second)
		seq, err := r.m.o.Store.AppendEvent(ctx, r.id, r.epoch, typ, b)
		cancel()
		switch {
		case errors.Is(err, store.ErrStaleEpoch):
			r.fence()
		case r.fenced.Load():
			// fenced while the write waited: nothing more to say
		case err != nil:
			r.traced(r.m.o.Log.Warn()).Str("run", r.id).Err(err).Msg("record run event")
		default:
			e.Seq = int(seq)
		}
	}
	r.events = append(r.events, e)
	for ch := range r.subs {
		select {
		case ch <- e:
		default: // a stalled reader loses its stream, never blocks the run
			delete(r.subs, ch)
			close(ch)
		}
	}
}

// persistLocked writes the run's record under its epoch.
func (r *Run) persistLocked(u store.RunUpdate) {
	if r.fenced.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(r.writeCtx(), 10*time.Second)
	defer cancel()
	if _, err := r.m.o.Store.UpdateRun(ctx, r.id, r.epoch, u); errors.Is(err, store.ErrStaleEpoch) {
		r.fence()
	} else if err != nil && !r.fenced.Load() {
		r.traced(r.m.o.Log.Warn()).Str("run", r.id).Err(err).Msg("record run")
	}
}

func (r *Run) emit(typ string, data any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitLocked(typ, data)
}

func (r *Run) setStatus(s Status, errMsg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snap.Status.Ended() {
		return
	}
	r.snap.Status = s
	if s.Ended() {
		r.m.o.Metrics.RunEnded(string(s))
	}
	errMsg = codexrpc.Clip(errMsg, MaxReason)
	if errMsg != "" {
		r.snap.Error = errMsg
	}
	r.persistLocked(store.RunUpdate{State: ptr(string(s)), Error: ptr(r.snap.Error), Message: ptr(r.messageLocked())})
	r.emitLocked("status", map[string]string{"status": string(s), "error": errMsg})
}

// traceRun starts the run's span under ctx and returns ctx under it; its
// botd calls and tool calls are the span's children.
func (r *Run) traceRun(ctx context.Context) context.Context {
	ctx, r.endSpan = r.m.o.Tracing.Run(ctx, r.id, r.botID, r.runtime, r.computerID)
	r.span = tracing.SpanContext(ctx)
	return ctx
}

// traced adds the run's trace_id and span_id to a log line about it
// (nothing without tracing).
func (r *Run) traced(ev *zerolog.Event) *zerolog.Event { return tracing.LogSpan(r.span, ev) }

// run is the run's whole life.
func (r *Run) run(ctx context.Context, drive func(context.Context) error) {
	log := tracing.Logger(ctx, r.m.o.Log.With().Str("run", r.id).Str("bot", r.botID)).Logger()
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.stopRecording(rctx)
		if r.session != nil {
			r.session.Release(rctx)
		}
		if r.resumed {
			r.m.releaseScreens(rctx, r.computerID, "run-"+r.id)
		}
		r.checkpointAtEnd()
		r.cancel()
		r.mu.Lock()
		now := time.Now().UTC()
		r.snap.EndedAt = &now
		r.snap.Message = r.messageLocked()
		if !r.snap.Status.Ended() {
			r.snap.Status, r.snap.Error = StatusFailed, "the run ended without an outcome"
		}
		r.persistLocked(store.RunUpdate{State: ptr(string(r.snap.Status)), Error: ptr(r.snap.Error), Message: ptr(r.snap.Message)})
		if !r.fenced.Load() {
			_ = r.m.o.Store.ReleaseLease(rctx, r.leaseKey, r.epoch)
		}
		for ch := range r.subs {
			delete(r.subs, ch)
			close(ch)
		}
		r.mu.Unlock()
		close(r.done)
		r.m.mu.Lock()
		delete(r.m.runs, r.id) // the store has it from now on
		r.m.mu.Unlock()
		final := string(r.Snapshot().Status)
		log.Info().Str("status", final).Msg("run ended")
		if r.endSpan != nil {
			r.endSpan(final)
		}
	}()
	if err := drive(ctx); err != nil {
		r.mu.Lock()
		if r.violation != nil {
			err = r.violation // the cap, not how the turn noticed it
		} else if le, ok := codexrpc.AsLimit(err); ok {
			err = le // a JSON-RPC cap (codexrpc closed the connection)
		}
		r.mu.Unlock()
		if ctx.Err() != nil && r.Snapshot().Status == StatusStopped {
			return
		}
		if r.fenced.Load() {
			return // another holder owns the bot now; nothing to write
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("the run took longer than %s", r.m.o.TurnTimeout)
		}
		msg := codexrpc.Clip(err.Error(), MaxReason)
		log.Warn().Str("reason", msg).Msg("run failed")
		r.setStatus(StatusFailed, msg)
	}
}

// open prepares the bot's folder (the thread's working directory) and an
// initialized connection to the computer's Codex app-server.
func (r *Run) open(ctx context.Context) (*codexrpc.Conn, string, error) {
	cwd, err := r.botDir(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("prepare the bot's folder: %w", err)
	}
	conn, err := r.machine.DialAgent(ctx, r)
	if err != nil {
		return nil, "", err
	}
	var initRes json.RawMessage
	if err := conn.Call(ctx, codexrpc.MethodInitialize, codexrpc.InitializeParams{
		ClientInfo:   codexrpc.ClientInfo{Name: "open-bot-worker", Version: "0.1.0", Title: "open-bot worker"},
		Capabilities: codexrpc.InitializeCapabilities{ExperimentalAPI: true},
	}, &initRes); err != nil {
		conn.Close()
		return nil, "", err
	}
	if err := conn.Notify(ctx, codexrpc.MethodInitialized, nil); err != nil {
		conn.Close()
		return nil, "", err
	}
	return conn, cwd, nil
}

func (r *Run) drive(ctx context.Context, prompt, model string) error {
	o := r.m.o
	conn, cwd, err := r.open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	specs := make([]codexrpc.DynamicToolSpec, 0, len(tools.All))
	for _, t := range tools.All {
		specs = append(specs, codexrpc.DynamicToolSpec{Type: "function", Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.Schema)})
	}
	var ts codexrpc.ThreadStartResponse
	if err := conn.Call(ctx, codexrpc.MethodThreadStart, codexrpc.ThreadStartParams{
		Model: model, ModelProvider: o.ModelProvider, Cwd: cwd, ApprovalPolicy: o.AskFor, Sandbox: "danger-full-access",
		DeveloperInstructions: instructions(r.botID, r.private), DynamicTools: specs,
	}, &ts); err != nil {
		return err
	}
	if err := checkID("thread", ts.Thread.ID); err != nil {
		return err
	}
	return r.turn(ctx, conn, ts.Thread.ID, prompt)
}

// resumeText is the new turn a resumed run starts with.
func resumeText(prompt string) string {
	return "The open-bot worker restarted while you were working on this task, so your last step may not have " +
		"finished: take a screenshot or check the files to see where things stand, then continue. The task was:\n\n" + prompt
}

// driveResumed picks up the Codex thread a previous worker process left
// mid-turn: resume the thread, interrupt the orphaned turn, and start a
// new turn that tells the model what happened.
func (r *Run) driveResumed(ctx context.Context, prompt, threadID, oldTurn string) error {
	conn, cwd, err := r.open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var tr codexrpc.ThreadResumeResponse
	if err := conn.Call(ctx, codexrpc.MethodThreadResume, codexrpc.ThreadResumeParams{ThreadID: threadID, ModelProvider: r.m.o.ModelProvider,
		Cwd: cwd, ApprovalPolicy: r.m.o.AskFor, Sandbox: "danger-full-access", ExcludeTurns: true}, &tr); err != nil {
		return fmt.Errorf("resume Codex thread %s: %w", threadID, err)
	}
	if oldTurn != "" {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = conn.Call(ictx, codexrpc.MethodTurnInterrupt, codexrpc.TurnInterruptParams{ThreadID: threadID, TurnID: oldTurn}, nil)
		cancel()
	}
	r.emit("resumed", map[string]string{"threadId": threadID, "interruptedTurn": oldTurn})
	return r.turn(ctx, conn, threadID, resumeText(prompt))
}

// turn starts a turn on the thread and follows it to its end.
func (r *Run) turn(ctx context.Context, conn *codexrpc.Conn, threadID, text string) error {
	// Running before the turn starts: the turn's first tool call can reach
	// us before turn/start's answer does, and a request_takeover there must
	// not be overwritten by a late "running" (Resume would then refuse).
	r.setStatus(StatusRunning, "")
	var turn codexrpc.TurnStartResponse
	if err := conn.Call(ctx, codexrpc.MethodTurnStart, codexrpc.TurnStartParams{
		ThreadID: threadID, Input: []codexrpc.UserInput{{Type: "text", Text: text}},
	}, &turn); err != nil {
		return err
	}
	if err := checkID("turn", turn.Turn.ID); err != nil {
		return err
	}
	r.mu.Lock()
	r.snap.ThreadID, r.snap.TurnID = threadID, turn.Turn.ID
	r.persistLocked(store.RunUpdate{ThreadID: &threadID, TurnID: &turn.Turn.ID})
	r.mu.Unlock()

	for {
		select {
		case t := <-r.turnDone:
			if t.ID != "" && t.ID != turn.Turn.ID {
				continue // an older turn's end (e.g. the one a resume interrupted)
			}
			switch t.Status {
			case "completed":
				r.setStatus(StatusCompleted, "")
				return nil
			case "interrupted":
				r.setStatus(StatusStopped, "the turn was interrupted")
				return nil
			default:
				msg := "the turn failed"
				if t.Error != nil && t.Error.Message != "" {
					msg += ": " + codexrpc.Clip(t.Error.Message, MaxNoteField)
				}
				return errors.New(msg)
			}
		case <-conn.Done():
			if le, ok := codexrpc.AsLimit(conn.Err()); ok {
				return le
			}
			return fmt.Errorf("the Codex app-server went away mid-turn (%v)", conn.Err())
		case <-ctx.Done():
			if le, ok := limitOf(ctx); ok {
				return le // no interrupt: the computer broke a cap
			}
			ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = conn.Call(ictx, codexrpc.MethodTurnInterrupt, codexrpc.TurnInterruptParams{ThreadID: threadID, TurnID: turn.Turn.ID}, nil)
			cancel()
			return ctx.Err()
		}
	}
}

// botDir returns the absolute path of the bot's home, the thread's working
// directory: on a Team computer bots/<bot-id> (made if missing), on a
// Private computer the whole workspace.
func (r *Run) botDir(ctx context.Context) (string, error) {
	rel, err := r.makeBotDir(ctx)
	if err != nil {
		return "", err
	}
	res, err := r.machine.Exec(ctx, client.ExecRequest{Argv: []string{"pwd", "-P"}, Cwd: rel})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("pwd exited %d", res.ExitCode)
	}
	return strings.TrimSpace(res.Stdout), nil
}

// makeBotDir makes the bot's home on a Team computer (bots/<bot-id>, made
// if missing) and returns it workspace-relative ("" on a Private computer:
// the whole workspace); it sets r.private.
func (r *Run) makeBotDir(ctx context.Context) (string, error) {
	c, err := r.m.o.Computers.Get(ctx, r.computerID)
	if err != nil {
		return "", err
	}
	r.private = c.Kind == computers.KindPrivate
	if r.private {
		return "", nil
	}
	rel := "bots/" + r.botID
	if _, err := r.machine.Exec(ctx, client.ExecRequest{Argv: []string{"mkdir", "-p", rel}}); err != nil {
		return "", err
	}
	return rel, nil
}

func instructions(botID string, private bool) string {
	tools := "Use computer_observe and computer_act for the desktop " +
		"(your screen is " + botID + "), open_path for URLs, shell for commands and the file tools for files. " +
		"Never submit job applications. Use request_takeover when a person must sign in or decide."
	if private {
		return "You are " + botID + ", the only bot on your own private Linux computer. Your home and working " +
			"directory is the whole workspace (file paths are workspace-relative; no bots/ or shared/ folders are needed). " + tools
	}
	return "You are teammate " + botID + " on a shared Linux computer. Your own folder is bots/" + botID +
		" (workspace-relative); shared work goes in shared/. " + tools
}

// waitTakeover is the request_takeover hook: the run waits until Resume.
func (r *Run) waitTakeover(ctx context.Context, screen, reason string) error {
	r.mu.Lock()
	ch := make(chan struct{})
	r.takeover = ch
	r.snap.Status = StatusWaitingTakeover
	r.snap.Takeover = reason
	r.persistLocked(store.RunUpdate{State: ptr(string(StatusWaitingTakeover))})
	r.mu.Unlock()
	ev := map[string]any{"status": string(StatusWaitingTakeover), "screen": screen, "reason": reason}
	if link := r.m.o.TakeoverLink; link != nil {
		if u, exp, err := link(ctx, r.computerID, r.botID, screen); err != nil {
			r.traced(r.m.o.Log.Warn()).Str("run", r.id).Err(err).Msg("take the screen for a person")
			ev["controlError"] = err.Error()
		} else {
			ev["controlUrl"], ev["expiresAt"] = u, exp
		}
	}
	r.emit("status", ev)
	if done := r.m.o.TakeoverDone; done != nil {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			done(dctx, r.computerID, r.botID)
		}()
	}
	select {
	case <-ch:
		r.mu.Lock()
		r.snap.Takeover = ""
		r.mu.Unlock()
		r.setStatus(StatusRunning, "")
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// HandleNotification records notifications and watches for the turn's end.
func (r *Run) HandleNotification(method string, params json.RawMessage) {
	r.mu.Lock()
	over := r.violation != nil
	r.mu.Unlock()
	if over {
		return // the run is ending for an excess: nothing more is taken in
	}
	switch method {
	case codexrpc.NotifyTurnCompleted:
		var n codexrpc.TurnCompletedNotification
		if json.Unmarshal(params, &n) == nil {
			select {
			case r.turnDone <- n.Turn:
			default:
			}
		}
	case codexrpc.NotifyAgentMessageDelta:
		var d struct {
			Delta string `json:"delta"`
		}
		if json.Unmarshal(params, &d) == nil {
			r.mu.Lock()
			r.addTextLocked(d.Delta, false)
			r.mu.Unlock()
		}
		return // deltas are many and small; the final message is in the snapshot
	case codexrpc.NotifyItemCompleted:
		var n struct {
			Item struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"item"`
		}
		if json.Unmarshal(params, &n) == nil && n.Item.Type == "agentMessage" && n.Item.Text != "" {
			r.mu.Lock()
			r.addTextLocked(n.Item.Text, true)
			r.mu.Unlock()
		}
	}
	r.emit("notification", map[string]any{"method": method, "params": trimParams(params)})
}

// trimParams keeps event payloads small (no screenshots in the stream).
func trimParams(p json.RawMessage) json.RawMessage {
	if len(p) > 4096 {
		return json.RawMessage(`{"truncated":true}`)
	}
	return p
}

// HandleRequest answers every server request so a turn never stalls.
func (r *Run) HandleRequest(ctx context.Context, method string, params json.RawMessage) (any, error) {
	accept := r.m.o.Approvals == ApproveAll
	switch method {
	case codexrpc.MethodToolCall:
		return r.toolCall(ctx, params), nil
	case codexrpc.MethodCommandApproval, codexrpc.MethodFileChangeApproval:
		d := "decline"
		if accept {
			d = "accept"
		}
		r.emit("approval", map[string]string{"method": method, "decision": d})
		return codexrpc.DecisionResponse{Decision: d}, nil
	case codexrpc.MethodApplyPatchApproval, codexrpc.MethodExecCommandApproval:
		r.emit("approval", map[string]any{"method": method, "accepted": accept})
		if accept {
			return codexrpc.ReviewDecisionResponse{Decision: "approved"}, nil
		}
		return map[string]any{"decision": map[string]any{"denied": map[string]string{"rejection": "open-bot's policy declines this; use the provided tools"}}}, nil
	case codexrpc.MethodPermissionsApproval:
		r.emit("approval", map[string]string{"method": method, "decision": "none granted"})
		return map[string]any{"permissions": map[string]any{}, "scope": "turn"}, nil
	case codexrpc.MethodUserInput:
		// Questions for a person: answer empty and tell the model how to
		// reach a person (request_takeover), never stall the turn.
		var p codexrpc.ToolRequestUserInputParams
		_ = json.Unmarshal(params, &p)
		ans := map[string]codexrpc.ToolRequestUserInputAnswer{}
		for _, q := range p.Questions {
			ans[q.ID] = codexrpc.ToolRequestUserInputAnswer{Answers: []string{"No person is available to answer here; use request_takeover if a person must act."}}
		}
		r.emit("user_input", map[string]int{"questions": len(p.Questions)})
		return codexrpc.ToolRequestUserInputResponse{Answers: ans}, nil
	case codexrpc.MethodElicitation:
		return codexrpc.ElicitationResponse{Action: "decline"}, nil
	default:
		r.emit("error", map[string]string{"unanswerable_request": method})
		return nil, &codexrpc.RPCError{Code: -32601, Message: "the open-bot worker does not support " + method}
	}
}

// toolCall runs one dynamic tool call and records it.
func (r *Run) toolCall(ctx context.Context, params json.RawMessage) codexrpc.DynamicToolCallResponse {
	var p codexrpc.DynamicToolCallParams
	if err := json.Unmarshal(params, &p); err != nil {
		return codexrpc.DynamicToolCallResponse{Success: false, ContentItems: []codexrpc.ContentItem{{Type: "inputText", Text: "error: malformed tool call"}}}
	}
	// Arguments may arrive as an object or as a JSON string of one.
	args := p.Arguments
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = json.RawMessage(s)
	}
	res := r.execTool(ctx, p.CallID, p.Tool, args)
	out := codexrpc.DynamicToolCallResponse{Success: res.Success}
	for _, c := range res.Content {
		if c.Type == "image" {
			out.ContentItems = append(out.ContentItems, codexrpc.ContentItem{Type: "inputImage", ImageURL: c.ImageURL})
			continue
		}
		out.ContentItems = append(out.ContentItems, codexrpc.ContentItem{Type: "inputText", Text: c.Text})
	}
	return out
}

// errFencedCall is a fenced run's answer to every tool call.
const errFencedCall = "error: this run lost its bot's lease to another holder; it stops and may not act"

// execTool runs one tool call of the model (either runtime) and records
// it: the tool_call event, then the tool_result event and the snapshot's
// entry.
func (r *Run) execTool(ctx context.Context, callID, tool string, args json.RawMessage) tools.Result {
	callID, tool = codexrpc.Clip(callID, MaxIDLen), codexrpc.Clip(tool, MaxIDLen)
	r.emit("tool_call", map[string]any{"callId": callID, "tool": tool, "arguments": trimParams(args)})
	// A run whose lease moved on (its writes refused, that one included)
	// acts no more: the call is not carried out, even before the fence's
	// cancel reaches the turn.
	if r.fenced.Load() {
		return tools.Result{Success: false, Content: []tools.Content{{Type: "text", Text: errFencedCall}}}
	}
	start := time.Now()
	res := tools.Call(r.m.o.Tracing.Under(ctx, r.span), r.session, tool, args)
	rec := ToolCall{CallID: callID, Tool: tool, Arguments: trimParams(args), Success: res.Success, Ms: time.Since(start).Milliseconds()}
	for _, c := range res.Content {
		if c.Type == "image" {
			rec.Images++
			continue
		}
		rec.Output += c.Text
	}
	if len(rec.Output) > 2000 {
		rec.Output = rec.Output[:2000]
	}
	r.mu.Lock()
	r.snap.ToolCalls = append(r.snap.ToolCalls, rec)
	r.emitLocked("tool_result", rec)
	r.mu.Unlock()
	return res
}

// checkID refuses a thread or turn id over MaxIDLen.
func checkID(what, id string) error {
	if len(id) > MaxIDLen {
		return codexrpc.Limitf("the computer named a %s id of %s; the cap is %s", what, codexrpc.Size(int64(len(id))), codexrpc.Size(MaxIDLen))
	}
	return nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

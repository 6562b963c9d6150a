// Package runs drives teammates' runs: one Codex thread per run over botd's
// /agent relay, the tools registered as dynamic tools, every server request
// answered, events recorded and streamed, the lease released at the end.
package runs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Status is a run's state. It only moves forward:
// starting → running ⇄ waiting_takeover → completed | failed | stopped.
type Status string

// Run states.
const (
	StatusStarting        Status = "starting"
	StatusRunning         Status = "running"
	StatusWaitingTakeover Status = "waiting_takeover"
	StatusCompleted       Status = "completed"
	StatusFailed          Status = "failed"
	StatusStopped         Status = "stopped"
)

func (s Status) ended() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusStopped
}

// ApprovalPolicy is how the worker answers Codex's approval requests. Codex
// runs with approval_policy "never", so they should not come; if one does,
// the stated policy decides instead of leaving the turn stalled.
type ApprovalPolicy string

// Approval policies.
const (
	// ApproveNone declines every command, file change and permission request
	// (the default: teammates act through the tools, which botd checks).
	ApproveNone ApprovalPolicy = "decline"
	// ApproveAll accepts them (the computer is the boundary).
	ApproveAll ApprovalPolicy = "accept"
)

// Options configures the manager.
type Options struct {
	Botd *client.Client
	// AgentURL is botd's ws /agent URL (the token goes in a header).
	AgentURL string
	Model    string
	// ModelProvider, when set, is passed on thread/start.
	ModelProvider string
	Approvals     ApprovalPolicy
	Log           zerolog.Logger
	// TurnTimeout bounds one run (default 30 min).
	TurnTimeout time.Duration
}

// Manager holds every run of this worker process.
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
	if o.TurnTimeout == 0 {
		o.TurnTimeout = 30 * time.Minute
	}
	return &Manager{o: o, runs: map[string]*Run{}}
}

// StartRequest starts a run.
type StartRequest struct {
	BotID  string `json:"botId"`
	Prompt string `json:"prompt"`
	Model  string `json:"model,omitempty"`
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
	ID        string     `json:"id"`
	BotID     string     `json:"botId"`
	Status    Status     `json:"status"`
	Error     string     `json:"error,omitempty"`
	ThreadID  string     `json:"threadId,omitempty"`
	TurnID    string     `json:"turnId,omitempty"`
	Message   string     `json:"message,omitempty"`
	ToolCalls []ToolCall `json:"toolCalls"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	Takeover  string     `json:"takeoverReason,omitempty"`
}

// Run is one teammate run.
type Run struct {
	m       *Manager
	id      string
	botID   string
	session *tools.Session
	cancel  context.CancelFunc

	// mu guards everything below.
	mu        sync.Mutex
	snap      Snapshot
	events    []Event
	subs      map[chan Event]struct{}
	done      chan struct{}
	takeover  chan struct{} // closed by Resume while waiting
	turnDone  chan codexrpc.Turn
	agentText strings.Builder
}

// ErrNotFound is returned for unknown run ids.
var ErrNotFound = errors.New("no such run")

// Start begins a run and returns at once.
func (m *Manager) Start(req StartRequest) (*Run, error) {
	if !tools.ValidID(req.BotID) {
		return nil, fmt.Errorf("invalid botId %q: want [A-Za-z0-9_-]{1,64}", req.BotID)
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, errors.New("prompt is required")
	}
	id := newID()
	sess, err := tools.NewSession(m.o.Botd, req.BotID, "run-"+id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.o.TurnTimeout)
	r := &Run{m: m, id: id, botID: req.BotID, session: sess, cancel: cancel, subs: map[chan Event]struct{}{},
		done: make(chan struct{}), turnDone: make(chan codexrpc.Turn, 1),
		snap: Snapshot{ID: id, BotID: req.BotID, Status: StatusStarting, StartedAt: time.Now().UTC(), ToolCalls: []ToolCall{}}}
	sess.Takeover = r.waitTakeover
	m.mu.Lock()
	m.runs[id] = r
	m.mu.Unlock()
	model := req.Model
	if model == "" {
		model = m.o.Model
	}
	go r.run(ctx, req.Prompt, model)
	return r, nil
}

// Get returns a run by id.
func (m *Manager) Get(id string) (*Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[id]
	if !ok {
		return nil, ErrNotFound
	}
	return r, nil
}

// ID is the run's id.
func (r *Run) ID() string { return r.id }

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Snapshot returns the run's current state.
func (r *Run) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.snap
	s.ToolCalls = append([]ToolCall(nil), r.snap.ToolCalls...)
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
	if r.snap.Status.ended() {
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
	e := Event{Seq: len(r.events) + 1, At: time.Now().UTC(), Type: typ, Data: data}
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

func (r *Run) emit(typ string, data any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitLocked(typ, data)
}

func (r *Run) setStatus(s Status, errMsg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snap.Status.ended() {
		return
	}
	r.snap.Status = s
	if errMsg != "" {
		r.snap.Error = errMsg
	}
	r.emitLocked("status", map[string]string{"status": string(s), "error": errMsg})
}

// run is the run's whole life.
func (r *Run) run(ctx context.Context, prompt, model string) {
	log := r.m.o.Log.With().Str("run", r.id).Str("bot", r.botID).Logger()
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.session.Release(rctx)
		cancel()
		r.cancel()
		r.mu.Lock()
		now := time.Now().UTC()
		r.snap.EndedAt = &now
		r.snap.Message = r.agentText.String()
		for ch := range r.subs {
			delete(r.subs, ch)
			close(ch)
		}
		r.mu.Unlock()
		close(r.done)
		log.Info().Str("status", string(r.Snapshot().Status)).Msg("run ended")
	}()
	if err := r.drive(ctx, prompt, model); err != nil {
		if ctx.Err() != nil && r.Snapshot().Status == StatusStopped {
			return
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("the run took longer than %s", r.m.o.TurnTimeout)
		}
		log.Warn().Err(err).Msg("run failed")
		r.setStatus(StatusFailed, err.Error())
	}
}

func (r *Run) drive(ctx context.Context, prompt, model string) error {
	o := r.m.o
	// The bot's own folder is the thread's working directory.
	cwd, err := r.botDir(ctx)
	if err != nil {
		return fmt.Errorf("prepare the bot's folder: %w", err)
	}
	conn, err := codexrpc.Dial(ctx, o.AgentURL, http.Header{"Authorization": {"Bearer " + o.Botd.Token()}}, r)
	if err != nil {
		return err
	}
	defer conn.Close()
	var initRes json.RawMessage
	if err := conn.Call(ctx, codexrpc.MethodInitialize, codexrpc.InitializeParams{
		ClientInfo:   codexrpc.ClientInfo{Name: "open-bot-worker", Version: "0.1.0", Title: "open-bot worker"},
		Capabilities: codexrpc.InitializeCapabilities{ExperimentalAPI: true},
	}, &initRes); err != nil {
		return err
	}
	if err := conn.Notify(ctx, codexrpc.MethodInitialized, nil); err != nil {
		return err
	}
	specs := make([]codexrpc.DynamicToolSpec, 0, len(tools.All))
	for _, t := range tools.All {
		specs = append(specs, codexrpc.DynamicToolSpec{Type: "function", Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.Schema)})
	}
	var ts codexrpc.ThreadStartResponse
	if err := conn.Call(ctx, codexrpc.MethodThreadStart, codexrpc.ThreadStartParams{
		Model: model, ModelProvider: o.ModelProvider, Cwd: cwd, ApprovalPolicy: "never", Sandbox: "danger-full-access",
		DeveloperInstructions: instructions(r.botID), DynamicTools: specs,
	}, &ts); err != nil {
		return err
	}
	var turn codexrpc.TurnStartResponse
	if err := conn.Call(ctx, codexrpc.MethodTurnStart, codexrpc.TurnStartParams{
		ThreadID: ts.Thread.ID, Input: []codexrpc.UserInput{{Type: "text", Text: prompt}},
	}, &turn); err != nil {
		return err
	}
	r.mu.Lock()
	r.snap.ThreadID, r.snap.TurnID = ts.Thread.ID, turn.Turn.ID
	r.mu.Unlock()
	r.setStatus(StatusRunning, "")

	select {
	case t := <-r.turnDone:
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
				msg += ": " + t.Error.Message
			}
			return errors.New(msg)
		}
	case <-conn.Done():
		return fmt.Errorf("the Codex app-server went away mid-turn (%v)", conn.Err())
	case <-ctx.Done():
		ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = conn.Call(ictx, codexrpc.MethodTurnInterrupt, codexrpc.TurnInterruptParams{ThreadID: ts.Thread.ID, TurnID: turn.Turn.ID}, nil)
		cancel()
		return ctx.Err()
	}
}

// botDir makes sure bots/<bot-id> exists and returns its absolute path.
func (r *Run) botDir(ctx context.Context) (string, error) {
	rel := "bots/" + r.botID
	if _, err := r.m.o.Botd.Exec(ctx, client.ExecRequest{Argv: []string{"mkdir", "-p", rel}}); err != nil {
		return "", err
	}
	res, err := r.m.o.Botd.Exec(ctx, client.ExecRequest{Argv: []string{"pwd", "-P"}, Cwd: rel})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("pwd exited %d", res.ExitCode)
	}
	return strings.TrimSpace(res.Stdout), nil
}

func instructions(botID string) string {
	return "You are teammate " + botID + " on a shared Linux computer. Your own folder is bots/" + botID +
		" (workspace-relative); shared work goes in shared/. Use computer_observe and computer_act for the desktop " +
		"(your screen is " + botID + "), open_path for URLs, shell for commands and the file tools for files. " +
		"Never submit job applications. Use request_takeover when a person must sign in or decide."
}

// waitTakeover is the request_takeover hook: the run waits until Resume.
func (r *Run) waitTakeover(ctx context.Context, screen, reason string) error {
	r.mu.Lock()
	ch := make(chan struct{})
	r.takeover = ch
	r.snap.Status = StatusWaitingTakeover
	r.snap.Takeover = reason
	r.emitLocked("status", map[string]string{"status": string(StatusWaitingTakeover), "screen": screen, "reason": reason})
	r.mu.Unlock()
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
			r.agentText.WriteString(d.Delta)
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
			r.agentText.Reset()
			r.agentText.WriteString(n.Item.Text)
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
	r.emit("tool_call", map[string]any{"callId": p.CallID, "tool": p.Tool, "arguments": trimParams(args)})
	start := time.Now()
	res := tools.Call(ctx, r.session, p.Tool, args)
	rec := ToolCall{CallID: p.CallID, Tool: p.Tool, Arguments: trimParams(args), Success: res.Success, Ms: time.Since(start).Milliseconds()}
	out := codexrpc.DynamicToolCallResponse{Success: res.Success}
	for _, c := range res.Content {
		if c.Type == "image" {
			rec.Images++
			out.ContentItems = append(out.ContentItems, codexrpc.ContentItem{Type: "inputImage", ImageURL: c.ImageURL})
			continue
		}
		rec.Output += c.Text
		out.ContentItems = append(out.ContentItems, codexrpc.ContentItem{Type: "inputText", Text: c.Text})
	}
	if len(rec.Output) > 2000 {
		rec.Output = rec.Output[:2000]
	}
	r.mu.Lock()
	r.snap.ToolCalls = append(r.snap.ToolCalls, rec)
	r.emitLocked("tool_result", rec)
	r.mu.Unlock()
	return out
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

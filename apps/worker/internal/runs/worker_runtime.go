package runs

// The worker runtime (issue 30): the worker itself runs the agent loop. It
// calls the model's Responses API (internal/responses) with the computer
// tools as function tools, carries each call out through the machine
// (execTool: the same tools, leases, namespace rule and events as a Codex
// run's dynamic tool calls) and gives the results back, screenshots as
// input_image content. The model key never leaves the worker, so this
// runtime runs on every machine, vendors' stock desktops included.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/responses"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared"
)

// LoopLimits bound one run of the worker runtime. Each excess ends the run
// failed with a reason that names it.
type LoopLimits struct {
	// MaxSteps bounds the model requests of one run
	// (WORKER_RUN_MAX_STEPS).
	MaxSteps int
	// TokenBudget bounds the tokens the model reports for one run, all
	// requests together (WORKER_RUN_TOKEN_BUDGET).
	TokenBudget int64
	// KeepScreenshots is how many of the latest screenshots keep their
	// bytes in the conversation sent to the model; older ones are replaced
	// by a short note (WORKER_RUN_KEEP_SCREENSHOTS).
	KeepScreenshots int
}

// DefaultLoop is the worker runtime's bounds when none are set.
var DefaultLoop = LoopLimits{MaxSteps: 150, TokenBudget: 5_000_000, KeepScreenshots: 3}

func (l LoopLimits) withDefaults() LoopLimits {
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultLoop.MaxSteps
	}
	if l.TokenBudget <= 0 {
		l.TokenBudget = DefaultLoop.TokenBudget
	}
	if l.KeepScreenshots <= 0 {
		l.KeepScreenshots = DefaultLoop.KeepScreenshots
	}
	return l
}

// elidedScreenshot replaces an older screenshot's bytes in the
// conversation.
const elidedScreenshot = "(an earlier screenshot, left out to keep the conversation small; take a new one to see the screen now)"

// runtimeFor picks a run's runtime: want, or the machine's default (Codex
// in the machine where an agent may run there, else the worker's loop).
func (m *Manager) runtimeFor(machine machines.Machine, want string) (string, error) {
	noAgent := machines.NoAgentOf(machine)
	switch want {
	case "":
		want = providers.RuntimeMachine
		if noAgent != nil {
			want = providers.RuntimeWorker
		}
	case providers.RuntimeWorker, providers.RuntimeMachine:
	default:
		return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "runtime: want %q or %q, got %q",
			providers.RuntimeWorker, providers.RuntimeMachine, codexrpc.Clip(want, 64))
	}
	if want == providers.RuntimeMachine && noAgent != nil {
		return "", noAgent
	}
	if want == providers.RuntimeWorker && m.o.Responses == nil {
		return "", shared.Errorf(http.StatusNotImplemented, shared.CodeUnavailable,
			"this worker has no model for the worker runtime (set MODEL_UPSTREAM_URL and MODEL_API_KEY or MODEL_API_KEY_FILE)")
	}
	return want, nil
}

// convItem is one item of the worker runtime's conversation: an item as
// sent or received (raw), or a tool's output.
type convItem struct {
	raw    json.RawMessage
	callID string
	output []tools.Content
}

// inputOf renders the conversation for the next request: only the last
// keep screenshots carry their bytes.
func inputOf(conv []convItem, keep int) []json.RawMessage {
	images := 0
	for _, it := range conv {
		for _, c := range it.output {
			if c.Type == "image" {
				images++
			}
		}
	}
	skip := images - keep // the oldest ones are notes
	out := make([]json.RawMessage, 0, len(conv))
	for _, it := range conv {
		if it.raw != nil {
			out = append(out, it.raw)
			continue
		}
		parts := make([]map[string]string, 0, len(it.output))
		for _, c := range it.output {
			if c.Type != "image" {
				parts = append(parts, map[string]string{"type": "input_text", "text": c.Text})
				continue
			}
			if skip > 0 {
				skip--
				parts = append(parts, map[string]string{"type": "input_text", "text": elidedScreenshot})
				continue
			}
			parts = append(parts, map[string]string{"type": "input_image", "image_url": c.ImageURL})
		}
		if len(parts) == 0 {
			parts = append(parts, map[string]string{"type": "input_text", "text": "(no output)"})
		}
		b, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": it.callID, "output": parts})
		out = append(out, b)
	}
	return out
}

// functionTools is the computer tools as the Responses API's function
// tools (their JSON schemas as they are: not strict, since the tools
// check their own arguments and answer the model with what is wrong).
func functionTools() []responses.Tool {
	out := make([]responses.Tool, 0, len(tools.All))
	for _, t := range tools.All {
		out = append(out, responses.Tool{Type: "function", Name: t.Name, Description: t.Description, Parameters: json.RawMessage(t.Schema)})
	}
	return out
}

func userMessage(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "message", "role": "user",
		"content": []map[string]string{{"type": "input_text", "text": text}}})
	return b
}

// recordedCalls is the conversation's calls and their outputs as a
// resumed run's stored tool results hold them (text only: a screenshot's
// bytes are not stored, so a note stands in for each).
func (r *Run) recordedCalls() []convItem {
	r.mu.Lock()
	calls := append([]ToolCall(nil), r.snap.ToolCalls...)
	r.mu.Unlock()
	var out []convItem
	for _, tc := range calls {
		if tc.CallID == "" || tc.Tool == "" {
			continue
		}
		raw, err := json.Marshal(map[string]string{"type": "function_call", "call_id": tc.CallID, "name": tc.Tool, "arguments": string(tc.Arguments)})
		if err != nil {
			continue
		}
		content := []tools.Content{{Type: "text", Text: tc.Output}}
		if tc.Images > 0 {
			content = append(content, tools.Content{Type: "text", Text: fmt.Sprintf("(%d screenshot(s) of this call are not kept across a worker restart)", tc.Images)})
		}
		out = append(out, convItem{raw: raw}, convItem{callID: tc.CallID, output: content})
	}
	return out
}

// driveWorker is a run's agent loop in the worker: ask the model, carry
// out its calls, give back their results, until it answers without a
// call (completed), a bound is reached, the model fails, or the run ends.
// resumed: a previous worker process had started the run (the model is
// told so, as a resumed Codex thread is).
func (r *Run) driveWorker(ctx context.Context, prompt, model string, resumed bool) error {
	c := r.m.o.Responses
	if c == nil {
		return fmt.Errorf("this worker has no model for the worker runtime")
	}
	lim := r.m.o.Loop
	// The bot's folder (its path is for Codex's working directory; the
	// tools take workspace-relative paths, so one command is enough here).
	if _, err := r.makeBotDir(ctx); err != nil {
		return fmt.Errorf("prepare the bot's folder: %w", err)
	}
	text := prompt
	if resumed {
		text = resumeText(prompt)
	}
	r.setStatus(StatusRunning, "")
	conv := []convItem{{raw: userMessage(text)}}
	if resumed {
		// Continued from the store: every call whose result was recorded
		// is given back as it was, so none is made twice.
		conv = append(conv, r.recordedCalls()...)
	}
	fns := functionTools()
	instr := instructions(r.botID, r.private)
	var used int64
	for step := 1; ; step++ {
		if step > lim.MaxSteps {
			return fmt.Errorf("the run reached its step limit: %d model requests (WORKER_RUN_MAX_STEPS)", lim.MaxSteps)
		}
		asked := time.Now()
		res, err := c.Create(ctx, responses.Request{Model: model, Instructions: instr, Input: inputOf(conv, lim.KeepScreenshots),
			Tools: fns, ToolChoice: "auto"}, func(attempt int, err error, wait time.Duration) {
			r.emit("model_retry", map[string]any{"attempt": attempt, "error": codexrpc.Clip(err.Error(), MaxNoteField), "waitSeconds": wait.Seconds()})
		})
		r.m.o.Metrics.ModelRequest(err == nil, time.Since(asked))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		used += res.Usage.TotalTokens
		r.emit("model_response", map[string]any{"step": step, "attempts": res.Attempts, "inputTokens": res.Usage.InputTokens,
			"outputTokens": res.Usage.OutputTokens, "totalTokens": used, "incomplete": res.Incomplete})
		var calls []responses.Item
		for _, it := range res.Output {
			switch it.Type {
			case "function_call":
				calls = append(calls, it)
				conv = append(conv, convItem{raw: it.Raw})
			case "message":
				conv = append(conv, convItem{raw: it.Raw})
				if t := it.Text(); t != "" {
					r.mu.Lock()
					r.addTextLocked(t, true)
					r.mu.Unlock()
					item := map[string]any{"item": map[string]string{"type": "agentMessage", "text": codexrpc.Clip(t, 4000)}}
					r.emit("notification", map[string]any{"method": "item/completed", "params": item})
				}
			default:
				// Reasoning and other items are not carried back: without
				// the store their encrypted state is not ours to replay.
			}
		}
		if used > lim.TokenBudget {
			return fmt.Errorf("the run used %d tokens; its token budget is %d (WORKER_RUN_TOKEN_BUDGET)", used, lim.TokenBudget)
		}
		if len(calls) == 0 {
			r.setStatus(StatusCompleted, "")
			return nil
		}
		for _, call := range calls {
			args := json.RawMessage(call.Arguments)
			if !json.Valid(args) {
				// Not JSON: the tool refuses it as a string, with the
				// reason, and the model reads it.
				args = json.RawMessage(strconv.Quote(call.Arguments))
			}
			out := r.execTool(ctx, call.CallID, call.Name, args)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			conv = append(conv, convItem{callID: call.CallID, output: out.Content})
		}
	}
}

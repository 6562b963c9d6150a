package runs

import (
	"context"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
)

// What one run keeps of what its computer sends. A computer is not trusted
// (its teammates have a shell on it; issue 25): the JSON-RPC caps are in
// codexrpc (MaxMessage, MaxMethod, MaxInflight), these bound what a run
// holds and records. The first excess ends the run failed with a reason
// that names the cap; nothing past a cap is kept in memory or the store.
const (
	// MaxAgentText bounds the run's message (the agent's text of the
	// turn). The text kept is cut there and marked codexrpc.Truncated.
	MaxAgentText = 1 << 20
	// MaxRunEvents and MaxRunEventBytes bound a run's recorded events (the
	// store, the live run's memory and so the SSE history): count and
	// JSON bytes of every event but the worker's own (ownEvents).
	MaxRunEvents     = 20000
	MaxRunEventBytes = 16 << 20
	// MaxBotdNotes bounds what botd's /events adds to one run (apply
	// guard blocks, crashes, preemptions, egress changes); each text field
	// of such a note is cut at MaxNoteField.
	MaxBotdNotes = 1000
	MaxNoteField = 2048
	// MaxReason bounds a run's error text (it may quote the computer, e.g.
	// a turn's error message).
	MaxReason = 4096
	// MaxIDLen bounds the thread and turn ids the computer names.
	MaxIDLen = 256
)

// ownEvents are the worker's own events (a handful per run): always kept,
// outside the caps, so a run that hit one still records how it ended.
var ownEvents = map[string]bool{"status": true, "checkpoint": true, "checkpoint_failed": true, "resumed": true}

// violateLocked ends the run for an excess: the first one is the run's
// reason; the run's context is cancelled with it so the turn stops at once.
func (r *Run) violateLocked(err *codexrpc.LimitError) {
	if r.violation != nil {
		return
	}
	r.violation = err
	r.traced(r.m.o.Log.Warn()).Str("run", r.id).Str("reason", err.Error()).Msg("the computer exceeded a cap; the run fails")
	if r.abort != nil {
		r.abort(err)
	} else if r.cancel != nil {
		r.cancel()
	}
}

// limitOf returns the cap a run's context was cancelled for, if any.
func limitOf(ctx context.Context) (*codexrpc.LimitError, bool) {
	return codexrpc.AsLimit(context.Cause(ctx))
}

// messageLocked is the run's message: the agent's text, marked when cut.
func (r *Run) messageLocked() string {
	if r.textCut {
		return r.agentText.String() + codexrpc.Truncated
	}
	return r.agentText.String()
}

// addTextLocked appends (or, with reset, replaces) the agent's text under
// MaxAgentText.
func (r *Run) addTextLocked(s string, reset bool) {
	if reset {
		r.agentText.Reset()
		r.textCut = false
	}
	if r.textCut {
		return
	}
	room := MaxAgentText - r.agentText.Len()
	if len(s) <= room {
		r.agentText.WriteString(s)
		return
	}
	sent := int64(r.agentText.Len() + len(s))
	r.agentText.WriteString(codexrpc.ClipBytes(s, room))
	r.textCut = true
	r.violateLocked(codexrpc.Limitf("the computer sent %s of agent text; the cap is %s", codexrpc.Size(sent), codexrpc.Size(MaxAgentText)))
}

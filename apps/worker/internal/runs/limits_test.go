package runs

// The caps on what a run keeps of what its computer sends (issue 25): the
// first excess cancels the run with a reason naming the cap, and nothing
// past the cap reaches the store. The whole flood through a hostile
// machine is TestHostileMachineFlood in apps/worker.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
)

// capped gives r a context cancelled with the cap it exceeds.
func capped(r *Run) context.Context {
	ctx, abort := context.WithCancelCause(context.Background())
	r.abort = abort
	return ctx
}

func requireCapped(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	require.Error(t, ctx.Err(), "the run was cancelled")
	le, ok := limitOf(ctx)
	require.True(t, ok, "for a cap: %v", context.Cause(ctx))
	require.Equal(t, want, le.Error())
}

func TestEventCountCap(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	ctx := capped(r)
	for range MaxRunEvents + 10 {
		r.HandleNotification(codexrpc.NotifyThreadTokenUsage, json.RawMessage(`{}`))
	}
	requireCapped(t, ctx, "the computer caused more than 20000 events in this run; the cap is 20000")
	r.setStatus(StatusFailed, "x")
	evs, err := st.Events(t.Context(), "r1", 0)
	require.NoError(t, err)
	require.Len(t, evs, MaxRunEvents+1, "the cap's events and the final status")
	require.Equal(t, "status", evs[len(evs)-1].Type, "the worker's own status is still recorded")
}

func TestEventBytesCap(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	ctx := capped(r)
	params, _ := json.Marshal(map[string]string{"pad": strings.Repeat("p", 4000)})
	for range MaxRunEventBytes/4000 + 10 {
		r.HandleNotification(codexrpc.NotifyThreadTokenUsage, params)
	}
	requireCapped(t, ctx, "the computer caused more than 16 MiB of events in this run; the cap is 16 MiB")
	evs, err := st.Events(t.Context(), "r1", 0)
	require.NoError(t, err)
	n := 0
	for _, e := range evs {
		n += len(e.Data)
	}
	require.LessOrEqual(t, n, MaxRunEventBytes)
}

func TestBotdNotesCap(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	ctx := capped(r)
	for range MaxBotdNotes + 500 {
		r.Note("botd", map[string]string{"kind": "apply_guard_blocked"})
	}
	requireCapped(t, ctx, "botd's /events reported more than 1000 events for this run; the cap is 1000")
	evs, err := st.Events(t.Context(), "r1", 0)
	require.NoError(t, err)
	require.Len(t, evs, MaxBotdNotes)
}

func TestAgentTextCap(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	ctx := capped(r)
	delta, _ := json.Marshal(map[string]string{"delta": strings.Repeat("é", 300<<10)}) // 600 KiB each
	for range 3 {
		r.HandleNotification(codexrpc.NotifyAgentMessageDelta, delta)
	}
	requireCapped(t, ctx, "the computer sent 1.2 MiB of agent text; the cap is 1 MiB")
	r.setStatus(StatusFailed, "x")
	got, err := st.GetRun(t.Context(), "r1")
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(got.Message, codexrpc.Truncated), "marked")
	text := strings.TrimSuffix(got.Message, codexrpc.Truncated)
	require.Equal(t, MaxAgentText, len(text), "cut at the cap (a whole number of characters)")
	require.Equal(t, strings.Repeat("é", MaxAgentText/2), text)
	// A completed item's text replaces the deltas, under the same cap.
	r, _ = newTestRun(t, ApproveNone)
	ctx = capped(r)
	r.HandleNotification(codexrpc.NotifyAgentMessageDelta, delta)
	item, _ := json.Marshal(map[string]any{"item": map[string]string{"type": "agentMessage", "text": strings.Repeat("x", 2<<20)}})
	r.HandleNotification(codexrpc.NotifyItemCompleted, item)
	r.mu.Lock()
	msg := r.messageLocked()
	r.mu.Unlock()
	require.Equal(t, strings.Repeat("x", MaxAgentText)+codexrpc.Truncated, msg)
	requireCapped(t, ctx, "the computer sent 2 MiB of agent text; the cap is 1 MiB")
}

package runs

// How a run answers Codex's server requests (WORKER_APPROVALS, questions
// for a person, unknown methods), that every answer is recorded in the
// store under the run's epoch, and that a run whose lease moved on is
// fenced: its writes are refused and it stops. The full run against a real
// botd and Codex is in apps/worker (e2e_test.go, controlplane_test.go).

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// newTestRun makes a run record under a live lease and a Run bound to it.
func newTestRun(t *testing.T, policy ApprovalPolicy) (*Run, store.Store) {
	st, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "worker.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.CreateComputer(t.Context(), store.Computer{ID: "c1", ScopeKind: store.ScopeTeam, ScopeID: "t", Kind: "team",
		Provider: "attach", DesiredState: store.StateRunning, ObservedState: store.StateRunning, HomeKey: "c1"}))
	l, err := st.AcquireLease(t.Context(), "team:t/alice", "r1", time.Minute)
	require.NoError(t, err)
	require.NoError(t, st.CreateRun(t.Context(), store.Run{ID: "r1", ComputerID: "c1", BotID: "alice", LeaseKey: "team:t/alice", Epoch: l.Epoch, State: "running"}))
	m := NewManager(Options{Store: st, Approvals: policy, Log: zerolog.Nop()})
	_, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &Run{m: m, id: "r1", botID: "alice", computerID: "c1", leaseKey: "team:t/alice", epoch: l.Epoch, cancel: cancel,
		subs: map[chan Event]struct{}{}, done: make(chan struct{}), snap: Snapshot{ID: "r1", Status: StatusRunning}}
	return r, st
}

func answer(t *testing.T, r *Run, method string, params any) string {
	t.Helper()
	b, _ := json.Marshal(params)
	res, err := r.HandleRequest(t.Context(), method, b)
	if err != nil {
		return "error: " + err.Error()
	}
	out, _ := json.Marshal(res)
	return string(out)
}

func TestApprovalPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy                     ApprovalPolicy
		command, patch, execLegacy string
	}{
		{ApproveNone, `{"decision":"decline"}`, `{"decision":{"denied":{"rejection":"open-bot's policy declines this; use the provided tools"}}}`, `"denied"`},
		{ApproveAll, `{"decision":"accept"}`, `{"decision":"approved"}`, `"approved"`},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			r, st := newTestRun(t, tc.policy)
			params := map[string]any{"threadId": "th", "turnId": "tu", "itemId": "i1", "command": "rm -rf /"}
			require.JSONEq(t, tc.command, answer(t, r, codexrpc.MethodCommandApproval, params))
			require.JSONEq(t, tc.command, answer(t, r, codexrpc.MethodFileChangeApproval, params))
			require.JSONEq(t, tc.patch, answer(t, r, codexrpc.MethodApplyPatchApproval, params))
			require.Contains(t, answer(t, r, codexrpc.MethodExecCommandApproval, params), tc.execLegacy)
			// Never more permissions, whatever the policy.
			require.JSONEq(t, `{"permissions":{},"scope":"turn"}`, answer(t, r, codexrpc.MethodPermissionsApproval, params))
			evs, err := st.Events(t.Context(), "r1", 0)
			require.NoError(t, err)
			require.Len(t, evs, 5, "each answer is recorded")
			require.Equal(t, "approval", evs[0].Type)
		})
	}
}

func TestNoPersonAvailable(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	got := answer(t, r, codexrpc.MethodUserInput, map[string]any{"threadId": "th", "turnId": "tu", "itemId": "i",
		"questions": []map[string]any{{"id": "q1", "header": "Login", "question": "What is the password?"}, {"id": "q2", "header": "x", "question": "Continue?"}}})
	var res codexrpc.ToolRequestUserInputResponse
	require.NoError(t, json.Unmarshal([]byte(got), &res))
	require.Len(t, res.Answers, 2)
	for _, q := range []string{"q1", "q2"} {
		require.Contains(t, res.Answers[q].Answers[0], "No person is available")
		require.Contains(t, res.Answers[q].Answers[0], "request_takeover")
	}
	require.JSONEq(t, `{"action":"decline"}`, answer(t, r, codexrpc.MethodElicitation, map[string]any{}))
	require.Contains(t, answer(t, r, "some/futureRequest", map[string]any{}), "does not support some/futureRequest")
	evs, err := st.Events(t.Context(), "r1", 0)
	require.NoError(t, err)
	require.Equal(t, "user_input", evs[0].Type)
}

// TestFencedRunStops: once another holder has the bot's lease, the old run's
// next write is refused, the run is cancelled and writes nothing more.
func TestFencedRunStops(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.emit("status", map[string]string{"status": "running"})
	// The lease expires and a restarted worker takes it.
	_, err := st.AcquireLease(t.Context(), "team:t/alice", "r1", time.Minute)
	require.NoError(t, err)
	r.emit("tool_call", map[string]string{"tool": "shell"})
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the fenced run was not cancelled")
	}
	r.setStatus(StatusCompleted, "")
	evs, err := st.Events(t.Context(), "r1", 0)
	require.NoError(t, err)
	require.Len(t, evs, 1, "nothing after the fence reached the store")
	got, err := st.GetRun(t.Context(), "r1")
	require.NoError(t, err)
	require.Equal(t, "running", got.State, "the stale run could not complete itself")
}

// TestRecoverFailsWhatCannotResume: a run left queued (no Codex thread yet)
// by a dead worker is failed with the reason at start, under a new epoch,
// and its bot's lease is free again.
func TestRecoverFailsWhatCannotResume(t *testing.T) {
	_, st := newTestRun(t, ApproveNone)
	ctx := t.Context()
	old, err := st.GetLease(ctx, "team:t/alice")
	require.NoError(t, err)
	m := NewManager(Options{Store: st, Log: zerolog.Nop()})
	require.NoError(t, m.Recover(ctx))
	got, err := st.GetRun(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, string(StatusFailed), got.State)
	require.Contains(t, got.Error, "the worker restarted while this run was running; the run was not resumed")
	require.Greater(t, got.Epoch, old.Epoch, "written under a new epoch")
	l, err := st.AcquireLease(ctx, "team:t/alice", "r2", time.Minute)
	require.NoError(t, err, "the bot is free")
	require.Greater(t, l.Epoch, got.Epoch)
	// The old epoch can write nothing now.
	_, err = st.AppendEvent(ctx, "r1", old.Epoch, "status", []byte(`{}`))
	require.ErrorIs(t, err, store.ErrStaleEpoch)
}

// stuckStore is a store whose event writes hang until their context ends
// (a worker cut off from Postgres); it reports why each one ended.
type stuckStore struct {
	store.Store
	entered chan struct{}
	ended   chan error
}

func (s *stuckStore) AppendEvent(ctx context.Context, runID string, epoch int64, typ string, data []byte) (int64, error) {
	s.entered <- struct{}{}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return 0, ctx.Err()
}

// TestFenceDoesNotWaitForAStuckWrite: a worker that stops acting for a
// computer (its store gone) fences the computer's runs while one of them is
// inside a store write that holds the run's lock. The fence cancels that
// write instead of waiting out its 10 s timeout (stop 44: under load the
// cut-off worker's run outlived the hand-over while the new owner resumed
// it), and the run is cancelled and acts no more.
func TestFenceDoesNotWaitForAStuckWrite(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	ss := &stuckStore{Store: st, entered: make(chan struct{}), ended: make(chan error, 1)}
	r.m.o.Store = ss
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	emitted := make(chan struct{})
	go func() {
		r.emit("tool_call", map[string]string{"tool": "shell"})
		close(emitted)
	}()
	<-ss.entered // the write holds r.mu and waits on the store
	r.fence()
	require.Error(t, ctx.Err(), "the fenced run is cancelled at once")
	require.ErrorIs(t, <-ss.ended, context.Canceled, "the stuck write was cancelled by the fence, not ended by its timeout")
	<-emitted
	res := r.execTool(context.Background(), "c1", "shell", json.RawMessage(`{}`))
	require.False(t, res.Success)
	require.Equal(t, errFencedCall, res.Content[0].Text, "a fenced run carries out no tool call")
}

// TestNewRunWaitsForTheEndingRun: a run that has reported its outcome
// still holds its bot's lease while its end runs (recording, checkpoint);
// a new run of the bot waits for that end and then gets the lease, while a
// run still going leaves the lease busy at once.
func TestNewRunWaitsForTheEndingRun(t *testing.T) {
	r, st := newTestRun(t, ApproveNone)
	m := r.m
	m.mu.Lock()
	m.runs[r.id] = r
	m.mu.Unlock()

	_, err := m.acquireBotLease(t.Context(), "team:t/alice", "r2")
	require.ErrorIs(t, err, store.ErrBusy, "a run still going keeps its lease")

	r.setStatus(StatusCompleted, "")
	got := make(chan error, 1)
	go func() {
		_, err := m.acquireBotLease(context.Background(), "team:t/alice", "r2")
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the new run did not wait for the ended run's end: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	// The end is done: the lease is released, then done closed (as run's
	// deferred end does).
	require.NoError(t, st.ReleaseLease(t.Context(), "team:t/alice", r.epoch))
	close(r.done)
	select {
	case err := <-got:
		require.NoError(t, err, "the new run gets the lease once the end gave it back")
	case <-time.After(30 * time.Second):
		t.Fatal("the new run still waits after the end")
	}
}

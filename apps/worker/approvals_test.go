package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/pkg/shared/client"
)

// TestApprovalsThroughCodex: with WORKER_APPROVAL_POLICY=untrusted, real
// Codex asks the worker before its own built-in command tool runs a command
// the scripted model asked for (even ls); WORKER_APPROVALS decides. Declined, the
// command never runs (no marker file in the bot's folder, the run's events
// carry the declined approval); accepted, it runs and the marker is there.
func TestApprovalsThroughCodex(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	command := "" // the command the model runs (guarded by mu)
	var model *mockmodel.Server
	model = mockmodel.New(func(outs []mockmodel.Output) mockmodel.Step {
		if len(outs) == 0 {
			mu.Lock()
			cmd := command
			mu.Unlock()
			return execStep(t, model.Tools(), cmd)
		}
		mu.Lock()
		for _, o := range outs {
			seen = append(seen, string(o.Output))
		}
		mu.Unlock()
		return mockmodel.Step{Message: "done"}
	})
	srv := httptest.NewServer(model)
	defer srv.Close()
	c := startComputer(t, srv.URL, 450, "VIEW_PORT_BASE=23650")
	bc := client.New(c.url, c.token, nil)

	for _, tc := range []struct {
		askFor, answer, bot, cmd string
		asked, ran               bool
		modelSees                string
	}{
		{runs.AskUntrusted, "decline", "dora", "touch approval-marker", true, false, "rejected"},
		{runs.AskUntrusted, "accept", "erin", "touch approval-marker", true, true, "exited with code 0"},
		// Even a read-only command is asked about (Codex 0.171's exec_command).
		{runs.AskUntrusted, "decline", "gus", "ls", true, false, "rejected"},
		// The default: Codex never asks, so WORKER_APPROVALS has no say
		// and the command runs.
		{runs.AskNever, "decline", "fay", "touch approval-marker", false, true, "exited with code 0"},
	} {
		t.Run(tc.askFor+"/"+tc.answer+"/"+strings.Fields(tc.cmd)[0], func(t *testing.T) {
			mu.Lock()
			command = tc.cmd
			mu.Unlock()
			env := startWorkerWith(t, c, "scripted-model", func(cfg *serveConfig) {
				cfg.Approvals, cfg.AskFor = tc.answer, tc.askFor
			}, tc.bot)
			id := env.startRun(t, tc.bot, "create the marker file")
			final, _ := waitRun(t, env, id, 3*time.Minute)
			require.Equal(t, runs.StatusCompleted, final.Status, final.Error)

			var decisions []string
			for _, ev := range runEvents(t, env, id) {
				if ev.Type == "approval" {
					var d struct{ Method, Decision string }
					require.NoError(t, json.Unmarshal(ev.Data, &d))
					require.Equal(t, "item/commandExecution/requestApproval", d.Method)
					decisions = append(decisions, d.Decision)
				}
			}
			if tc.asked {
				require.Equal(t, []string{tc.answer}, decisions, "Codex asked once and the worker answered %s", tc.answer)
			} else {
				require.Empty(t, decisions, "Codex must not ask under %s", tc.askFor)
			}

			data, err := bc.ReadFile(t.Context(), "bots/"+tc.bot+"/approval-marker", 1024)
			if tc.ran {
				require.NoError(t, err, "accepted: the command ran and wrote the marker")
				require.Empty(t, data)
			} else {
				var ce *client.Error
				require.ErrorAs(t, err, &ce, "declined: the marker must not exist")
				require.Equal(t, http.StatusNotFound, ce.Status)
			}
			mu.Lock()
			saw := strings.Join(seen, "\n")
			seen = nil
			mu.Unlock()
			require.Contains(t, saw, tc.modelSees, "what the command tool told the model")
		})
	}
}

// execStep calls Codex's own built-in command tool: exec_command (unified
// exec, {"cmd": "..."}), as the tools array Codex sends the model offers it
// (the worker's "shell" is a different, dynamic tool that botd runs).
func execStep(t *testing.T, tools []json.RawMessage, command string) mockmodel.Step {
	for _, raw := range tools {
		var tl struct {
			Type, Name string
		}
		if json.Unmarshal(raw, &tl) == nil && tl.Type == "function" && tl.Name == "exec_command" {
			return mockmodel.Step{Tool: "exec_command", Args: map[string]any{"cmd": command}}
		}
	}
	t.Errorf("Codex offered no exec_command tool: %d tools", len(tools))
	return mockmodel.Step{Message: "no command tool offered"}
}

// runEvent is a run event as the stream carries it (runs.Event).
type runEvent struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// runEvents reads an ended run's whole event stream (replayed from the start).
func runEvents(t *testing.T, e *workerEnv, id string) []runEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	resp := openEvents(t, ctx, e, id)
	defer resp.Body.Close()
	var evs []runEvent
	ended := false
	err := readSSE(resp.Body, func(event, data string) bool {
		if event == "end" {
			ended = true
			return false
		}
		var ev runEvent
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		evs = append(evs, ev)
		return true
	})
	if !ended {
		t.Fatalf("event stream ended without an end event (err %v)", err)
	}
	return evs
}

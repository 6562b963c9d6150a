package main

import (
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// TestNoPersonAvailableThroughCodex: the model asks a person a question
// (Codex's request_user_input); Codex hands the question to the worker,
// which answers that no person is available and how to reach one, and the
// model reads that answer.
func TestNoPersonAvailableThroughCodex(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	model := mockmodel.New(func(outs []mockmodel.Output) mockmodel.Step {
		if len(outs) == 0 {
			return mockmodel.Step{Tool: "request_user_input", Args: map[string]any{"questions": []map[string]any{{
				"id": "pw", "header": "Sign in", "question": "What is the password for the CRM?",
				"options": []map[string]any{{"label": "I will type it", "description": "take over the screen"}, {"label": "Skip", "description": "do without"}}}}}}
		}
		mu.Lock()
		for _, o := range outs {
			seen = append(seen, string(o.Output))
		}
		mu.Unlock()
		return mockmodel.Step{Message: "understood"}
	})
	srv := httptest.NewServer(model)
	defer srv.Close()
	// Codex offers request_user_input outside plan mode only behind this
	// feature; the worker must answer whenever Codex does ask.
	prov := scripted(srv.URL)
	prov.Features = "default_mode_request_user_input = true\n"
	c := startComputerWith(t, prov, 404, "VIEW_PORT_BASE=31700")
	env := startWorker(t, c, "carol")
	id := env.startRun(t, "carol", "ask a person for the password")
	final, events := waitRun(t, env, id, 3*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
	require.Contains(t, events, "user_input", "the worker was asked")
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(seen, "\n")
	require.Contains(t, all, "No person is available", "the model read the worker's answer: %s", all)
}

package main

// The worker runtime against a model that misbehaves (issue 30, req 1):
// bad calls are tool errors the model reads, a model that never stops
// meets the step limit, one that talks too much the token budget, an
// upstream that fails is retried a bounded number of times and then fails
// the run with its status, an answer of 10 MiB fails it by the cap, and
// the conversation keeps only the last screenshots' bytes. One real botd
// (attached), one worker; the model is a loopback server whose behaviour
// each case sets.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// seenRequest is what one /v1/responses request carried.
type seenRequest struct {
	outputs         []string // each function_call_output's text
	images, elided  int      // input_image items, elided screenshot notes
	unchangedFrames int      // outputs saying the screen had not changed
}

// badModel is a Responses server whose answer the running case decides.
type badModel struct {
	mu       sync.Mutex
	answer   func(w http.ResponseWriter, n int, req seenRequest)
	requests []seenRequest
}

func (m *badModel) set(answer func(w http.ResponseWriter, n int, req seenRequest)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.answer, m.requests = answer, nil
}

func (m *badModel) seen() []seenRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]seenRequest(nil), m.requests...)
}

func (m *badModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+scriptedKey {
		http.Error(w, "no key", http.StatusUnauthorized)
		return
	}
	var body struct {
		Input []struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req seenRequest
	for _, it := range body.Input {
		if it.Type != "function_call_output" {
			continue
		}
		var parts []struct{ Type, Text string }
		_ = json.Unmarshal(it.Output, &parts)
		text := ""
		for _, p := range parts {
			switch p.Type {
			case "input_image":
				req.images++
			case "input_text":
				text += p.Text
				if strings.Contains(p.Text, "left out to keep the conversation small") {
					req.elided++
				}
				if strings.Contains(p.Text, "has not changed since your last screenshot") {
					req.unchangedFrames++
				}
			}
		}
		req.outputs = append(req.outputs, text)
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	n, answer := len(m.requests), m.answer
	m.mu.Unlock()
	answer(w, n, req)
}

// answerCall streams a function call (args as sent, JSON or not), with
// tokens as the answer's usage.
func answerCall(w http.ResponseWriter, n int, name, args string, tokens int) {
	item := map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", n), "call_id": fmt.Sprintf("call_%d", n), "name": name, "arguments": args}
	streamAnswer(w, item, tokens)
}

func answerText(w http.ResponseWriter, text string) {
	streamAnswer(w, map[string]any{"type": "message", "role": "assistant", "content": []map[string]any{{"type": "output_text", "text": text}}}, 1)
}

func streamAnswer(w http.ResponseWriter, item map[string]any, tokens int) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []map[string]any{
		{"type": "response.output_item.done", "output_index": 0, "item": item},
		{"type": "response.completed", "response": map[string]any{"id": "r", "usage": map[string]any{"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens}}},
	} {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
	}
}

func TestWorkerRuntimeBadModel(t *testing.T) {
	model := &badModel{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	c := startComputerWith(t, provider{}, 470)
	const bot = "erin"
	e := startWorkerWith(t, c, "scripted-model", func(cfg *serveConfig) {
		cfg.Getenv = envMap(map[string]string{"MODEL_UPSTREAM_URL": srv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
			"WORKER_RUN_MAX_STEPS": "10", "WORKER_RUN_TOKEN_BUDGET": "2500", "WORKER_RUN_KEEP_SCREENSHOTS": "3"})
	}, bot)

	run := func(t *testing.T) (runs.Snapshot, []string) {
		t.Helper()
		id := e.startRunOn(t, bot, "go", "worker")
		return waitRun(t, e, id, 5*time.Minute)
	}

	t.Run("bad calls are tool errors the model reads", func(t *testing.T) {
		model.set(func(w http.ResponseWriter, n int, _ seenRequest) {
			switch n {
			case 1:
				answerCall(w, n, "no_such_tool", `{}`, 1)
			case 2:
				answerCall(w, n, "computer_act", `{"actions":"click everything"}`, 1)
			case 3:
				answerCall(w, n, "shell", `{not json`, 1)
			default:
				answerText(w, "Done despite the errors.")
			}
		})
		final, _ := run(t)
		require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
		seen := model.seen()
		require.Len(t, seen, 4)
		outs := seen[3].outputs
		require.Len(t, outs, 3, "each call's result went back to the model")
		require.Contains(t, outs[0], `no tool named "no_such_tool"`)
		require.Contains(t, outs[1], "invalid arguments")
		require.Contains(t, outs[2], "invalid arguments")
		require.Len(t, final.ToolCalls, 3)
		for _, tc := range final.ToolCalls {
			require.False(t, tc.Success, "%s", tc.Tool)
		}
		require.Equal(t, "Done despite the errors.", final.Message)
	})

	t.Run("the conversation keeps the last three screenshots", func(t *testing.T) {
		model.set(func(w http.ResponseWriter, n int, _ seenRequest) {
			switch {
			case n <= 6: // the pointer moves: each frame differs
				answerCall(w, n, "computer_act", fmt.Sprintf(`{"actions":[{"type":"move","x":%d,"y":200}]}`, 100+n*90), 1)
			case n <= 8: // two looks in a row: the second is most likely unchanged
				answerCall(w, n, "computer_observe", `{}`, 1)
			default:
				answerText(w, "Done looking.")
			}
		})
		final, _ := run(t)
		require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
		seen := model.seen()
		require.Len(t, seen, 9)
		require.Len(t, final.ToolCalls, 8)
		shots, unchanged := 0, 0
		for i, s := range seen {
			if i > 0 {
				// What the tool call before this request returned.
				tc := final.ToolCalls[i-1]
				shots += tc.Images
				if tc.Images == 0 {
					unchanged++
				}
			}
			require.Equal(t, min(shots, 3), s.images, "request %d: screenshots with their bytes", i+1)
			require.Equal(t, max(shots-3, 0), s.elided, "request %d: older screenshots as notes", i+1)
			require.Equal(t, unchanged, s.unchangedFrames, "request %d: unchanged frames sent as a note", i+1)
		}
		require.GreaterOrEqual(t, shots, 6, "the six moves each returned a screenshot")
		t.Logf("%d screenshots, %d unchanged frames sent as notes", shots, unchanged)
	})

	t.Run("a model that never stops meets the step limit", func(t *testing.T) {
		model.set(func(w http.ResponseWriter, n int, _ seenRequest) { answerCall(w, n, "shell", `{"argv":["true"]}`, 1) })
		final, _ := run(t)
		require.Equal(t, runs.StatusFailed, final.Status)
		require.Contains(t, final.Error, "step limit: 10 model requests (WORKER_RUN_MAX_STEPS)")
		require.Len(t, model.seen(), 10)
		require.Len(t, final.ToolCalls, 10)
	})

	t.Run("the token budget", func(t *testing.T) {
		model.set(func(w http.ResponseWriter, n int, _ seenRequest) {
			answerCall(w, n, "shell", `{"argv":["true"]}`, 1000)
		})
		final, _ := run(t)
		require.Equal(t, runs.StatusFailed, final.Status)
		require.Contains(t, final.Error, "the run used 3000 tokens; its token budget is 2500")
		require.Len(t, model.seen(), 3)
		require.Len(t, final.ToolCalls, 2, "the answer over budget is not carried out")
	})

	t.Run("429s are retried", func(t *testing.T) {
		model.set(func(w http.ResponseWriter, n int, _ seenRequest) {
			if n <= 2 {
				w.Header().Set("Retry-After", "0")
				http.Error(w, `{"error":{"type":"rate_limit_exceeded","message":"slow down"}}`, http.StatusTooManyRequests)
				return
			}
			answerText(w, "Done after waiting.")
		})
		final, events := run(t)
		require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
		retries := 0
		for _, ev := range events {
			if ev == "model_retry" {
				retries++
			}
		}
		require.Equal(t, 2, retries, "events: %v", events)
	})

	for _, tc := range []struct {
		name     string
		answer   func(w http.ResponseWriter)
		requests int
		reason   string
	}{
		{"an upstream that stays down fails the run with its status", func(w http.ResponseWriter) {
			http.Error(w, `{"error":{"code":"server_error","message":"down"}}`, http.StatusInternalServerError)
		}, 4, "the model answered HTTP 500 (server_error): down (after 4 attempts)"},
		{"a malformed stream", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"type\":\"response.output_item.done\",\"item\":\n\n")
		}, 4, "malformed_stream"},
		{"a 10 MiB answer", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			ev := "data: {\"type\":\"response.output_text.delta\",\"delta\":\"" + strings.Repeat("z", 8000) + "\"}\n\n"
			for range (10 << 20) / len(ev) {
				if _, err := io.WriteString(w, ev); err != nil {
					return
				}
			}
		}, 1, "the answer exceeded 8388608 bytes; the cap is 8388608"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model.set(func(w http.ResponseWriter, _ int, _ seenRequest) { tc.answer(w) })
			final, _ := run(t)
			require.Equal(t, runs.StatusFailed, final.Status)
			require.Contains(t, final.Error, tc.reason)
			require.NotContains(t, final.Error, scriptedKey)
			require.Len(t, model.seen(), tc.requests)
		})
	}

	// The worker still serves, and its bot is free: a last good run.
	model.set(func(w http.ResponseWriter, n int, _ seenRequest) { answerText(w, "Done.") })
	final, _ := run(t)
	require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
}

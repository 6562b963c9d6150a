package responses

// The client against model servers that misbehave the ways a real one
// (or one in the middle) can: every case is an httptest server on
// loopback, the only thing the tests stand in for.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testKey = "sk-test-0123456789abcdef0123456789"

// sse writes events as a Responses stream.
func sse(w http.ResponseWriter, events ...map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		b, _ := json.Marshal(e)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e["type"], b)
	}
}

func callItem(name, args string) map[string]any {
	return map[string]any{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name, "arguments": args, "status": "completed"}
}

func completed(total int) map[string]any {
	return map[string]any{"type": "response.completed", "response": map[string]any{"id": "resp_1",
		"usage": map[string]any{"input_tokens": total - 1, "output_tokens": 1, "total_tokens": total}}}
}

func goodAnswer(w http.ResponseWriter) {
	sse(w, map[string]any{"type": "response.created", "response": map[string]any{"id": "resp_1"}},
		map[string]any{"type": "response.output_item.done", "output_index": 0, "item": callItem("shell", `{"argv":["true"]}`)},
		completed(42))
}

func client(url string) *Client {
	return &Client{BaseURL: url + "/v1", Key: testKey, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, IdleTimeout: 2 * time.Second}
}

func TestCreateSendsAndParses(t *testing.T) {
	var got Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/v1/responses", r.URL.Path)
		require.Equal(t, "Bearer "+testKey, r.Header.Get("Authorization"))
		require.NoError(t, json.NewDecoder(r.Body).Decode(&got))
		goodAnswer(w)
	}))
	defer srv.Close()
	res, err := client(srv.URL).Create(t.Context(), Request{Model: "m", Input: []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"hi"}`)},
		Tools: []Tool{{Type: "function", Name: "shell", Parameters: json.RawMessage(`{"type":"object"}`)}}}, nil)
	require.NoError(t, err)
	require.True(t, got.Stream, "the request asks for a stream")
	require.False(t, got.Store, "the request asks the upstream to keep nothing")
	require.Len(t, res.Output, 1)
	require.Equal(t, "function_call", res.Output[0].Type)
	require.Equal(t, "shell", res.Output[0].Name)
	require.Equal(t, `{"argv":["true"]}`, res.Output[0].Arguments)
	require.JSONEq(t, `{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"argv\":[\"true\"]}","status":"completed"}`, string(res.Output[0].Raw))
	require.EqualValues(t, 42, res.Usage.TotalTokens)
	require.Equal(t, 1, res.Attempts)
}

// TestCreateBadUpstream: what is retried and what is not, and what the
// error names.
func TestCreateBadUpstream(t *testing.T) {
	for _, tc := range []struct {
		name string
		// bad answers the first `times` requests (all when times < 0).
		bad      func(w http.ResponseWriter)
		times    int
		wantErr  string // "" : the call succeeds after the retries
		attempts int    // requests the server saw
		status   int
	}{
		{name: "429 then ok", times: 2, attempts: 3, bad: func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"type":"rate_limit_exceeded","message":"slow down"}}`, http.StatusTooManyRequests)
		}},
		{name: "503 forever", times: -1, attempts: 4, status: 503, wantErr: "the model answered HTTP 503 (overloaded): try later (after 4 attempts)", bad: func(w http.ResponseWriter) {
			http.Error(w, `{"error":{"code":"overloaded","message":"try later"}}`, http.StatusServiceUnavailable)
		}},
		{name: "401 not retried", times: -1, attempts: 1, status: 401, wantErr: "HTTP 401", bad: func(w http.ResponseWriter) {
			http.Error(w, `{"error":{"message":"Incorrect API key provided: `+testKey+`"}}`, http.StatusUnauthorized)
		}},
		{name: "malformed event", times: -1, attempts: 4, wantErr: "malformed_stream", bad: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: response.created\ndata: {not json\n\n")
		}},
		{name: "malformed item then ok", times: 1, attempts: 2, bad: func(w http.ResponseWriter) {
			sse(w, map[string]any{"type": "response.output_item.done", "item": "a string"})
		}},
		{name: "cut stream", times: -1, attempts: 4, wantErr: "ended before response.completed", bad: func(w http.ResponseWriter) {
			sse(w, map[string]any{"type": "response.output_item.done", "item": callItem("shell", "{}")})
		}},
		{name: "response.failed", times: -1, attempts: 4, wantErr: "server_error", bad: func(w http.ResponseWriter) {
			sse(w, map[string]any{"type": "response.failed", "response": map[string]any{"error": map[string]any{"code": "server_error", "message": "boom"}}})
		}},
		{name: "10 MiB answer", times: -1, attempts: 1, wantErr: "the cap is", bad: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			chunk := strings.Repeat("x", 64<<10)
			for range 160 { // 10 MiB in one event's data
				io.WriteString(w, "data: "+chunk+"\n")
			}
		}},
		{name: "10 MiB of small events", times: -1, attempts: 1, wantErr: "the answer exceeded", bad: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			ev := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"" + strings.Repeat("y", 4000) + "\"}\n\n"
			for range (10 << 20) / len(ev) {
				io.WriteString(w, ev)
			}
		}},
		{name: "silent upstream", times: -1, attempts: 2, wantErr: "timeout", bad: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			time.Sleep(400 * time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := int(n.Add(1))
				if tc.times < 0 || i <= tc.times {
					tc.bad(w)
					return
				}
				goodAnswer(w)
			}))
			defer srv.Close()
			c := client(srv.URL)
			c.MaxAnswer = 8 << 20
			if tc.name == "silent upstream" {
				c.IdleTimeout, c.Attempts = 150*time.Millisecond, 2
			}
			retries := 0
			res, err := c.Create(t.Context(), Request{Model: "m"}, func(int, error, time.Duration) { retries++ })
			require.Equal(t, tc.attempts, int(n.Load()), "requests the upstream saw")
			require.Equal(t, tc.attempts-1, retries, "retries reported")
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tc.attempts, res.Attempts)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
			require.NotContains(t, err.Error(), testKey, "the key in an error")
			require.NotContains(t, err.Error(), testKey[:12], "a prefix of the key in an error")
			if tc.status != 0 {
				var ue *Error
				require.ErrorAs(t, err, &ue)
				require.Equal(t, tc.status, ue.Status)
			}
		})
	}
}

// TestCreateStopsWithContext: a run that ends (stop) ends its call at
// once, retries included.
func TestCreateStopsWithContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := client(srv.URL)
	c.Backoff, c.MaxBackoff, c.Attempts = time.Minute, time.Minute, 5
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Create(ctx, Request{Model: "m"}, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the run's end, not the upstream's answer")
}

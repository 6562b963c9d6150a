package codexrpc

// The caps on what a computer's app-server sends (issue 25): a loopback
// websocket server stands in for a hostile app-server behind botd's /agent.
// Each excess closes the connection with a *LimitError that names the cap
// and what was sent; nothing oversized is handed to the handler.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

type countingHandler struct {
	notes, maxMethod atomic.Int64
	block            chan struct{}
}

func (h *countingHandler) HandleRequest(ctx context.Context, method string, params json.RawMessage) (any, error) {
	select {
	case <-h.block:
	case <-ctx.Done():
	}
	return map[string]any{}, nil
}

func (h *countingHandler) HandleNotification(method string, params json.RawMessage) {
	h.notes.Add(1)
	if int64(len(method)) > h.maxMethod.Load() {
		h.maxMethod.Store(int64(len(method)))
	}
}

// hostile serves one websocket that sends msgs and then waits.
func hostile(t *testing.T, msgs ...[]byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for _, m := range msgs {
			if c.Write(r.Context(), websocket.MessageText, m) != nil {
				return
			}
		}
		_, _, _ = c.Read(r.Context())
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

func notification(method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return b
}

func TestCaps(t *testing.T) {
	huge := strings.Repeat("m", 16<<20)
	for _, tc := range []struct {
		name  string
		msgs  [][]byte
		want  string
		notes int64
	}{
		{"message", [][]byte{notification("ok", nil), notification(huge, map[string]any{})}, "the computer sent a 16 MiB JSON-RPC message; the cap is 4 MiB", 1},
		{"past the drain", [][]byte{[]byte(strings.Repeat("x", maxDrain+1<<20))}, "the computer sent a JSON-RPC message of more than 64 MiB; the cap is 4 MiB", 0},
		{"method", [][]byte{notification(strings.Repeat("m", 1<<20), nil)}, "the computer sent a JSON-RPC method name of 1 MiB; the cap is 128 bytes", 0},
		{"id", [][]byte{[]byte(`{"id":"` + strings.Repeat("1", 1000) + `","result":{}}`)}, "the computer sent a JSON-RPC id of 1002 bytes; the cap is 128 bytes", 0},
		{"inflight", func() [][]byte {
			var out [][]byte
			for i := range MaxInflight + 1 {
				b, _ := json.Marshal(map[string]any{"id": i, "method": MethodToolCall, "params": map[string]any{}})
				out = append(out, b)
			}
			return out
		}(), "the computer had more than 32 requests waiting for the worker's answer; the cap is 32", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &countingHandler{block: make(chan struct{})}
			defer close(h.block)
			c, err := Dial(t.Context(), hostile(t, tc.msgs...), nil, h)
			require.NoError(t, err)
			defer c.Close()
			select {
			case <-c.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the connection was not closed at the cap")
			}
			le, ok := AsLimit(c.Err())
			require.True(t, ok, "closed for a cap: %v", c.Err())
			require.Equal(t, tc.want, le.Error())
			require.Equal(t, tc.notes, h.notes.Load())
			require.LessOrEqual(t, h.maxMethod.Load(), int64(MaxMethod))
			// A call on the closed connection says why it closed.
			err = c.Call(t.Context(), MethodInitialize, nil, nil)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

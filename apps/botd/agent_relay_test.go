package main

import (
	"context"
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// initialize sends the app-server's initialize request over c and returns
// the response's result.
func initialize(ctx context.Context, t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	req := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"relay-test","version":"0"},"capabilities":{"experimentalApi":true}}}`
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(req)))
	for {
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var msg struct {
			ID     *int           `json:"id"`
			Result map[string]any `json:"result"`
			Error  any            `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &msg))
		if msg.ID != nil && *msg.ID == 1 {
			require.Nil(t, msg.Error, string(b))
			return msg.Result
		}
	}
}

func TestAgentRelay(t *testing.T) {
	d := startDaemon(t, tempHome(t), "relay-token-0123456789")
	d.waitHealthy(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	_, resp, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent", nil)
	require.Error(t, err, "the relay needs the token")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// Codex itself answers only this boot's capability, which the relay
	// alone holds: loopback is every local user's (another computer's bot).
	_, resp, err = websocket.Dial(ctx, "ws://"+d.codex, nil)
	require.Error(t, err, "Codex's app-server takes a connection without its capability")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A browser-style client sends Origin; the relay strips it (Codex would 403).
	c, _, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent?token="+d.token, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://example.test"}}})
	require.NoError(t, err)
	defer c.CloseNow()
	c.SetReadLimit(1 << 24)
	res := initialize(ctx, t, c)
	require.NotEmpty(t, res)

	// Codex dies: the client sees a close, then can reconnect once it is back.
	require.NoError(t, syscall.Kill(pidListening(t, d.codex), syscall.SIGKILL))
	for err == nil {
		_, _, err = c.Read(ctx) // notifications may still be in flight
	}
	require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "got %v", err)

	// A client reconnects with backoff while the supervisor restarts Codex
	// (meanwhile the relay answers 503 with the error envelope).
	var c2 *websocket.Conn
	for {
		c2, resp, err = websocket.Dial(ctx, "ws://"+d.addr+"/agent?token="+d.token, nil)
		if err == nil {
			break
		}
		require.NotNil(t, resp, "dial: %v", err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		time.Sleep(100 * time.Millisecond)
	}
	defer c2.CloseNow()
	c2.SetReadLimit(1 << 24)
	require.NotEmpty(t, initialize(ctx, t, c2))
}

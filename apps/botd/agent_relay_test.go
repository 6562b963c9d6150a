package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
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
	res, errObj, err := tryInitialize(ctx, c, "relay-test")
	require.NoError(t, err)
	require.Nil(t, errObj)
	return res
}

// tryInitialize is initialize without assertions: the result, the error
// object of a refused initialize, or why there was no answer.
func tryInitialize(ctx context.Context, c *websocket.Conn, client string) (map[string]any, any, error) {
	req := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"` + client + `","version":"0"},"capabilities":{"experimentalApi":true}}}`
	if err := c.Write(ctx, websocket.MessageText, []byte(req)); err != nil {
		return nil, nil, err
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return nil, nil, err
		}
		var msg struct {
			ID     *int           `json:"id"`
			Result map[string]any `json:"result"`
			Error  any            `json:"error"`
		}
		if err := json.Unmarshal(b, &msg); err != nil {
			return nil, nil, err
		}
		if msg.ID != nil && *msg.ID == 1 {
			return msg.Result, msg.Error, nil
		}
	}
}

// dialAgent opens ws /agent (waiting out 503s while Codex cannot start).
func dialAgent(ctx context.Context, t *testing.T, d *daemon) *websocket.Conn {
	t.Helper()
	for {
		c, resp, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent?token="+d.token, nil)
		if err == nil {
			c.SetReadLimit(1 << 24)
			return c
		}
		require.NotNil(t, resp, "dial: %v", err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		time.Sleep(100 * time.Millisecond)
	}
}

// codexPids are the Codex app-servers running under botd.
func codexPids(d *daemon) []int {
	var pids []int
	for _, p := range descendants(d.cmd.Process.Pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if err == nil && strings.Contains(string(b), "\x00app-server\x00") {
			pids = append(pids, p)
		}
	}
	return pids
}

func TestAgentRelay(t *testing.T) {
	d := startDaemon(t, tempHome(t), "relay-token-0123456789")
	d.waitHealthy(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	_, resp, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent", nil)
	require.Error(t, err, "the relay needs the token")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A browser-style client sends Origin; the relay does not pass it on
	// (there is no HTTP to Codex any more) and the session works.
	c, _, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent?token="+d.token, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://example.test"}}})
	require.NoError(t, err)
	defer c.CloseNow()
	c.SetReadLimit(1 << 24)
	res := initialize(ctx, t, c)
	require.NotEmpty(t, res)
	require.Contains(t, res["userAgent"], "relay-test/", "the answer is Codex's (its userAgent names our client)")

	// Each connection has its own app-server: a second one initializes too
	// (an app-server refuses a second initialize on one session), and a
	// message with line breaks in it arrives as one line.
	c2 := dialAgent(ctx, t, d)
	defer c2.CloseNow()
	pretty := "{\n  \"id\": 1,\n  \"method\": \"initialize\",\n  \"params\": {\"clientInfo\": {\"name\": \"pretty\", \"version\": \"0\"}}\n}"
	require.NoError(t, c2.Write(ctx, websocket.MessageText, []byte(pretty)))
	for {
		_, b, err := c2.Read(ctx)
		require.NoError(t, err)
		var msg struct {
			ID     *int           `json:"id"`
			Result map[string]any `json:"result"`
		}
		require.NoError(t, json.Unmarshal(b, &msg))
		if msg.ID != nil {
			require.Contains(t, msg.Result["userAgent"], "pretty/", string(b))
			break
		}
	}
	pids := codexPids(d)
	require.Len(t, pids, 2, "one app-server per connection")

	// The client closes: its app-server is stopped.
	require.NoError(t, c2.Close(websocket.StatusNormalClosure, ""))
	deadline := time.Now().Add(30 * time.Second)
	for len(codexPids(d)) != 1 {
		require.True(t, time.Now().Before(deadline), "the closed session's Codex still runs: %v", codexPids(d))
		time.Sleep(50 * time.Millisecond)
	}

	// Codex dies: the client sees a close, then can reconnect to a new one.
	require.NoError(t, syscall.Kill(codexPids(d)[0], syscall.SIGKILL))
	for err == nil {
		_, _, err = c.Read(ctx) // notifications may still be in flight
	}
	require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "got %v", err)
	c3 := dialAgent(ctx, t, d)
	defer c3.CloseNow()
	require.NotEmpty(t, initialize(ctx, t, c3))
}

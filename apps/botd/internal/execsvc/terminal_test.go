package execsvc_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/execsvc"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// term is a test client of ws /terminal.
type term struct {
	t    *testing.T
	c    *websocket.Conn
	out  strings.Builder
	exit *int
}

func (fx *fixture) dial(t *testing.T, query string) *term {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	u := "ws" + strings.TrimPrefix(fx.url, "http") + "/terminal?token=" + token + query
	c, _, err := websocket.Dial(ctx, u, nil)
	require.NoError(t, err)
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &term{t: t, c: c}
}

func (tm *term) send(s string) {
	tm.t.Helper()
	require.NoError(tm.t, tm.c.Write(context.Background(), websocket.MessageBinary, []byte(s)))
}

func (tm *term) control(m execsvc.ControlMessage) {
	tm.t.Helper()
	b, _ := json.Marshal(m)
	require.NoError(tm.t, tm.c.Write(context.Background(), websocket.MessageText, b))
}

// expect reads output until re matches it and returns the submatches.
func (tm *term) expect(re string) []string {
	tm.t.Helper()
	rx := regexp.MustCompile(re)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if m := rx.FindStringSubmatch(tm.out.String()); m != nil {
			return m
		}
		typ, b, err := tm.c.Read(ctx)
		require.NoError(tm.t, err, "waiting for %q; got so far: %q", re, tm.out.String())
		if typ == websocket.MessageText {
			var m execsvc.ControlMessage
			require.NoError(tm.t, json.Unmarshal(b, &m))
			if m.Type == "exit" {
				tm.exit = m.ExitCode
			}
			continue
		}
		tm.out.Write(b)
	}
}

func TestTerminal(t *testing.T) {
	fx := newFixture(t, execsvc.Options{})
	tm := fx.dial(t, "&cwd=shared&cols=100&rows=30")
	tm.send("echo marker-$((40+2)) $(id -un) $(pwd)\n")
	m := tm.expect(`marker-42 (\S+) (\S+)`)
	assert.Equal(t, "bot", m[1])
	assert.Equal(t, fx.ws+"/shared", strings.TrimSpace(m[2]))

	tm.send("stty size\n")
	tm.expect(`30 100`)
	tm.control(execsvc.ControlMessage{Type: "resize", Cols: 120, Rows: 40})
	tm.control(execsvc.ControlMessage{Type: "input", Data: "stty size\n"})
	tm.expect(`40 120`)

	tm.send("exit 7\n")
	ctx := testenv.Context(t, 10*time.Second)
	for tm.exit == nil {
		typ, b, err := tm.c.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageText {
			var m execsvc.ControlMessage
			require.NoError(t, json.Unmarshal(b, &m))
			tm.exit = m.ExitCode
		}
	}
	require.NotNil(t, tm.exit, "exit message")
	assert.Equal(t, 7, *tm.exit)
	_, _, err := tm.c.Read(ctx)
	assert.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err))
}

func TestTerminalCloseEndsShellAndJobs(t *testing.T) {
	fx := newFixture(t, execsvc.Options{})
	before := runtime.NumGoroutine()
	tm := fx.dial(t, "")
	// A background job (its own process group under job control), a nohup'd
	// one, and the shell itself.
	tm.send("sleep 1000 & echo bg=$!; nohup sleep 1001 >/dev/null 2>&1 & echo nh=$!; echo sh=$$\n")
	m := tm.expect(`(?s)bg=(\d+)\s+.*nh=(\d+)\s+.*sh=(\d+)`)
	var pids []int
	for _, s := range m[1:] {
		pid, err := strconv.Atoi(s)
		require.NoError(t, err)
		require.True(t, pidAlive(pid))
		pids = append(pids, pid)
	}
	tm.c.Close(websocket.StatusNormalClosure, "bye")
	for _, pid := range pids {
		require.Eventually(t, func() bool { return !pidAlive(pid) }, 5*time.Second, 20*time.Millisecond, "pid %d survived the socket", pid)
	}
	// The terminal's goroutines (pumps, waiter, handler) are gone too.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+1 }, 5*time.Second, 20*time.Millisecond,
		"goroutines: before %d, now %d", before, runtime.NumGoroutine())
}

func TestTerminalRefusals(t *testing.T) {
	fx := newFixture(t, execsvc.Options{})
	get := func(q string, auth bool) int {
		req, _ := http.NewRequest("GET", fx.url+"/terminal?"+q, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := fx.client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, 401, get("", false))
	assert.Equal(t, 401, get("token=wrong-token-000000", false))
	assert.Equal(t, 403, get("cwd=..", true))
	assert.Equal(t, 403, get("cwd=abs-out", true))
	assert.Equal(t, 400, get("cwd=%00", true))
	assert.Equal(t, 400, get("cols=0", true))
	assert.Equal(t, 404, get("cwd=missing", true))
}

// A program that never reads its input, in raw mode, while the client
// pastes megabytes: closing the socket still ends everything.
func TestTerminalUnreadInputThenClose(t *testing.T) {
	fx := newFixture(t, execsvc.Options{})
	before := runtime.NumGoroutine()
	tm := fx.dial(t, "")
	tm.send("stty raw -echo; sleep 1000 & echo pid=$!; wait\n")
	m := tm.expect(`pid=(\d+)`)
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	chunk := strings.Repeat("x", 16<<10)
	ctx := testenv.Context(t, 10*time.Second)
	for i := 0; i < 128; i++ {
		if tm.c.Write(ctx, websocket.MessageBinary, []byte(chunk)) != nil {
			break
		}
	}
	tm.c.Close(websocket.StatusNormalClosure, "bye")
	require.Eventually(t, func() bool { return !pidAlive(pid) }, 5*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+1 }, 5*time.Second, 20*time.Millisecond,
		"goroutines: before %d, now %d", before, runtime.NumGoroutine())
}

package codexrpc

// NewStream: JSON-RPC as newline-delimited JSON (Codex app-server's stdio).
// A loopback TCP peer stands in for the app-server's stdin and stdout.

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stdioPeer accepts one connection and runs serve on it.
func stdioPeer(t *testing.T, serve func(c net.Conn)) net.Conn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	return c
}

func TestStreamCallAndNotify(t *testing.T) {
	c := stdioPeer(t, func(c net.Conn) {
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			var m message
			if json.Unmarshal(sc.Bytes(), &m) != nil || len(m.ID) == 0 {
				continue
			}
			// A notification, a blank line, then the answer.
			_, _ = c.Write([]byte(`{"method":"note","params":{"n":1}}` + "\n\n"))
			_, _ = c.Write([]byte(`{"id":` + string(m.ID) + `,"result":{"echo":` + string(m.Params) + `}}` + "\n"))
		}
	})
	h := &countingHandler{block: make(chan struct{})}
	conn := NewStream(c, h)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out struct {
		Echo map[string]int `json:"echo"`
	}
	require.NoError(t, conn.Call(ctx, "ping", map[string]int{"x": 7}, &out))
	require.Equal(t, map[string]int{"x": 7}, out.Echo)
	require.Eventually(t, func() bool { return h.notes.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
}

func TestStreamLineOverCap(t *testing.T) {
	c := stdioPeer(t, func(c net.Conn) {
		_, _ = c.Write([]byte(`{"method":"x","params":"` + strings.Repeat("a", MaxMessage+10) + `"}` + "\n"))
		_, _ = c.Read(make([]byte, 1))
	})
	h := &countingHandler{block: make(chan struct{})}
	conn := NewStream(c, h)
	defer conn.Close()
	select {
	case <-conn.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the connection stayed open")
	}
	_, ok := AsLimit(conn.Err())
	require.True(t, ok, "a limit error: %v", conn.Err())
	require.Zero(t, h.notes.Load(), "nothing oversized reached the handler")
}

package httpx

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Past the cap a connection reads a 503 and is closed; closing a held one
// frees its slot.
func TestLimitListenerRefusesPastTheCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lim := LimitListener(ln, 2, true)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(lim) }()
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		held = append(held, c)
	}
	// Which of the three is refused depends on accept order: read them all.
	extra, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer extra.Close()
	all := append(held, extra)
	refused := -1
	deadline := time.Now().Add(30 * time.Second)
	for refused < 0 {
		require.True(t, time.Now().Before(deadline), "no connection was refused past the cap")
		for i, c := range all {
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			b := make([]byte, 12)
			if n, _ := io.ReadFull(c, b); n > 0 {
				require.Equal(t, "HTTP/1.1 503", string(b[:n]))
				refused = i
			}
		}
	}
	// A slot is free again once a held connection closes.
	for i, c := range all {
		if i != refused {
			c.Close()
			break
		}
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "ok"
	}, 10*time.Second, 20*time.Millisecond)
}

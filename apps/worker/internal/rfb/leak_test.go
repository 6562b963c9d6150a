package rfb

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestNoGoroutinesAfterClose: Close on a Client and on a Stream (live, and
// one waiting in backoff) leaves none of this package's goroutines. Not
// parallel, so other tests' sessions are not running.
func TestNoGoroutinesAfterClose(t *testing.T) {
	for i := 0; i < 3; i++ {
		c, err := dialHostile(t, serveHostile(t, 64, 64, false, hold(t)), Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	addr := serveHostile(t, 64, 64, false, hold(t))
	live := Hold(func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}, Options{}, testLogger(t))
	waitFor(t, 5*time.Second, "stream live", func() (bool, string) {
		st, e := live.State()
		return st == StateLive, st + " " + e
	})
	backoff := Hold(func(ctx context.Context) (net.Conn, error) {
		return nil, context.DeadlineExceeded
	}, Options{}, testLogger(t))
	time.Sleep(100 * time.Millisecond)
	live.Close()
	backoff.Close()
	waitFor(t, 2*time.Second, "no rfb goroutines", func() (bool, string) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "internal/rfb.(*Client).run") || strings.Contains(g, "internal/rfb.(*Stream).run") {
				return false, g
			}
		}
		return true, ""
	})
}

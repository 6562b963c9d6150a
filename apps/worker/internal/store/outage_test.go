package store

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cutProxy forwards one loopback port to Postgres and can cut every
// connection and refuse new ones, like a database going away.
type cutProxy struct {
	ln     net.Listener
	target string
	// mu guards conns.
	mu    sync.Mutex
	conns []net.Conn
}

func startCutProxy(t *testing.T, target string, addr string) *cutProxy {
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestPostgresGoesAway: while the database is unreachable every call is
// ErrUnavailable (the API's 503); once it is back the same store works again
// without a restart, and nothing written before was lost.
func TestPostgresGoesAway(t *testing.T) {
	dsn := testDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	target := u.Host
	p := startCutProxy(t, target, "127.0.0.1:0")
	addr := p.ln.Addr().String()
	u.Host = addr
	s := openTestPostgres(t, u.String())
	ctx := t.Context()
	require.NoError(t, s.CreateComputer(ctx, computer("c1")))

	p.cut()
	_, err = s.GetComputer(ctx, "c1")
	require.ErrorIs(t, err, ErrUnavailable, "%v", err)
	_, err = s.AcquireLease(ctx, "k", "h", time.Minute)
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotContains(t, err.Error(), "passfile", "errors never carry the DSN")

	p = startCutProxy(t, target, addr)
	defer p.cut()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = s.GetComputer(ctx, "c1")
		if err == nil {
			break
		}
		require.ErrorIs(t, err, ErrUnavailable)
		require.True(t, time.Now().Before(deadline), "store did not recover: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	_, err = s.AcquireLease(ctx, "k", "h", time.Minute)
	require.NoError(t, err)
}

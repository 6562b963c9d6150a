// Package storetest is for tests only: a loopback TCP proxy in front of the
// test Postgres that a test can cut, to see the store and the API through an
// outage and back.
package storetest

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// CutProxy forwards one loopback port to target until Cut.
type CutProxy struct {
	ln net.Listener
	// mu guards conns.
	mu    sync.Mutex
	conns []net.Conn
}

// StartCutProxy listens on addr ("127.0.0.1:0" for any port) and forwards
// every connection to target; the test's end cuts it.
func StartCutProxy(t testing.TB, addr, target string) *CutProxy {
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	p := &CutProxy{ln: ln}
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
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's listening address.
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// Cut stops listening and drops every forwarded connection.
func (p *CutProxy) Cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

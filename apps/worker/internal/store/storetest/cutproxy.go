// Package storetest is for tests only: a loopback TCP proxy that a test can
// cut, to see a client through an outage and back (the store and the API
// in front of the test Postgres, the kubernetes provider in front of the
// test cluster's API server).
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
	// mu guards conns, held and holding.
	mu    sync.Mutex
	conns []net.Conn
	// held: new connections are accepted and never answered (holding),
	// as on a route that was lost, until Mend.
	held    bool
	holding []net.Conn
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
			p.mu.Lock()
			if p.held {
				p.holding = append(p.holding, c)
				p.mu.Unlock()
				continue
			}
			p.mu.Unlock()
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
	p.Mend()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked()
}

// Hold drops every forwarded connection and, until Mend, accepts new ones
// and never answers them: a lost route, not a refusal.
func (p *CutProxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
	p.dropLocked()
}

// Mend ends Hold: the connections it held are closed, new ones forwarded.
func (p *CutProxy) Mend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	for _, c := range p.holding {
		c.Close()
	}
	p.holding = nil
}

func (p *CutProxy) dropLocked() {
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

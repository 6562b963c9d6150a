package httpx

import (
	"net"
	"sync"
	"time"
)

// DefaultMaxConns is the default cap on one listener's open connections
// (BOTD_MAX_CONNS).
const DefaultMaxConns = 512

// Server timeouts every botd HTTP listener uses (THREAT-MODEL rule 6):
// headers must arrive within ReadHeaderTimeout, an idle keep-alive
// connection is closed after IdleTimeout, and MaxHeaderBytes bounds them.
const (
	ReadHeaderTimeout = 10 * time.Second
	IdleTimeout       = 2 * time.Minute
	MaxHeaderBytes    = 64 << 10
	// BodyTimeout bounds reading one JSON request body (DecodeJSON).
	BodyTimeout = 20 * time.Second
)

// overCap is what a connection past the cap reads before it is closed.
const overCap = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 32\r\nRetry-After: 1\r\n\r\ntoo many connections, try again\n"

// LimitListener caps ln's open connections at max (DefaultMaxConns when
// max <= 0). A connection accepted past the cap is answered with a 503
// (when http) and closed at once, so a client holding many idle
// connections cannot starve the others for longer than the server's own
// timeouts keep its connections open.
func LimitListener(ln net.Listener, max int, http bool) net.Listener {
	if max <= 0 {
		max = DefaultMaxConns
	}
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), http: http}
}

type limitListener struct {
	net.Listener
	slots chan struct{}
	http  bool
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			go refuse(c, l.http)
		}
	}
}

// refuse answers an over-cap connection without blocking the accept loop.
func refuse(c net.Conn, http bool) {
	if http {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte(overCap))
	}
	_ = c.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

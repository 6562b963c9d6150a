package egressagent

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// The agent is the websocket client, so every frame it sends is masked
// (RFC 6455 5.3). coder/websocket masks through its 4 KiB write buffer and
// flushes each full buffer: a 256 KiB yamux frame would leave as 64 write
// syscalls, 64 small TCP sends that each wake botd's reader. That made
// downloads through the tunnel (target → agent → botd → browser, the way
// most browsing bytes flow) half as fast as uploads.
//
// frameBatcher sits under the websocket on the agent's connection and
// gathers those writes until the frame they belong to is complete (or
// batchMax bytes are waiting), then sends them with one write. It parses
// only frame headers to find where each frame ends, so it never holds a
// frame's tail: everything written is on the wire once the frame is.

// batchMax bounds what a batcher holds before it writes, frame end or not.
const batchMax = 256 * 1024

// frameBatcher is a net.Conn whose writes, once armed, are websocket frames
// gathered per frame. Before arm (the HTTP handshake, or a connection that
// carries TLS records rather than frames) it passes writes through.
type frameBatcher struct {
	net.Conn

	// writes counts the writes made to the connection once armed.
	writes atomic.Int64

	mu    sync.Mutex // guards everything below
	armed bool
	buf   []byte
	// hdr collects a frame header until it is whole; need is how many
	// header bytes the frame has (2 until the second byte is known).
	hdr  [14]byte
	nhdr int
	need int
	// left is how many payload bytes of the current frame are still to come.
	left uint64
}

func newFrameBatcher(c net.Conn) *frameBatcher { return &frameBatcher{Conn: c, need: 2} }

// arm starts batching: from now on the bytes written are websocket frames
// in the clear, starting at a frame boundary.
func (b *frameBatcher) arm() {
	b.mu.Lock()
	b.armed = true
	b.mu.Unlock()
}

func (b *frameBatcher) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.armed {
		return b.Conn.Write(p)
	}
	n := len(p)
	for len(p) > 0 {
		take := b.advance(p)
		b.buf = append(b.buf, p[:take]...)
		p = p[take:]
		if b.atBoundary() || len(b.buf) >= batchMax {
			if err := b.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// advance feeds the frame parser from the start of p and returns how many
// bytes of p it consumed: at most up to the next frame boundary, so the
// caller can flush exactly there.
func (b *frameBatcher) advance(p []byte) int {
	used := 0
	for used < len(p) {
		if b.left > 0 {
			k := uint64(len(p) - used)
			if k > b.left {
				k = b.left
			}
			b.left -= k
			used += int(k)
			if b.left == 0 {
				return used // the frame ends here
			}
			continue
		}
		// In a header.
		b.hdr[b.nhdr] = p[used]
		b.nhdr++
		used++
		if b.nhdr == 2 {
			b.need = 2
			if b.hdr[1]&0x80 != 0 {
				b.need += 4 // masking key
			}
			switch b.hdr[1] & 0x7f {
			case 126:
				b.need += 2
			case 127:
				b.need += 8
			}
		}
		if b.nhdr < 2 || b.nhdr < b.need {
			continue
		}
		// The header is whole: how long is the payload?
		switch l := b.hdr[1] & 0x7f; l {
		case 126:
			b.left = uint64(binary.BigEndian.Uint16(b.hdr[2:4]))
		case 127:
			b.left = binary.BigEndian.Uint64(b.hdr[2:10])
		default:
			b.left = uint64(l)
		}
		b.nhdr, b.need = 0, 2
		if b.left == 0 {
			return used // an empty frame ends with its header
		}
	}
	return used
}

// atBoundary reports whether the bytes gathered end where a frame ends.
func (b *frameBatcher) atBoundary() bool { return b.left == 0 && b.nhdr == 0 }

func (b *frameBatcher) flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	b.writes.Add(1)
	_, err := b.Conn.Write(b.buf)
	if cap(b.buf) > 2*batchMax {
		b.buf = nil
	} else {
		b.buf = b.buf[:0]
	}
	return err
}

// batchSlot is where the dial functions leave the batcher they made for
// one handshake, and whether its bytes will be frames in the clear.
type batchSlot struct {
	mu    sync.Mutex
	b     *frameBatcher
	clear bool
}

type batchSlotKey struct{}

// armedHook, when set (tests), sees every batcher that is armed.
var armedHook func(*frameBatcher)

// armAfterHandshake arms the batcher of the handshake made with ctx, if
// the connection carries frames in the clear (a ws:// URL, or wss:// over
// a TLS connection of our own making, not one tunnelled through a proxy).
func armAfterHandshake(ctx context.Context) {
	s, _ := ctx.Value(batchSlotKey{}).(*batchSlot)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b != nil && s.clear {
		s.b.arm()
		if armedHook != nil {
			armedHook(s.b)
		}
	}
}

func withBatchSlot(ctx context.Context) context.Context {
	return context.WithValue(ctx, batchSlotKey{}, &batchSlot{})
}

func leaveInSlot(ctx context.Context, b *frameBatcher, clear bool) {
	if s, _ := ctx.Value(batchSlotKey{}).(*batchSlot); s != nil {
		s.mu.Lock()
		s.b, s.clear = b, clear
		s.mu.Unlock()
	}
}

// batchingClient returns a copy of c whose connections are frameBatchers.
// A client whose transport is not an *http.Transport is returned as is
// (no batching, nothing else changes).
func batchingClient(c *http.Client, wsURL string) *http.Client {
	var t *http.Transport
	switch tr := c.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = tr.Clone()
	default:
		return c
	}
	u, err := url.Parse(wsURL)
	if err != nil {
		return c
	}
	secure := u.Scheme == "wss" || u.Scheme == "https"
	// Through a proxy the bytes under the websocket may be a TLS session
	// with the proxy rather than frames: no batching there.
	if t.Proxy != nil {
		pu := *u
		pu.Scheme = "http"
		if secure {
			pu.Scheme = "https"
		}
		if p, err := t.Proxy(&http.Request{URL: &pu, Header: http.Header{}}); err != nil || p != nil {
			return c
		}
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		b := newFrameBatcher(conn)
		// In the clear only for ws://: over wss:// this connection carries
		// TLS records (a proxy's CONNECT tunnel), never frames.
		leaveInSlot(ctx, b, !secure)
		return b, nil
	}
	if secure && t.DialTLSContext == nil {
		tlsDial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cfg := &tls.Config{}
			if t.TLSClientConfig != nil {
				cfg = t.TLSClientConfig.Clone()
			}
			if cfg.ServerName == "" {
				host, _, _ := net.SplitHostPort(addr)
				cfg.ServerName = host
			}
			cfg.NextProtos = []string{"http/1.1"} // a websocket handshake is HTTP/1.1
			tc := tls.Client(raw, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = raw.Close()
				return nil, err
			}
			b := newFrameBatcher(tc)
			leaveInSlot(ctx, b, true)
			return b, nil
		}
		t.DialTLSContext = tlsDial
	}
	t.ForceAttemptHTTP2 = false
	cc := *c
	cc.Transport = t
	return &cc
}

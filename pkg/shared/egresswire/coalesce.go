package egresswire

import (
	"encoding/binary"
	"net"
	"sync"
)

// yamux frames (github.com/hashicorp/yamux, spec.md): a 12-byte header
// (version, type, flags, stream id, length) and, for a data frame, length
// bytes of body. yamux's send loop writes the header and the body with two
// Write calls.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// CoalesceFrames wraps the connection a yamux session writes to so that a
// data frame's header and its body go out in one Write: over a websocket
// each Write is a message of its own, so this halves the messages, frame
// headers and flushes of a bulk transfer. Every other write (window
// updates, pings, data frames without a body) passes through at once; a
// held header is always followed by its body, yamux's next write.
func CoalesceFrames(c net.Conn) net.Conn { return &coalescer{Conn: c} }

type coalescer struct {
	net.Conn

	// mu guards hdr, held and buf (yamux has one writer; this is for safety).
	mu   sync.Mutex
	hdr  [yamuxHeaderSize]byte
	held bool
	buf  []byte
}

func (c *coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held && len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0 {
		copy(c.hdr[:], p)
		c.held = true
		return len(p), nil
	}
	if !c.held {
		return c.Conn.Write(p)
	}
	c.held = false
	c.buf = append(append(c.buf[:0], c.hdr[:]...), p...)
	if _, err := c.Conn.Write(c.buf); err != nil {
		return 0, err
	}
	if cap(c.buf) > 4<<20 {
		c.buf = nil // do not pin one outsized frame's buffer
	}
	return len(p), nil
}

package rfb

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// serveHostile runs a VNC server written in the test: it does an RFB 3.8
// handshake (security None) announcing a w×h framebuffer, then runs script
// on the connection. It is the attacker; the Client is the code under test.
// Unless stall is set, what the client writes is read and dropped.
func serveHostile(t *testing.T, w, h int, stall bool, script func(conn net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if stall {
			conn.(*net.TCPConn).SetReadBuffer(4096)
		}
		br := bufio.NewReader(conn)
		buf := make([]byte, 12)
		conn.Write([]byte("RFB 003.008\n"))
		if _, err := io.ReadFull(br, buf[:12]); err != nil {
			return
		}
		conn.Write([]byte{1, securityNone})
		if _, err := io.ReadFull(br, buf[:1]); err != nil {
			return
		}
		conn.Write([]byte{0, 0, 0, 0})
		if _, err := io.ReadFull(br, buf[:1]); err != nil { // ClientInit
			return
		}
		init := binary.BigEndian.AppendUint16(nil, uint16(w))
		init = binary.BigEndian.AppendUint16(init, uint16(h))
		init = append(init, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0)
		init = append(init, 0, 0, 0, 4, 'e', 'v', 'i', 'l')
		conn.Write(init)
		// SetPixelFormat and SetEncodings' header come first, in one write.
		if _, err := io.ReadFull(br, buf[:12]); err != nil {
			return
		}
		if !stall {
			go io.Copy(io.Discard, br)
		}
		script(conn)
	}()
	return ln.Addr().String()
}

// dialHostile connects a Client to a hostile server.
func dialHostile(t *testing.T, addr string, o Options) (*Client, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := Handshake(ctx, conn, o)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// update builds a FramebufferUpdate header with one rectangle.
func update(x, y, w, h int, enc int32) []byte {
	b := []byte{0, 0, 0, 1}
	for _, v := range []int{x, y, w, h} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	return binary.BigEndian.AppendUint32(b, uint32(enc))
}

// hold keeps the connection open until the test ends, so an error the
// client reports is its own finding, not an EOF.
func hold(t *testing.T) func(net.Conn) {
	return func(net.Conn) { <-t.Context().Done() }
}

// waitErr waits for the session to end and returns why.
func waitErr(t *testing.T, c *Client) error {
	t.Helper()
	select {
	case <-c.Done():
		return c.Err()
	case <-time.After(10 * time.Second):
		t.Fatal("session still live after 10 s")
		return nil
	}
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

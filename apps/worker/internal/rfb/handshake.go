package rfb

import (
	"bufio"
	"context"
	"crypto/des"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Security types (RFC 6143 section 7.2).
const (
	securityNone    = 1
	securityVNCAuth = 2
)

// maxReason bounds a server's failure reason string.
const maxReason = 4096

// Handshake runs the RFB handshake on conn (ProtocolVersion, security,
// ClientInit with shared=1, ServerInit), sets a 32 bpp true-colour pixel
// format and the encodings, asks for the whole screen and starts the read
// loop. ctx bounds the handshake only. conn belongs to the Client from then
// on; on error it is closed.
func Handshake(ctx context.Context, conn net.Conn, o Options) (*Client, error) {
	o = o.withDefaults()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	c, err := handshake(conn, o)
	if !stop() {
		conn.Close()
		return nil, fmt.Errorf("rfb handshake: %w", context.Cause(ctx))
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rfb handshake: %w", err)
	}
	conn.SetDeadline(time.Time{})
	if err := c.writeInit(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rfb handshake: %w", err)
	}
	go c.run()
	return c, nil
}

func handshake(conn net.Conn, o Options) (*Client, error) {
	br := bufio.NewReaderSize(conn, 64<<10)
	var ver [12]byte
	if _, err := io.ReadFull(br, ver[:]); err != nil {
		return nil, fmt.Errorf("read version: %w", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(ver[:]), "RFB %03d.%03d\n", &major, &minor); err != nil || major != 3 {
		return nil, fmt.Errorf("not an RFB 3.x server (%q)", ver[:])
	}
	switch {
	case minor >= 8:
		minor = 8
	case minor == 7:
	default:
		minor = 3
	}
	if _, err := fmt.Fprintf(conn, "RFB 003.%03d\n", minor); err != nil {
		return nil, fmt.Errorf("write version: %w", err)
	}

	var sec uint32
	if minor == 3 {
		if err := binary.Read(br, binary.BigEndian, &sec); err != nil {
			return nil, fmt.Errorf("read security: %w", err)
		}
		if sec == 0 {
			return nil, readReason(br, "server refused")
		}
	} else {
		n, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("read security types: %w", err)
		}
		if n == 0 {
			return nil, readReason(br, "server refused")
		}
		types := make([]byte, n)
		if _, err := io.ReadFull(br, types); err != nil {
			return nil, fmt.Errorf("read security types: %w", err)
		}
		sec, err = chooseSecurity(types, o.Password)
		if err != nil {
			return nil, err
		}
		if _, err := conn.Write([]byte{byte(sec)}); err != nil {
			return nil, fmt.Errorf("write security: %w", err)
		}
	}
	switch sec {
	case securityNone:
	case securityVNCAuth:
		if o.Password == "" {
			return nil, errors.New("server asks for a password and none is set")
		}
		var challenge [16]byte
		if _, err := io.ReadFull(br, challenge[:]); err != nil {
			return nil, fmt.Errorf("read challenge: %w", err)
		}
		if _, err := conn.Write(vncAuthResponse(o.Password, challenge)); err != nil {
			return nil, fmt.Errorf("write auth: %w", err)
		}
	default:
		return nil, fmt.Errorf("unsupported security type %d", sec)
	}
	if minor == 8 || sec == securityVNCAuth {
		var result uint32
		if err := binary.Read(br, binary.BigEndian, &result); err != nil {
			return nil, fmt.Errorf("read security result: %w", err)
		}
		if result != 0 {
			if minor == 8 {
				return nil, readReason(br, "authentication failed")
			}
			return nil, errors.New("authentication failed")
		}
	}

	if _, err := conn.Write([]byte{1}); err != nil { // ClientInit, shared
		return nil, fmt.Errorf("write client init: %w", err)
	}
	var init [24]byte
	if _, err := io.ReadFull(br, init[:]); err != nil {
		return nil, fmt.Errorf("read server init: %w", err)
	}
	w := int(binary.BigEndian.Uint16(init[0:]))
	h := int(binary.BigEndian.Uint16(init[2:]))
	if err := checkSize(w, h, o); err != nil {
		return nil, err
	}
	nameLen := binary.BigEndian.Uint32(init[20:])
	if nameLen > maxReason {
		return nil, fmt.Errorf("desktop name of %d bytes over the %d byte limit", nameLen, maxReason)
	}
	if _, err := br.Discard(int(nameLen)); err != nil {
		return nil, fmt.Errorf("read desktop name: %w", err)
	}
	return newClient(conn, br, o, w, h), nil
}

func checkSize(w, h int, o Options) error {
	if w > o.MaxWidth || h > o.MaxHeight {
		return fmt.Errorf("framebuffer %dx%d over the %dx%d limit", w, h, o.MaxWidth, o.MaxHeight)
	}
	return nil
}

// chooseSecurity prefers VNC authentication when a password is set, so a
// server offering both never gets an unauthenticated session by accident.
func chooseSecurity(types []byte, password string) (uint32, error) {
	has := func(t byte) bool {
		for _, x := range types {
			if x == t {
				return true
			}
		}
		return false
	}
	switch {
	case password != "" && has(securityVNCAuth):
		return securityVNCAuth, nil
	case has(securityNone):
		return securityNone, nil
	case has(securityVNCAuth):
		return 0, errors.New("server asks for a password and none is set")
	}
	return 0, fmt.Errorf("no supported security type in %v", types)
}

// vncAuthResponse encrypts the challenge with DES keyed by the password,
// each key byte bit-reversed as VNC servers expect.
func vncAuthResponse(password string, challenge [16]byte) []byte {
	var key [8]byte
	copy(key[:], password)
	for i, b := range key {
		var r byte
		for j := 0; j < 8; j++ {
			r = r<<1 | (b>>j)&1
		}
		key[i] = r
	}
	block, _ := des.NewCipher(key[:]) // an 8-byte key never fails
	out := make([]byte, 16)
	block.Encrypt(out[:8], challenge[:8])
	block.Encrypt(out[8:], challenge[8:])
	return out
}

func readReason(r io.Reader, what string) error {
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return errors.New(what)
	}
	if n > maxReason {
		n = maxReason
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return errors.New(what)
	}
	return fmt.Errorf("%s: %q", what, b)
}

// writeInit sends SetPixelFormat (32 bpp, depth 24, little-endian, true
// colour, red at bit 16, green 8, blue 0), SetEncodings and a request for
// the whole screen, in one write, before the read loop starts: from then on
// a server's fault is the session's Err, not the handshake's.
func (c *Client) writeInit() error {
	msg := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	msg = append(msg, 2, 0, 0, 0)
	binary.BigEndian.PutUint16(msg[len(msg)-2:], uint16(len(c.o.Encodings)))
	for _, e := range c.o.Encodings {
		msg = binary.BigEndian.AppendUint32(msg, uint32(e))
	}
	w, h := c.fb.Rect.Dx(), c.fb.Rect.Dy()
	msg = append(msg, 3, 0, 0, 0, 0, 0, byte(w>>8), byte(w), byte(h>>8), byte(h))
	if err := c.write(msg); err != nil {
		return err
	}
	c.written++
	return nil
}

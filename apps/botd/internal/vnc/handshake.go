package vnc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// handshakeTimeout bounds each side's RFB handshake.
const handshakeTimeout = 10 * time.Second

// maxServerName caps the desktop name in x11vnc's ServerInit.
const maxServerName = 4096

// vncHandshake is botd's own client handshake with x11vnc (3.8, security
// None, always shared). It returns the ServerInit to hand the viewer. botd
// does the handshakes on both sides, so x11vnc only ever sees a correct
// one: a viewer's garbage never reaches it, and a viewer that leaves
// mid-handshake is nothing x11vnc hears about.
func vncHandshake(c net.Conn) ([]byte, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	ver := make([]byte, 12)
	if _, err := io.ReadFull(c, ver); err != nil {
		return nil, fmt.Errorf("x11vnc version: %w", err)
	}
	if !bytes.HasPrefix(ver, []byte("RFB 003.")) {
		return nil, errors.New("x11vnc does not speak RFB 3.x")
	}
	if _, err := c.Write([]byte("RFB 003.008\n")); err != nil {
		return nil, err
	}
	n := make([]byte, 1)
	if _, err := io.ReadFull(c, n); err != nil {
		return nil, err
	}
	if n[0] == 0 {
		return nil, errors.New("x11vnc refused the connection")
	}
	types := make([]byte, n[0])
	if _, err := io.ReadFull(c, types); err != nil {
		return nil, err
	}
	if !bytes.Contains(types, []byte{1}) {
		return nil, errors.New("x11vnc wants a password (security None not offered)")
	}
	if _, err := c.Write([]byte{1}); err != nil {
		return nil, err
	}
	res := make([]byte, 4)
	if _, err := io.ReadFull(c, res); err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint32(res) != 0 {
		return nil, errors.New("x11vnc security handshake failed")
	}
	if _, err := c.Write([]byte{1}); err != nil { // shared
		return nil, err
	}
	si := make([]byte, 24)
	if _, err := io.ReadFull(c, si); err != nil {
		return nil, err
	}
	nameLen := binary.BigEndian.Uint32(si[20:24])
	if nameLen > maxServerName {
		return nil, errors.New("x11vnc ServerInit too long")
	}
	name := make([]byte, nameLen)
	if _, err := io.ReadFull(c, name); err != nil {
		return nil, err
	}
	return append(si, name...), nil
}

// greet is the server side of the handshake with the viewer: RFB 3.8 (a
// 3.3 or 3.7 viewer is answered in its version), security None, then the
// ServerInit x11vnc gave botd. The viewer's ClientInit is read and
// ignored (x11vnc was already asked for a shared session).
func greet(w io.Writer, cs *clientStream, serverInit []byte) error {
	if _, err := w.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	ver, _, err := cs.next()
	if err != nil {
		return err
	}
	switch minor := ver[10]; minor {
	case '3':
		if _, err := w.Write([]byte{0, 0, 0, 1}); err != nil { // None, chosen by the server
			return err
		}
	default:
		if _, err := w.Write([]byte{1, 1}); err != nil { // one type: None
			return err
		}
		if _, _, err := cs.next(); err != nil {
			return err
		}
		if minor == '8' {
			if _, err := w.Write([]byte{0, 0, 0, 0}); err != nil { // SecurityResult OK
				return err
			}
		}
	}
	if _, _, err := cs.next(); err != nil { // ClientInit
		return err
	}
	_, err = w.Write(serverInit)
	return err
}

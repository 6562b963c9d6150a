package vnc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// class is what the relay does with one unit of the client-to-server RFB
// stream.
type class int

const (
	// pass goes to x11vnc in every mode: the handshake, SetPixelFormat,
	// SetEncodings and FramebufferUpdateRequest (they only shape what this
	// one client receives).
	pass class = iota
	// input is key, pointer and clipboard: it reaches x11vnc only from a
	// control connection whose holder has the screen's user lease.
	input
	// drop never reaches x11vnc: anything that would resize or reconfigure
	// the shared desktop (SetDesktopSize, xvp power actions, gii devices)
	// and extensions x11vnc never advertised.
	drop
)

// Limits on what a client may send; beyond them it is a protocol error.
const (
	maxEncodings = 1024
	maxCutText   = 1 << 20
	maxFence     = 64
	maxGII       = 4096
	maxScreens   = 16
)

// errProtocol is a client that does not speak RFB the way our x11vnc
// expects; its connection is closed and nothing more of it is forwarded.
var errProtocol = errors.New("invalid RFB from client")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// RFB client-to-server message types (RFC 6143 §7.5 and the registered
// extensions).
const (
	msgSetPixelFormat     = 0
	msgSetEncodings       = 2
	msgFBUpdateRequest    = 3
	msgKeyEvent           = 4
	msgPointerEvent       = 5
	msgClientCutText      = 6
	msgEnableContinuousUp = 150
	msgClientFence        = 248
	msgXVP                = 250
	msgSetDesktopSize     = 251
	msgGII                = 253
	msgQEMU               = 255
)

type rfbState int

const (
	stVersion rfbState = iota
	stSecurity
	stClientInit
	stMessages
)

// clientStream splits what an RFB client sends into whole units (a
// handshake step or one message), so every unit can be passed, held back
// or refused without ever cutting a message in two. It accepts exactly
// what x11vnc -nopw offers: protocol 3.3, 3.7 or 3.8 and security type
// None.
type clientStream struct {
	r     *bufio.Reader
	state rfbState
	buf   []byte
}

func newClientStream(r io.Reader) *clientStream {
	return &clientStream{r: bufio.NewReaderSize(r, 32<<10)}
}

// buffered reports whether more client bytes are already read (the relay
// flushes x11vnc's side only when none are).
func (c *clientStream) buffered() int { return c.r.Buffered() }

// read fills the first n bytes of the scratch buffer.
func (c *clientStream) read(n int) ([]byte, error) {
	if cap(c.buf) < n {
		c.buf = make([]byte, n, max(n, 2*cap(c.buf)))
	}
	c.buf = c.buf[:n]
	if _, err := io.ReadFull(c.r, c.buf); err != nil {
		return nil, err
	}
	return c.buf, nil
}

// more appends n more bytes to the unit read so far.
func (c *clientStream) more(n int) ([]byte, error) {
	have := len(c.buf)
	if cap(c.buf) < have+n {
		nb := make([]byte, have, have+n)
		copy(nb, c.buf)
		c.buf = nb
	}
	c.buf = c.buf[:have+n]
	if _, err := io.ReadFull(c.r, c.buf[have:]); err != nil {
		return nil, eofIsUnexpected(err)
	}
	return c.buf, nil
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// next returns the next unit and its class. The slice is valid until the
// following call. io.EOF means the client ended cleanly between units.
func (c *clientStream) next() ([]byte, class, error) {
	switch c.state {
	case stVersion:
		b, err := c.read(12)
		if err != nil {
			return nil, 0, eofIsUnexpected(err)
		}
		switch string(b) {
		case "RFB 003.007\n", "RFB 003.008\n":
			c.state = stSecurity
		case "RFB 003.003\n":
			c.state = stClientInit // the server picks the type; None sends nothing
		default:
			return nil, 0, protoErr("unsupported protocol version")
		}
		return b, pass, nil
	case stSecurity:
		b, err := c.read(1)
		if err != nil {
			return nil, 0, eofIsUnexpected(err)
		}
		if b[0] != 1 {
			return nil, 0, protoErr("security type %d (only None is offered)", b[0])
		}
		c.state = stClientInit
		return b, pass, nil
	case stClientInit:
		b, err := c.read(1)
		if err != nil {
			return nil, 0, eofIsUnexpected(err)
		}
		// Always shared: a client asking for exclusive access would make
		// x11vnc drop every other viewer.
		b[0] = 1
		c.state = stMessages
		return b, pass, nil
	}
	return c.message()
}

// message reads one client message whole.
func (c *clientStream) message() ([]byte, class, error) {
	b, err := c.read(1)
	if err != nil {
		return nil, 0, err // EOF here is a clean end
	}
	switch t := b[0]; t {
	case msgSetPixelFormat:
		if b, err = c.more(19); err != nil {
			return nil, 0, err
		}
		bpp, trueColour := b[4], b[7]
		if (bpp != 8 && bpp != 16 && bpp != 32) || trueColour > 1 {
			return nil, 0, protoErr("bad pixel format")
		}
		return b, pass, nil
	case msgSetEncodings:
		if b, err = c.more(3); err != nil {
			return nil, 0, err
		}
		n := int(binary.BigEndian.Uint16(b[2:4]))
		if n > maxEncodings {
			return nil, 0, protoErr("%d encodings", n)
		}
		b, err = c.more(4 * n)
		return b, pass, err
	case msgFBUpdateRequest:
		if b, err = c.more(9); err != nil {
			return nil, 0, err
		}
		if b[1] > 1 {
			return nil, 0, protoErr("bad update request")
		}
		return b, pass, nil
	case msgKeyEvent:
		b, err = c.more(7)
		return b, input, err
	case msgPointerEvent:
		b, err = c.more(5)
		return b, input, err
	case msgClientCutText:
		if b, err = c.more(7); err != nil {
			return nil, 0, err
		}
		// A negative length is the extended clipboard format.
		n := int64(int32(binary.BigEndian.Uint32(b[4:8])))
		if n < 0 {
			n = -n
		}
		if n > maxCutText {
			return nil, 0, protoErr("clipboard of %d bytes", n)
		}
		b, err = c.more(int(n))
		return b, input, err
	case msgEnableContinuousUp:
		b, err = c.more(9)
		return b, drop, err
	case msgClientFence:
		if b, err = c.more(8); err != nil {
			return nil, 0, err
		}
		n := int(b[8])
		if n > maxFence {
			return nil, 0, protoErr("fence of %d bytes", n)
		}
		b, err = c.more(n)
		return b, drop, err
	case msgXVP:
		b, err = c.more(3)
		return b, drop, err
	case msgSetDesktopSize:
		if b, err = c.more(7); err != nil {
			return nil, 0, err
		}
		n := int(b[6])
		if n > maxScreens {
			return nil, 0, protoErr("%d screens", n)
		}
		b, err = c.more(16 * n)
		return b, drop, err
	case msgGII:
		if b, err = c.more(3); err != nil {
			return nil, 0, err
		}
		var n int
		if b[1]&0x80 != 0 {
			n = int(binary.BigEndian.Uint16(b[2:4]))
		} else {
			n = int(binary.LittleEndian.Uint16(b[2:4]))
		}
		if n > maxGII {
			return nil, 0, protoErr("gii message of %d bytes", n)
		}
		b, err = c.more(n)
		return b, drop, err
	case msgQEMU:
		if b, err = c.more(1); err != nil {
			return nil, 0, err
		}
		switch b[1] {
		case 0: // extended key event: a key press, like KeyEvent
			b, err = c.more(10)
			return b, input, err
		case 1: // audio: operation 0/1 (enable/disable) or 2 (set format)
			if b, err = c.more(2); err != nil {
				return nil, 0, err
			}
			switch binary.BigEndian.Uint16(b[2:4]) {
			case 0, 1:
				return b, drop, nil
			case 2:
				b, err = c.more(6)
				return b, drop, err
			}
			return nil, 0, protoErr("qemu audio operation")
		}
		return nil, 0, protoErr("qemu submessage %d", b[1])
	default:
		return nil, 0, protoErr("message type %d", t)
	}
}

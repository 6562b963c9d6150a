package rfb

import "time"

// Encoding numbers this client decodes (RFC 6143 section 7.7).
const (
	EncodingRaw         int32 = 0
	EncodingCopyRect    int32 = 1
	EncodingZRLE        int32 = 16
	EncodingDesktopSize int32 = -223
	// EncodingPointerPos is the pointer-position pseudo-encoding: a
	// rectangle whose x, y is where the server's pointer is (moved by
	// another client or on the server itself), with no data.
	EncodingPointerPos int32 = -232
	// EncodingXCursor is the X cursor shape pseudo-encoding. Its shapes
	// are read and dropped: servers built on libvncserver (x11vnc) send
	// pointer positions only to a client that takes cursor shapes too.
	EncodingXCursor int32 = -240
	// maxCursor bounds an XCursor shape's sides.
	maxCursor = 256
)

// Defaults for Options' zero fields.
const (
	DefaultMaxWidth     = 8192
	DefaultMaxHeight    = 8192
	DefaultMaxMessage   = 64 << 20
	DefaultWriteTimeout = 10 * time.Second
)

// Options configure a session. Zero fields take the defaults above.
type Options struct {
	// Password is the VNC password (VNC authentication, security type 2);
	// only its first 8 bytes count, as in every VNC server.
	Password string
	// MaxWidth and MaxHeight bound the framebuffer: a ServerInit or
	// DesktopSize beyond them ends the session.
	MaxWidth, MaxHeight int
	// MaxMessage is the most one message may carry (one ZRLE rectangle's
	// compressed data, one cut text).
	MaxMessage int
	// Encodings are sent in SetEncodings, most preferred first. Default:
	// ZRLE, CopyRect, Raw, DesktopSize, PointerPos, XCursor.
	Encodings []int32
	// WriteTimeout bounds every write to the server; a write that takes
	// longer ends the session.
	WriteTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxWidth <= 0 {
		o.MaxWidth = DefaultMaxWidth
	}
	if o.MaxHeight <= 0 {
		o.MaxHeight = DefaultMaxHeight
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if len(o.Encodings) == 0 {
		o.Encodings = []int32{EncodingZRLE, EncodingCopyRect, EncodingRaw, EncodingDesktopSize, EncodingPointerPos, EncodingXCursor}
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	return o
}

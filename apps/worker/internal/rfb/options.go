package rfb

import "time"

// Encoding numbers this client decodes (RFC 6143 section 7.7).
const (
	EncodingRaw         int32 = 0
	EncodingCopyRect    int32 = 1
	EncodingZRLE        int32 = 16
	EncodingDesktopSize int32 = -223
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
	// ZRLE, CopyRect, Raw, DesktopSize.
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
		o.Encodings = []int32{EncodingZRLE, EncodingCopyRect, EncodingRaw, EncodingDesktopSize}
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	return o
}

// Package jpegenc encodes 32-bit frames (4 bytes a pixel, the fourth
// ignored) as JPEG: with libjpeg-turbo (linked statically) in a cgo build,
// image/jpeg under `-tags purejpeg` or CGO_ENABLED=0 (about 3× slower).
// botd encodes its X captures (BGRX) with it and the worker its held RFB
// framebuffers (RGBX).
package jpegenc

// Order is where the colours sit in a pixel's four bytes.
type Order int

const (
	// BGRX is X's 24-bit-in-32 order on little-endian machines.
	BGRX Order = iota
	// RGBX is image.RGBA's order.
	RGBX
)

// Encoder turns frames into JPEGs with 4:2:0 subsampling. It reuses its
// buffers and is not safe for concurrent use; Close frees them.
type Encoder interface {
	Encode(pix []byte, w, h, stride, quality int) ([]byte, error)
	Close()
}

// New is an encoder of frames in order o.
func New(o Order) Encoder { return newEncoder(o) }

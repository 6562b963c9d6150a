//go:build cgo && !purejpeg

package desktop

/*
#cgo LDFLAGS: -l:libturbojpeg.a
#include <stdlib.h>
#include <turbojpeg.h>

static int encode_bgrx(tjhandle h, const unsigned char *src, int w, int pitch, int hgt,
                       unsigned char **dst, unsigned long *size, int quality) {
	return tjCompress2(h, src, w, pitch, hgt, TJPF_BGRX, dst, size, TJSAMP_420, quality,
	                   TJFLAG_FASTDCT | TJFLAG_NOREALLOC);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// turboEncoder is a libjpeg-turbo compressor with an output buffer sized for
// the worst case, so tjCompress2 never reallocates. Not safe for concurrent
// use (the Desktop's capMu serializes it).
type turboEncoder struct {
	tj   C.tjhandle
	out  *C.uchar
	cap  C.ulong
	w, h int
}

// EncoderName says which JPEG encoder this build uses.
const EncoderName = "libjpeg-turbo"

func newEncoder() encoder { return &turboEncoder{} }

func (e *turboEncoder) encode(pix []byte, w, h, stride, quality int) ([]byte, error) {
	if len(pix) < stride*h || w <= 0 || h <= 0 {
		return nil, errors.New("short buffer")
	}
	if e.tj == nil {
		e.tj = C.tjInitCompress()
		if e.tj == nil {
			return nil, errors.New("tjInitCompress failed")
		}
	}
	if e.out == nil || e.w != w || e.h != h {
		if e.out != nil {
			C.tjFree(e.out)
		}
		e.cap = C.tjBufSize(C.int(w), C.int(h), C.TJSAMP_420)
		e.out = C.tjAlloc(C.int(e.cap))
		if e.out == nil {
			return nil, errors.New("tjAlloc failed")
		}
		e.w, e.h = w, h
	}
	size := e.cap
	dst := e.out
	if C.encode_bgrx(e.tj, (*C.uchar)(unsafe.Pointer(&pix[0])), C.int(w), C.int(stride), C.int(h), &dst, &size, C.int(quality)) != 0 {
		return nil, fmt.Errorf("tjCompress2: %s", C.GoString(C.tjGetErrorStr2(e.tj)))
	}
	return C.GoBytes(unsafe.Pointer(dst), C.int(size)), nil
}

func (e *turboEncoder) close() {
	if e.out != nil {
		C.tjFree(e.out)
		e.out = nil
	}
	if e.tj != nil {
		C.tjDestroy(e.tj)
		e.tj = nil
	}
}

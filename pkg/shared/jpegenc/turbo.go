//go:build cgo && !purejpeg

package jpegenc

/*
#cgo LDFLAGS: -l:libturbojpeg.a
#include <stdlib.h>
#include <turbojpeg.h>

static int encode_x(tjhandle h, const unsigned char *src, int w, int pitch, int hgt, int rgbx,
                    unsigned char **dst, unsigned long *size, int quality) {
	return tjCompress2(h, src, w, pitch, hgt, rgbx ? TJPF_RGBX : TJPF_BGRX, dst, size, TJSAMP_420, quality,
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
// the worst case, so tjCompress2 never reallocates.
type turboEncoder struct {
	order Order
	tj    C.tjhandle
	out   *C.uchar
	cap   C.ulong
	w, h  int
}

// Name says which JPEG encoder this build uses.
const Name = "libjpeg-turbo"

func newEncoder(o Order) Encoder { return &turboEncoder{order: o} }

func (e *turboEncoder) Encode(pix []byte, w, h, stride, quality int) ([]byte, error) {
	if w <= 0 || h <= 0 || stride < w*4 || len(pix) < stride*(h-1)+w*4 {
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
	rgbx := C.int(0)
	if e.order == RGBX {
		rgbx = 1
	}
	if C.encode_x(e.tj, (*C.uchar)(unsafe.Pointer(&pix[0])), C.int(w), C.int(stride), C.int(h), rgbx, &dst, &size, C.int(quality)) != 0 {
		return nil, fmt.Errorf("tjCompress2: %s", C.GoString(C.tjGetErrorStr2(e.tj)))
	}
	return C.GoBytes(unsafe.Pointer(dst), C.int(size)), nil
}

func (e *turboEncoder) Close() {
	if e.out != nil {
		C.tjFree(e.out)
		e.out = nil
	}
	if e.tj != nil {
		C.tjDestroy(e.tj)
		e.tj = nil
	}
}

//go:build !cgo || purejpeg

package jpegenc

import (
	"bytes"
	"errors"
	"image"
	"image/jpeg"
)

// Name says which JPEG encoder this build uses.
const Name = "image/jpeg"

// goEncoder is the pure-Go fallback (about 3× slower than libjpeg-turbo).
type goEncoder struct {
	order Order
	img   *image.RGBA
	buf   bytes.Buffer
}

func newEncoder(o Order) Encoder { return &goEncoder{order: o} }

func (e *goEncoder) Encode(pix []byte, w, h, stride, quality int) ([]byte, error) {
	if w <= 0 || h <= 0 || stride < w*4 || len(pix) < stride*(h-1)+w*4 {
		return nil, errors.New("short buffer")
	}
	if e.img == nil || e.img.Rect.Dx() != w || e.img.Rect.Dy() != h {
		e.img = image.NewRGBA(image.Rect(0, 0, w, h))
	}
	for y := 0; y < h; y++ {
		src := pix[y*stride : y*stride+w*4]
		dst := e.img.Pix[y*e.img.Stride : y*e.img.Stride+w*4]
		if e.order == RGBX {
			copy(dst, src)
			continue
		}
		for i := 0; i < len(src); i += 4 {
			dst[i], dst[i+1], dst[i+2], dst[i+3] = src[i+2], src[i+1], src[i], 0xff
		}
	}
	e.buf.Reset()
	if err := jpeg.Encode(&e.buf, e.img, &jpeg.Options{Quality: quality}); err != nil {
		return nil, err
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

func (e *goEncoder) Close() {}

//go:build !cgo || purejpeg

package desktop

import (
	"bytes"
	"errors"
	"image"
	"image/jpeg"
)

// EncoderName says which JPEG encoder this build uses.
const EncoderName = "image/jpeg"

// goEncoder is the pure-Go fallback (about 3× slower than libjpeg-turbo).
type goEncoder struct {
	img *image.RGBA
	buf bytes.Buffer
}

func newEncoder() encoder { return &goEncoder{} }

func (e *goEncoder) encode(pix []byte, w, h, stride, quality int) ([]byte, error) {
	if w <= 0 || h <= 0 || stride < w*4 || len(pix) < stride*(h-1)+w*4 {
		return nil, errors.New("short buffer")
	}
	if e.img == nil || e.img.Rect.Dx() != w || e.img.Rect.Dy() != h {
		e.img = image.NewRGBA(image.Rect(0, 0, w, h))
	}
	for y := 0; y < h; y++ {
		src := pix[y*stride : y*stride+w*4]
		dst := e.img.Pix[y*e.img.Stride : y*e.img.Stride+w*4]
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

func (e *goEncoder) close() {}

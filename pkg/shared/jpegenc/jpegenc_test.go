package jpegenc

import (
	"bytes"
	"image"
	"image/jpeg"
	"testing"
)

// TestEncode: a frame of red in each byte order comes back red, at its
// size, from a padded stride too; the second run reuses the buffers; a
// short buffer is refused. `go test -tags purejpeg` runs it on image/jpeg.
func TestEncode(t *testing.T) {
	const w, h, stride = 64, 48, 64*4 + 16
	for _, tc := range []struct {
		name  string
		order Order
		red   int // the byte of red in a pixel
	}{{"BGRX", BGRX, 2}, {"RGBX", RGBX, 0}} {
		pix := make([]byte, stride*h)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				pix[y*stride+4*x+tc.red] = 255
			}
		}
		enc := New(tc.order)
		for i := 0; i < 2; i++ {
			b, err := enc.Encode(pix, w, h, stride, 72)
			if err != nil {
				t.Fatal(err)
			}
			img, err := jpeg.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if img.Bounds() != image.Rect(0, 0, w, h) {
				t.Fatalf("%s: bounds %v", tc.name, img.Bounds())
			}
			r, g, bl, _ := img.At(10, 10).RGBA()
			if r>>8 < 230 || g>>8 > 30 || bl>>8 > 30 {
				t.Fatalf("%s %s: colour %d %d %d, want red", Name, tc.name, r>>8, g>>8, bl>>8)
			}
		}
		if _, err := enc.Encode(pix[:10], w, h, stride, 72); err == nil {
			t.Fatalf("%s: a short buffer was accepted", tc.name)
		}
		enc.Close()
	}
}

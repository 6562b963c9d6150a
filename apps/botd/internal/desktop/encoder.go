package desktop

// encoder turns a BGRX frame into a JPEG. The cgo build uses libjpeg-turbo
// (linked statically); `-tags purejpeg` or CGO_ENABLED=0 uses image/jpeg.
type encoder interface {
	encode(pix []byte, w, h, stride, quality int) ([]byte, error)
	close()
}

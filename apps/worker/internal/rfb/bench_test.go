package rfb

import (
	"image"
	"testing"
)

// BenchmarkSnapshot copies a 1280x800 framebuffer into a reused image.
func BenchmarkSnapshot(b *testing.B) {
	c := newClient(nil, nil, Options{}.withDefaults(), 1280, 800)
	var dst *image.RGBA
	b.SetBytes(4 * 1280 * 800)
	for b.Loop() {
		dst, _ = c.Snapshot(dst)
	}
}

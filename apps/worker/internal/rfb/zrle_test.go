package rfb

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"image"
	"image/color"
	"net"
	"testing"
	"time"
)

// zrleData is one ZRLE rectangle's payload (length, then zlib data) on a
// fresh zlib stream.
func zrleData(tiles ...[]byte) []byte {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	for _, tl := range tiles {
		zw.Write(tl)
	}
	zw.Flush()
	return append(binary.BigEndian.AppendUint32(nil, uint32(z.Len())), z.Bytes()...)
}

// encodeTile encodes pix (one tile, row-major) with ZRLE subencoding kind:
// "raw", "solid", "packed", "rle" or "prle". It follows RFC 6143 7.7.6 and
// is the test's own writer, independent of the decoder.
func encodeTile(kind string, w int, pix [][3]byte) []byte {
	cp := func(b []byte, p [3]byte) []byte { return append(b, p[2], p[1], p[0]) } // B, G, R
	var pal [][3]byte
	index := map[[3]byte]int{}
	for _, p := range pix {
		if _, ok := index[p]; !ok {
			index[p] = len(pal)
			pal = append(pal, p)
		}
	}
	runLen := func(b []byte, n int) []byte {
		n--
		for ; n >= 255; n -= 255 {
			b = append(b, 255)
		}
		return append(b, byte(n))
	}
	runs := func(f func(b []byte, p [3]byte, n int) []byte) []byte {
		var b []byte
		for i := 0; i < len(pix); {
			j := i
			for j < len(pix) && pix[j] == pix[i] {
				j++
			}
			b = f(b, pix[i], j-i)
			i = j
		}
		return b
	}
	switch kind {
	case "raw":
		b := []byte{0}
		for _, p := range pix {
			b = cp(b, p)
		}
		return b
	case "solid":
		return cp([]byte{1}, pix[0])
	case "packed":
		b := []byte{byte(len(pal))}
		for _, p := range pal {
			b = cp(b, p)
		}
		return append(b, packIndices(pix, w, index, len(pal))...)
	case "rle":
		return append([]byte{128}, runs(func(b []byte, p [3]byte, n int) []byte { return runLen(cp(b, p), n) })...)
	case "prle":
		b := []byte{byte(128 + len(pal))}
		for _, p := range pal {
			b = cp(b, p)
		}
		return append(b, runs(func(b []byte, p [3]byte, n int) []byte {
			if n == 1 {
				return append(b, byte(index[p]))
			}
			return runLen(append(b, byte(index[p])|128), n)
		})...)
	}
	panic(kind)
}

// packIndices packs palette indices MSB first, each row of w padded to a
// byte.
func packIndices(pix [][3]byte, tileW int, index map[[3]byte]int, size int) []byte {
	bits := 4
	switch {
	case size == 2:
		bits = 1
	case size <= 4:
		bits = 2
	}
	var out []byte
	for y := 0; y < len(pix)/tileW; y++ {
		var cur byte
		used := 0
		for x := 0; x < tileW; x++ {
			cur |= byte(index[pix[y*tileW+x]]) << (8 - bits - used)
			used += bits
			if used == 8 {
				out = append(out, cur)
				cur, used = 0, 0
			}
		}
		if used > 0 {
			out = append(out, cur)
		}
	}
	return out
}

// TestZRLESubencodings feeds every ZRLE subencoding (raw, solid, packed
// palettes of 1, 2 and 4 bits, plain RLE with a run over 255, palette RLE)
// on tiles cut at the rectangle's edges, over one zlib stream spanning two
// updates, then an overlapping CopyRect, and compares every pixel.
func TestZRLESubencodings(t *testing.T) {
	t.Parallel()
	const W, H = 150, 70
	want := image.NewRGBA(image.Rect(0, 0, W, H))
	set := func(x, y int, p [3]byte) { want.SetRGBA(x, y, rgba(p)) }

	// The test's kinds name what gen draws; encodeTile takes the wire kind.
	wire := map[string]string{"raw": "raw", "solid": "solid", "packed2": "packed", "packed3": "packed", "packed16": "packed", "rle": "rle", "prle": "prle"}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	rect := func(r image.Rectangle, kinds []string, gen func(kind string, i, x, y int) [3]byte) []byte {
		k := 0
		for ty := r.Min.Y; ty < r.Max.Y; ty += 64 {
			for tx := r.Min.X; tx < r.Max.X; tx += 64 {
				tr := image.Rect(tx, ty, min(tx+64, r.Max.X), min(ty+64, r.Max.Y))
				kind := kinds[k%len(kinds)]
				var pix [][3]byte
				for y := tr.Min.Y; y < tr.Max.Y; y++ {
					for x := tr.Min.X; x < tr.Max.X; x++ {
						p := gen(kind, len(pix), x-tr.Min.X, y-tr.Min.Y)
						pix = append(pix, p)
						set(x, y, p)
					}
				}
				zw.Write(encodeTile(wire[kind], tr.Dx(), pix))
				k++
			}
		}
		zw.Flush()
		b := append(update(r.Min.X, r.Min.Y, r.Dx(), r.Dy(), EncodingZRLE), binary.BigEndian.AppendUint32(nil, uint32(z.Len()))...)
		b = append(b, z.Bytes()...)
		z.Reset()
		return b
	}
	gen := func(kind string, i, x, y int) [3]byte {
		switch kind {
		case "raw":
			return [3]byte{byte(x * 3), byte(y * 5), byte(x * y)}
		case "solid":
			return [3]byte{10, 200, 30}
		case "packed2":
			return [3]byte{byte(((x + y) % 2) * 200), 7, 9}
		case "packed3":
			return [3]byte{byte(((x + 2*y) % 3) * 60), 100, 1}
		case "packed16":
			return [3]byte{byte(((x + 3*y) % 16) * 15), 50, 0}
		case "rle":
			if i < 300 {
				return [3]byte{1, 2, 3}
			}
			return [3]byte{byte((i / 7) % 3 * 80), 40, 9}
		default: // prle
			if i < 200 {
				return [3]byte{byte((i / 5) % 5 * 50), 0, 255}
			}
			return [3]byte{byte(i % 5 * 50), 0, 255}
		}
	}
	// Tiles: 64x64 rle (a run of 300), 64x64 raw, 22x64 packed2, 64x6
	// packed3, 64x6 packed16, 22x6 solid.
	kinds := []string{"rle", "raw", "packed2", "packed3", "packed16", "solid"}
	first := rect(image.Rect(0, 0, W, H), kinds, gen)
	second := rect(image.Rect(10, 3, 10+64, 3+64), []string{"prle"}, gen)
	// CopyRect moving down and right over itself.
	cr := append(update(20, 5, 50, 40, EncodingCopyRect), 0, 10, 0, 0)
	src := image.NewRGBA(want.Rect)
	copy(src.Pix, want.Pix)
	for y := 0; y < 40; y++ {
		for x := 0; x < 50; x++ {
			want.SetRGBA(20+x, 5+y, src.RGBAAt(10+x, y))
		}
	}

	sent := make(chan struct{})
	addr := serveHostile(t, W, H, false, func(conn net.Conn) {
		conn.Write(first)
		conn.Write(second)
		conn.Write(cr)
		close(sent)
		<-t.Context().Done()
	})
	c, err := dialHostile(t, addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	<-sent
	var img *image.RGBA
	deadline := time.Now().Add(5 * time.Second)
	for {
		var f Frame
		img, f = c.Snapshot(img)
		if f.Seq >= 3 {
			break
		}
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d updates applied", f.Seq)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !bytes.Equal(img.Pix, want.Pix) {
		t.Fatal(firstDiff(img, want))
	}
	c.Close()
	t.Logf("subencodings %v", nonZero(c.seen.zrleSub[:]))
	for _, sub := range []int{0, 1, 2, 3, 16, 128, 133} {
		if c.seen.zrleSub[sub] == 0 {
			t.Errorf("subencoding %d not exercised", sub)
		}
	}
}

func rgba(p [3]byte) color.RGBA { return color.RGBA{p[0], p[1], p[2], 255} }

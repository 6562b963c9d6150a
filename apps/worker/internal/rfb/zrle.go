package rfb

import (
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
)

// zrleTile is ZRLE's tile edge (RFC 6143 section 7.7.6).
const zrleTile = 64

// maxCarry bounds the compressed bytes one ZRLE rectangle may leave unread
// for the next: a flush marker is a few bytes, more is a hostile server.
const maxCarry = 1024

// errZlibStarved is what the zlib stream sees when a rectangle's data ran
// out before its tiles did.
var errZlibStarved = errors.New("zrle data ends inside a tile")

// zlibSource feeds the session's one zlib stream, rectangle by rectangle:
// the bytes a rectangle leaves unread (the sync-flush marker) are carried
// to the next. It is a ByteReader so flate reads no further than it needs.
type zlibSource struct {
	carry []byte
	data  []byte
}

func (s *zlibSource) Read(p []byte) (int, error) {
	if len(s.carry) > 0 {
		n := copy(p, s.carry)
		s.carry = s.carry[n:]
		return n, nil
	}
	if len(s.data) == 0 {
		return 0, errZlibStarved
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

func (s *zlibSource) ReadByte() (byte, error) {
	if len(s.carry) > 0 {
		b := s.carry[0]
		s.carry = s.carry[1:]
		return b, nil
	}
	if len(s.data) == 0 {
		return 0, errZlibStarved
	}
	b := s.data[0]
	s.data = s.data[1:]
	return b, nil
}

// rest is how many fed bytes flate has not read yet.
func (s *zlibSource) rest() int { return len(s.carry) + len(s.data) }

func (c *Client) readZRLE(r image.Rectangle) error {
	var b [4]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(b[:])
	if uint64(n) > uint64(c.o.MaxMessage) {
		return fmt.Errorf("rfb: zrle rect of %d bytes over the %d byte limit", n, c.o.MaxMessage)
	}
	data, err := c.readPayload(int(n))
	if err != nil {
		return err
	}
	c.zsrc.data = data
	if c.zr == nil {
		if c.zr, err = zlib.NewReader(&c.zsrc); err != nil {
			return fmt.Errorf("rfb: zrle: %w", err)
		}
	}
	for ty := r.Min.Y; ty < r.Max.Y; ty += zrleTile {
		for tx := r.Min.X; tx < r.Max.X; tx += zrleTile {
			t := image.Rect(tx, ty, min(tx+zrleTile, r.Max.X), min(ty+zrleTile, r.Max.Y))
			if err := c.readTile(t); err != nil {
				return fmt.Errorf("rfb: zrle tile at %d,%d: %w", tx, ty, err)
			}
		}
	}
	// What flate left unread moves to carry: the payload buffer is reused.
	if left := c.zsrc.rest(); left > maxCarry {
		return fmt.Errorf("rfb: zrle rect left %d compressed bytes unread", left)
	}
	c.zsrc.carry = append(append([]byte(nil), c.zsrc.carry...), c.zsrc.data...)
	c.zsrc.data = nil
	return nil
}

// readTile decodes one ZRLE tile into c.tile and copies it to the
// framebuffer.
func (c *Client) readTile(t image.Rectangle) error {
	w, h := t.Dx(), t.Dy()
	npix := w * h
	if c.tile == nil {
		c.tile = make([]byte, 4*zrleTile*zrleTile)
		c.cpix = make([]byte, 3*zrleTile*zrleTile)
	}
	px := c.tile[:4*npix]
	var one [1]byte
	readByte := func() (byte, error) {
		_, err := io.ReadFull(c.zr, one[:])
		return one[0], err
	}
	var palette [128][4]byte
	readPalette := func(n int) error {
		buf := c.cpix[:3*n]
		if _, err := io.ReadFull(c.zr, buf); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			palette[i] = [4]byte{buf[3*i+2], buf[3*i+1], buf[3*i], 0xff}
		}
		return nil
	}
	// runLength reads a run's length: bytes summed until one is not 255.
	runLength := func(left int) (int, error) {
		n := 1
		for {
			b, err := readByte()
			if err != nil {
				return 0, err
			}
			n += int(b)
			if n > left {
				return 0, fmt.Errorf("run of %d+ pixels with %d left", n, left)
			}
			if b != 255 {
				return n, nil
			}
		}
	}
	fill := func(at, n int, p [4]byte) {
		for i := at; i < at+n; i++ {
			copy(px[4*i:4*i+4], p[:])
		}
	}

	sub, err := readByte()
	if err != nil {
		return err
	}
	c.seen.zrleSub[sub]++
	switch {
	case sub == 0: // raw CPIXELs
		buf := c.cpix[:3*npix]
		if _, err := io.ReadFull(c.zr, buf); err != nil {
			return err
		}
		for i := 0; i < npix; i++ {
			px[4*i], px[4*i+1], px[4*i+2], px[4*i+3] = buf[3*i+2], buf[3*i+1], buf[3*i], 0xff
		}
	case sub == 1: // solid
		if err := readPalette(1); err != nil {
			return err
		}
		fill(0, npix, palette[0])
	case sub <= 16: // packed palette
		size := int(sub)
		if err := readPalette(size); err != nil {
			return err
		}
		bits := 4
		switch {
		case size == 2:
			bits = 1
		case size <= 4:
			bits = 2
		}
		stride := (w*bits + 7) / 8
		buf := c.cpix[:stride*h]
		if _, err := io.ReadFull(c.zr, buf); err != nil {
			return err
		}
		mask := byte(1<<bits - 1)
		for y := 0; y < h; y++ {
			row := buf[y*stride:]
			for x := 0; x < w; x++ {
				bit := x * bits
				idx := int(row[bit/8]>>(8-bits-bit%8)) & int(mask)
				if idx >= size {
					return fmt.Errorf("palette index %d of %d", idx, size)
				}
				copy(px[4*(y*w+x):], palette[idx][:])
			}
		}
	case sub == 128: // plain RLE
		for at := 0; at < npix; {
			buf := c.cpix[:3]
			if _, err := io.ReadFull(c.zr, buf); err != nil {
				return err
			}
			n, err := runLength(npix - at)
			if err != nil {
				return err
			}
			fill(at, n, [4]byte{buf[2], buf[1], buf[0], 0xff})
			at += n
		}
	case sub >= 130: // palette RLE
		size := int(sub) - 128
		if err := readPalette(size); err != nil {
			return err
		}
		for at := 0; at < npix; {
			b, err := readByte()
			if err != nil {
				return err
			}
			idx, n := int(b&127), 1
			if idx >= size {
				return fmt.Errorf("palette index %d of %d", idx, size)
			}
			if b&128 != 0 {
				if n, err = runLength(npix - at); err != nil {
					return err
				}
			}
			fill(at, n, palette[idx])
			at += n
		}
	default:
		return fmt.Errorf("bad subencoding %d", sub)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for y := 0; y < h; y++ {
		off := c.fb.PixOffset(t.Min.X, t.Min.Y+y)
		copy(c.fb.Pix[off:off+4*w], px[4*y*w:4*(y+1)*w])
	}
	return nil
}

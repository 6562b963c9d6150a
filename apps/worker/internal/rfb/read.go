package rfb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"time"
)

// Server message types (RFC 6143 section 7.6).
const (
	msgFramebufferUpdate   = 0
	msgSetColourMapEntries = 1
	msgBell                = 2
	msgServerCutText       = 3
)

// run is the read loop: it applies server messages until one fails.
func (c *Client) run() {
	defer close(c.done)
	err := c.readMessages()
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("rfb: truncated message or connection closed: %w", err)
	case errors.As(err, &ne):
		err = fmt.Errorf("rfb: read: %w", err)
	}
	c.fail(err)
	if c.zr != nil {
		c.zr.Close()
	}
}

func (c *Client) readMessages() error {
	var hdr [12]byte
	for {
		t, err := c.br.ReadByte()
		if err != nil {
			return err
		}
		switch t {
		case msgFramebufferUpdate:
			if err := c.readUpdate(); err != nil {
				return err
			}
		case msgSetColourMapEntries:
			// We asked for true colour: skip the entries (at most 64 Ki × 6 bytes).
			if _, err := io.ReadFull(c.br, hdr[:5]); err != nil {
				return err
			}
			n := int(binary.BigEndian.Uint16(hdr[3:]))
			if _, err := c.br.Discard(6 * n); err != nil {
				return err
			}
		case msgBell:
		case msgServerCutText:
			if _, err := io.ReadFull(c.br, hdr[:7]); err != nil {
				return err
			}
			n := binary.BigEndian.Uint32(hdr[3:])
			if uint64(n) > uint64(c.o.MaxMessage) {
				return fmt.Errorf("rfb: cut text of %d bytes over the %d byte limit", n, c.o.MaxMessage)
			}
			// Dropped: nothing here reads the server's clipboard.
			if _, err := c.br.Discard(int(n)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("rfb: unknown message type %d", t)
		}
	}
}

func (c *Client) readUpdate() error {
	var hdr [12]byte
	if _, err := io.ReadFull(c.br, hdr[:3]); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint16(hdr[1:]))
	c.mu.Lock()
	started := c.written
	c.mu.Unlock()
	resized := false
	for i := 0; i < n; i++ {
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			return err
		}
		x := int(binary.BigEndian.Uint16(hdr[0:]))
		y := int(binary.BigEndian.Uint16(hdr[2:]))
		w := int(binary.BigEndian.Uint16(hdr[4:]))
		h := int(binary.BigEndian.Uint16(hdr[6:]))
		enc := int32(binary.BigEndian.Uint32(hdr[8:]))
		r := image.Rect(x, y, x+w, y+h)
		c.seen.rects[enc]++
		if enc == EncodingXCursor {
			if w > maxCursor || h > maxCursor {
				return fmt.Errorf("rfb: a cursor shape of %dx%d (the most is %dx%d)", w, h, maxCursor, maxCursor)
			}
			if w > 0 && h > 0 {
				if _, err := io.CopyN(io.Discard, c.br, int64(6+2*((w+7)/8)*h)); err != nil {
					return err
				}
			}
			continue
		}
		if enc == EncodingPointerPos {
			c.mu.Lock()
			if time.Since(c.movedAt) >= ownMoveWins {
				c.pointer, c.pointerKnown = image.Pt(x, y), true
			}
			c.mu.Unlock()
			continue
		}
		if enc == EncodingDesktopSize {
			if err := c.resize(w, h); err != nil {
				return err
			}
			resized = true
			continue
		}
		if err := c.inside(r, enc); err != nil {
			return err
		}
		var err error
		switch enc {
		case EncodingRaw:
			err = c.readRaw(r)
		case EncodingCopyRect:
			err = c.readCopyRect(r)
		case EncodingZRLE:
			err = c.readZRLE(r)
		default:
			err = fmt.Errorf("rfb: unknown encoding %d", enc)
		}
		if err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.frame = Frame{Seq: c.frame.Seq + 1, At: time.Now()}
	c.answered = started
	close(c.changed)
	c.changed = make(chan struct{})
	w, h := c.fb.Rect.Dx(), c.fb.Rect.Dy()
	c.mu.Unlock()
	// Continuous updates: the next request goes out as soon as this one is
	// applied; after a resize the whole new screen is needed.
	_, err := c.request(!resized, 0, 0, w, h)
	return err
}

func (c *Client) inside(r image.Rectangle, enc int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !r.In(c.fb.Rect) && !r.Empty() {
		return fmt.Errorf("rfb: rect %v (encoding %d) outside the %dx%d framebuffer", r, enc, c.fb.Rect.Dx(), c.fb.Rect.Dy())
	}
	return nil
}

func (c *Client) resize(w, h int) error {
	if err := checkSize(w, h, c.o); err != nil {
		return fmt.Errorf("rfb: desktop size: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fb.Rect.Dx() != w || c.fb.Rect.Dy() != h {
		c.fb = image.NewRGBA(image.Rect(0, 0, w, h))
	}
	return nil
}

// readRaw reads a Raw rectangle row by row, so a slow server holds mu for
// no more than one row's conversion.
func (c *Client) readRaw(r image.Rectangle) error {
	w := r.Dx()
	if cap(c.row) < 4*w {
		c.row = make([]byte, 4*w)
	}
	row := c.row[:4*w]
	for y := r.Min.Y; y < r.Max.Y; y++ {
		if _, err := io.ReadFull(c.br, row); err != nil {
			return err
		}
		c.mu.Lock()
		if y < c.fb.Rect.Max.Y { // a resize cannot happen mid-update; stay safe anyway
			off := c.fb.PixOffset(r.Min.X, y)
			bgrxToRGBA(c.fb.Pix[off:off+4*w], row)
		}
		c.mu.Unlock()
	}
	return nil
}

// bgrxToRGBA converts little-endian 32 bpp pixels (blue first) to RGBA.
func bgrxToRGBA(dst, src []byte) {
	for i := 0; i+3 < len(src); i += 4 {
		d := dst[i : i+4 : i+4]
		d[0], d[1], d[2], d[3] = src[i+2], src[i+1], src[i], 0xff
	}
}

func (c *Client) readCopyRect(r image.Rectangle) error {
	var b [4]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return err
	}
	sx := int(binary.BigEndian.Uint16(b[0:]))
	sy := int(binary.BigEndian.Uint16(b[2:]))
	src := image.Rect(sx, sy, sx+r.Dx(), sy+r.Dy())
	c.mu.Lock()
	defer c.mu.Unlock()
	fb := c.fb
	if !src.In(fb.Rect) && !src.Empty() {
		return fmt.Errorf("rfb: copyrect source %v outside the %dx%d framebuffer", src, fb.Rect.Dx(), fb.Rect.Dy())
	}
	n := 4 * r.Dx()
	// Rows overlap when moving down: copy bottom-up then.
	for i := 0; i < r.Dy(); i++ {
		row := i
		if sy < r.Min.Y {
			row = r.Dy() - 1 - i
		}
		so := fb.PixOffset(sx, sy+row)
		do := fb.PixOffset(r.Min.X, r.Min.Y+row)
		copy(fb.Pix[do:do+n], fb.Pix[so:so+n])
	}
	return nil
}

// readPayload reads n bytes into the reused payload buffer, growing it only
// as bytes arrive, so an announced length costs nothing until it is sent.
func (c *Client) readPayload(n int) ([]byte, error) {
	buf := c.payload[:0]
	for len(buf) < n {
		chunk := min(n-len(buf), 1<<20)
		if cap(buf)-len(buf) < chunk {
			nb := make([]byte, len(buf), len(buf)+max(chunk, min(2*cap(buf), n)-len(buf)))
			copy(nb, buf)
			buf = nb
		}
		m, err := io.ReadFull(c.br, buf[len(buf):len(buf)+chunk])
		buf = buf[:len(buf)+m]
		if err != nil {
			c.payload = buf[:0]
			return nil, err
		}
	}
	c.payload = buf[:0]
	return buf, nil
}

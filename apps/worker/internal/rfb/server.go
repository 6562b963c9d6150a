package rfb

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"sync"
	"time"
)

// Source is what Serve shows: the live upstream session (nil while there
// is none; it changes when the upstream is redialled) and a channel closed
// when the source has ended for good. *Stream is one.
type Source interface {
	Client() *Client
	Done() <-chan struct{}
}

// ServeOptions configure one viewer's session.
type ServeOptions struct {
	// Name is the desktop name sent in ServerInit.
	Name string
	// Control says whether this viewer's key and pointer events may reach
	// the screen now; it is asked for every event. Nil makes the session
	// view-only: its input is read and dropped.
	Control func() bool
	// WriteTimeout bounds each update's write (default 10 s): a viewer
	// that reads slower ends its own session and no other.
	WriteTimeout time.Duration
	// MaxCutText bounds a viewer's cut text (default 1 MiB); the text is
	// always dropped.
	MaxCutText int
	// Wait bounds the wait for a live upstream at the start (default 30 s).
	Wait time.Duration
}

// Defaults for ServeOptions' zero fields.
const (
	DefaultMaxCutText = 1 << 20
	DefaultServeWait  = 30 * time.Second
)

// Pseudo-encodings a viewer may ask for.
const (
	// EncodingCursor is the rich cursor pseudo-encoding (RFC 6143
	// section 7.8.1): a control viewer that takes it gets the pointer's
	// shape once and draws it where its own pointer is.
	EncodingCursor int32 = -239
)

// serveTile is the diff's tile edge; dirty tiles of a row go out as one
// rectangle per run, so a rectangle is at most serveTile high.
const serveTile = 64

// pointerPoll is how often a waiting viewer's session looks whether the
// pointer it draws has moved (a move is no framebuffer update).
const pointerPoll = 100 * time.Millisecond

// PixelFormat is an RFB pixel format (RFC 6143 section 7.4); Serve speaks
// true colour with 8, 16 or 32 bits per pixel.
type PixelFormat struct {
	BPP, Depth                      uint8
	BigEndian, TrueColour           bool
	RedMax, GreenMax, BlueMax       uint16
	RedShift, GreenShift, BlueShift uint8
}

// serverFormat is ServerInit's format (the one this package's client asks
// for): 32 bpp, depth 24, little-endian, red at 16, green 8, blue 0.
var serverFormat = PixelFormat{BPP: 32, Depth: 24, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 16, GreenShift: 8}

func (f PixelFormat) bytes() []byte {
	b := []byte{f.BPP, f.Depth, 0, 0, 0, 0, 0, 0, 0, 0, f.RedShift, f.GreenShift, f.BlueShift, 0, 0, 0}
	if f.BigEndian {
		b[2] = 1
	}
	if f.TrueColour {
		b[3] = 1
	}
	binary.BigEndian.PutUint16(b[4:], f.RedMax)
	binary.BigEndian.PutUint16(b[6:], f.GreenMax)
	binary.BigEndian.PutUint16(b[8:], f.BlueMax)
	return b
}

func parsePixelFormat(b []byte) (PixelFormat, error) {
	f := PixelFormat{BPP: b[0], Depth: b[1], BigEndian: b[2] != 0, TrueColour: b[3] != 0,
		RedMax: binary.BigEndian.Uint16(b[4:]), GreenMax: binary.BigEndian.Uint16(b[6:]), BlueMax: binary.BigEndian.Uint16(b[8:]),
		RedShift: b[10], GreenShift: b[11], BlueShift: b[12]}
	if !f.TrueColour {
		return f, errors.New("rfb: a colour-map pixel format is not served (true colour only)")
	}
	if f.BPP != 8 && f.BPP != 16 && f.BPP != 32 {
		return f, fmt.Errorf("rfb: %d bits per pixel is not served (8, 16 or 32)", f.BPP)
	}
	for _, c := range []struct {
		max   uint16
		shift uint8
	}{{f.RedMax, f.RedShift}, {f.GreenMax, f.GreenShift}, {f.BlueMax, f.BlueShift}} {
		if c.max == 0 || c.max&(c.max+1) != 0 || uint64(c.max)<<c.shift >= 1<<f.BPP {
			return f, errors.New("rfb: a colour's max is not 2^n-1 inside the pixel")
		}
	}
	return f, nil
}

// pixel is the value of an RGB colour in f.
func (f PixelFormat) pixel(r, g, b byte) uint32 {
	if f.RedMax == 255 && f.GreenMax == 255 && f.BlueMax == 255 {
		return uint32(r)<<f.RedShift | uint32(g)<<f.GreenShift | uint32(b)<<f.BlueShift
	}
	sc := func(v byte, max uint16) uint32 { return (uint32(v)*uint32(max) + 127) / 255 }
	return sc(r, f.RedMax)<<f.RedShift | sc(g, f.GreenMax)<<f.GreenShift | sc(b, f.BlueMax)<<f.BlueShift
}

// padding is the bits of a 32-bit pixel that no colour uses, which
// convert sets to ones. RFC 6143 leaves their value to the server and
// clients ignore them, except noVNC 1.3's Raw decoder (Debian 12's, the
// dashboard's): it makes a rectangle opaque by writing alpha at the head
// of its receive queue rather than where the rectangle's pixels are, so
// the padding byte is the alpha of most rectangles and zero padding draws
// them transparent.
func (f PixelFormat) padding() uint32 {
	if f.BPP != 32 {
		return 0
	}
	return ^(uint32(f.RedMax)<<f.RedShift | uint32(f.GreenMax)<<f.GreenShift | uint32(f.BlueMax)<<f.BlueShift)
}

// cpixel says which bytes of a pixel's encoding ZRLE sends (RFC 6143
// section 7.7.6): 3 of a 32-bit pixel whose colours fit in 3 bytes, else
// all of them. off is where they start in the pixel's bytes.
func (f PixelFormat) cpixel() (off, n int) {
	n = int(f.BPP) / 8
	if f.BPP != 32 || f.Depth > 24 {
		return 0, n
	}
	used := uint32(f.RedMax)<<f.RedShift | uint32(f.GreenMax)<<f.GreenShift | uint32(f.BlueMax)<<f.BlueShift
	switch {
	case used&0xff000000 == 0: // the low three bytes
		if f.BigEndian {
			return 1, 3
		}
		return 0, 3
	case used&0xff == 0: // the high three bytes
		if f.BigEndian {
			return 0, 3
		}
		return 1, 3
	}
	return 0, n
}

// put writes v as f's bytes into dst.
func (f PixelFormat) put(dst []byte, v uint32) {
	switch f.BPP {
	case 8:
		dst[0] = byte(v)
	case 16:
		if f.BigEndian {
			binary.BigEndian.PutUint16(dst, uint16(v))
		} else {
			binary.LittleEndian.PutUint16(dst, uint16(v))
		}
	default:
		if f.BigEndian {
			binary.BigEndian.PutUint32(dst, v)
		} else {
			binary.LittleEndian.PutUint32(dst, v)
		}
	}
}

// viewer is one Serve session's state shared by its reader and writer.
type viewer struct {
	mu sync.Mutex
	// pf and encodings are the viewer's; formatChanged asks the writer to
	// send the whole screen in the new format.
	pf            PixelFormat
	zrle, resize  bool
	cursor        bool
	formatChanged bool
	// pending says the viewer asked for an update; full that one of its
	// requests was not incremental.
	pending, full bool
	wake          chan struct{}
}

func (v *viewer) poke() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// Serve answers one viewer on conn as an RFB 3.8 server (3.3 and 3.7
// viewers too; security None: whoever reaches conn was already allowed
// by the caller) from src's framebuffer, until ctx ends, the viewer
// leaves or errs, or src ends. It closes conn.
//
// Updates follow the viewer's requests: the parts of the screen that
// changed since the viewer's last update (64-pixel tiles compared), in
// ZRLE when the viewer takes it, else Raw, in the viewer's true-colour
// pixel format. The pointer is drawn into the frames, except for a control
// viewer that takes the Cursor pseudo-encoding (it gets the shape and
// draws its own pointer). Key and pointer events reach src's session only
// while o.Control says so. A viewer's memory is bounded: two frames of
// the screen (4·w·h bytes each), one tile row's compressed rectangle, the
// zlib state and fixed buffers; its messages are bounded (cut text ≤
// o.MaxCutText, an unknown message ends the session).
func Serve(ctx context.Context, conn net.Conn, src Source, o ServeOptions) error {
	defer conn.Close()
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxCutText <= 0 {
		o.MaxCutText = DefaultMaxCutText
	}
	if o.Wait <= 0 {
		o.Wait = DefaultServeWait
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	br := bufio.NewReaderSize(conn, 4<<10)
	c, err := serverHandshake(ctx, conn, br, src, o)
	if err != nil {
		return err
	}
	// No update goes out before the viewer asks for one (its first
	// request follows its pixel format and encodings).
	v := &viewer{pf: serverFormat, full: true, wake: make(chan struct{}, 1)}
	rerr := make(chan error, 1)
	go func() {
		// The error is sent before ctx is cancelled: a writer that fails
		// because the reader ended finds it.
		rerr <- v.read(br, src, o)
		cancel()
	}()
	werr := v.write(ctx, conn, src, c, o)
	if parent.Err() != nil {
		return nil
	}
	select {
	case err := <-rerr:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	default:
	}
	return werr
}

// serverHandshake speaks the server's side up to ServerInit, within
// o.Wait, and returns the upstream session whose size it announced.
func serverHandshake(ctx context.Context, conn net.Conn, br *bufio.Reader, src Source, o ServeOptions) (*Client, error) {
	conn.SetDeadline(time.Now().Add(o.Wait))
	defer conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "RFB 003.008\n"); err != nil {
		return nil, fmt.Errorf("rfb serve: write version: %w", err)
	}
	var ver [12]byte
	if _, err := io.ReadFull(br, ver[:]); err != nil {
		return nil, fmt.Errorf("rfb serve: read version: %w", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(ver[:]), "RFB %03d.%03d\n", &major, &minor); err != nil || major != 3 {
		return nil, fmt.Errorf("rfb serve: not an RFB 3.x viewer (%q)", ver[:])
	}
	if minor < 7 {
		if _, err := conn.Write([]byte{0, 0, 0, securityNone}); err != nil {
			return nil, fmt.Errorf("rfb serve: write security: %w", err)
		}
	} else {
		if _, err := conn.Write([]byte{1, securityNone}); err != nil {
			return nil, fmt.Errorf("rfb serve: write security: %w", err)
		}
		b, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("rfb serve: read security: %w", err)
		}
		if b != securityNone {
			return nil, fmt.Errorf("rfb serve: the viewer chose security type %d, not None", b)
		}
		if minor >= 8 {
			if _, err := conn.Write([]byte{0, 0, 0, 0}); err != nil {
				return nil, fmt.Errorf("rfb serve: write security result: %w", err)
			}
		}
	}
	if _, err := br.ReadByte(); err != nil { // ClientInit's shared flag: every viewer shares
		return nil, fmt.Errorf("rfb serve: read client init: %w", err)
	}
	c, err := waitClient(ctx, src, o.Wait)
	if err != nil {
		return nil, err
	}
	w, h := c.Size()
	msg := []byte{byte(w >> 8), byte(w), byte(h >> 8), byte(h)}
	msg = append(msg, serverFormat.bytes()...)
	name := o.Name
	if len(name) > 255 {
		name = name[:255]
	}
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(name)))
	msg = append(msg, name...)
	if _, err := conn.Write(msg); err != nil {
		return nil, fmt.Errorf("rfb serve: write server init: %w", err)
	}
	return c, nil
}

// waitClient is src's live session, waiting for one up to wait.
func waitClient(ctx context.Context, src Source, wait time.Duration) (*Client, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		if c := src.Client(); c != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-src.Done():
			return nil, errors.New("rfb serve: the screen's stream ended")
		case <-deadline.C:
			return nil, errors.New("rfb serve: the screen's stream is not live")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// read handles the viewer's messages until it errs.
func (v *viewer) read(br *bufio.Reader, src Source, o ServeOptions) error {
	var b [20]byte
	for {
		t, err := br.ReadByte()
		if err != nil {
			return err
		}
		switch t {
		case 0: // SetPixelFormat
			if _, err := io.ReadFull(br, b[:19]); err != nil {
				return err
			}
			pf, err := parsePixelFormat(b[3:19])
			if err != nil {
				return err
			}
			v.mu.Lock()
			v.pf, v.formatChanged = pf, true
			v.mu.Unlock()
		case 2: // SetEncodings
			if _, err := io.ReadFull(br, b[:3]); err != nil {
				return err
			}
			n := int(binary.BigEndian.Uint16(b[1:]))
			var zrle, resize, cursor bool
			for i := 0; i < n; i++ {
				if _, err := io.ReadFull(br, b[:4]); err != nil {
					return err
				}
				switch int32(binary.BigEndian.Uint32(b[:4])) {
				case EncodingZRLE:
					zrle = true
				case EncodingDesktopSize:
					resize = true
				case EncodingCursor:
					cursor = true
				}
			}
			v.mu.Lock()
			v.zrle, v.resize, v.cursor, v.formatChanged = zrle, resize, cursor, true
			v.mu.Unlock()
		case 3: // FramebufferUpdateRequest
			if _, err := io.ReadFull(br, b[:9]); err != nil {
				return err
			}
			v.mu.Lock()
			v.pending = true
			v.full = v.full || b[0] == 0
			v.mu.Unlock()
			v.poke()
		case 4: // KeyEvent
			if _, err := io.ReadFull(br, b[:7]); err != nil {
				return err
			}
			if c := src.Client(); c != nil && o.Control != nil && o.Control() {
				if err := c.Key(binary.BigEndian.Uint32(b[3:7]), b[0] != 0); err != nil {
					return fmt.Errorf("rfb serve: forward a key: %w", err)
				}
			}
		case 5: // PointerEvent
			if _, err := io.ReadFull(br, b[:5]); err != nil {
				return err
			}
			if c := src.Client(); c != nil && o.Control != nil && o.Control() {
				x, y := int(binary.BigEndian.Uint16(b[1:])), int(binary.BigEndian.Uint16(b[3:]))
				w, h := c.Size()
				if err := c.Pointer(min(x, max(w-1, 0)), min(y, max(h-1, 0)), b[0]); err != nil {
					return fmt.Errorf("rfb serve: forward the pointer: %w", err)
				}
			}
		case 6: // ClientCutText: dropped
			if _, err := io.ReadFull(br, b[:7]); err != nil {
				return err
			}
			n := binary.BigEndian.Uint32(b[3:7])
			if uint64(n) > uint64(o.MaxCutText) {
				return fmt.Errorf("rfb serve: cut text of %d bytes over the %d byte limit", n, o.MaxCutText)
			}
			if _, err := br.Discard(int(n)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("rfb serve: unknown message type %d from the viewer", t)
		}
	}
}

// writer is the writer's reusable state.
type writer struct {
	bw   *bufio.Writer
	zbuf bytes.Buffer
	zw   *zlib.Writer
	pix  []byte // one row or tile in the viewer's format
}

// write sends updates as the viewer asks for them until ctx ends.
func (v *viewer) write(ctx context.Context, conn net.Conn, src Source, c *Client, o ServeOptions) error {
	wr := &writer{bw: bufio.NewWriterSize(conn, 64<<10)}
	var sent, cur *image.RGBA
	var drawn image.Point // where the pointer was drawn into sent
	cursorSent := false
	tick := time.NewTicker(pointerPoll)
	defer tick.Stop()
	for {
		v.mu.Lock()
		pending, full := v.pending, v.full || v.formatChanged
		pf, zrle, resize, cursor := v.pf, v.zrle, v.resize, v.cursor && o.Control != nil
		v.mu.Unlock()
		if !pending {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-v.wake:
			}
			continue
		}
		if c == nil {
			var err error
			if c, err = waitClient(ctx, src, time.Hour); err != nil {
				return err
			}
			full = true
		}
		if live := src.Client(); live != c {
			// The upstream was redialled (or is down): show the new one.
			c = nil
			if live == nil {
				continue
			}
			c, full = live, true
		}
		changed := c.Changed()
		var f Frame
		cur, f = c.Snapshot(cur)
		p, known := c.PointerPos()
		if known && !cursor {
			DrawPointer(cur, p)
		}
		resized := sent != nil && sent.Rect != cur.Rect
		if resized && !resize {
			return errors.New("rfb serve: the screen's size changed and the viewer cannot follow")
		}
		var rects []image.Rectangle
		if full || sent == nil || resized {
			rects = rowRects(cur.Rect, nil, nil)
		} else {
			rects = rowRects(cur.Rect, sent, cur)
		}
		sendCursor := cursor && !cursorSent
		// A session's framebuffer is black until its first update: wait
		// for it.
		if f.Seq == 0 || len(rects) == 0 && !sendCursor {
			// Nothing new: wait for an update, the pointer, or the viewer.
			for waiting := true; waiting; {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-src.Done():
					return errors.New("rfb serve: the screen's stream ended")
				case <-changed:
					waiting = false
				case <-c.Done():
					waiting = false
				case <-v.wake:
					waiting = false
				case <-tick.C:
					if q, ok := c.PointerPos(); ok && !cursor && q != drawn {
						waiting = false
					}
				}
			}
			continue
		}
		v.mu.Lock()
		v.pending, v.full, v.formatChanged = false, false, false
		v.mu.Unlock()
		conn.SetWriteDeadline(time.Now().Add(o.WriteTimeout))
		if err := wr.update(cur, rects, pf, zrle, resized, sendCursor); err != nil {
			return fmt.Errorf("rfb serve: write an update: %w", err)
		}
		if sendCursor {
			cursorSent = true
		}
		drawn = p
		sent, cur = cur, sent
	}
}

// rowRects are the rectangles to send: for each row of tiles, one per
// run of tiles that differ between a and b (every tile when a is nil).
func rowRects(r image.Rectangle, a, b *image.RGBA) []image.Rectangle {
	var out []image.Rectangle
	for y := r.Min.Y; y < r.Max.Y; y += serveTile {
		y1 := min(y+serveTile, r.Max.Y)
		run := -1
		for x := r.Min.X; x < r.Max.X; x += serveTile {
			x1 := min(x+serveTile, r.Max.X)
			if a == nil || tileDiffers(a, b, image.Rect(x, y, x1, y1)) {
				if run < 0 {
					run = x
				}
				continue
			}
			if run >= 0 {
				out = append(out, image.Rect(run, y, x, y1))
				run = -1
			}
		}
		if run >= 0 {
			out = append(out, image.Rect(run, y, r.Max.X, y1))
		}
	}
	return out
}

func tileDiffers(a, b *image.RGBA, t image.Rectangle) bool {
	for y := t.Min.Y; y < t.Max.Y; y++ {
		i := a.PixOffset(t.Min.X, y)
		j := b.PixOffset(t.Min.X, y)
		n := 4 * t.Dx()
		if !bytes.Equal(a.Pix[i:i+n], b.Pix[j:j+n]) {
			return true
		}
	}
	return false
}

// update writes one FramebufferUpdate of rects of img (after a DesktopSize
// rectangle when resized, and the pointer's shape when sendCursor).
func (wr *writer) update(img *image.RGBA, rects []image.Rectangle, pf PixelFormat, zrle, resized, sendCursor bool) error {
	n := len(rects)
	if resized {
		n++
	}
	if sendCursor {
		n++
	}
	hdr := []byte{0, 0, byte(n >> 8), byte(n)}
	if _, err := wr.bw.Write(hdr); err != nil {
		return err
	}
	rectHdr := func(r image.Rectangle, enc int32) error {
		var h [12]byte
		binary.BigEndian.PutUint16(h[0:], uint16(r.Min.X))
		binary.BigEndian.PutUint16(h[2:], uint16(r.Min.Y))
		binary.BigEndian.PutUint16(h[4:], uint16(r.Dx()))
		binary.BigEndian.PutUint16(h[6:], uint16(r.Dy()))
		binary.BigEndian.PutUint32(h[8:], uint32(enc))
		_, err := wr.bw.Write(h[:])
		return err
	}
	if resized {
		if err := rectHdr(image.Rect(0, 0, img.Rect.Dx(), img.Rect.Dy()), EncodingDesktopSize); err != nil {
			return err
		}
	}
	if sendCursor {
		if err := wr.cursorShape(pf, rectHdr); err != nil {
			return err
		}
	}
	for _, r := range rects {
		enc := EncodingRaw
		if zrle {
			enc = EncodingZRLE
		}
		if err := rectHdr(r, enc); err != nil {
			return err
		}
		var err error
		if zrle {
			err = wr.zrleRect(img, r, pf)
		} else {
			err = wr.rawRect(img, r, pf)
		}
		if err != nil {
			return err
		}
	}
	return wr.bw.Flush()
}

// convert appends the pixels of img in r, row by row, in pf, taking only
// the bytes [off, off+n) of each pixel.
func convert(dst []byte, img *image.RGBA, r image.Rectangle, pf PixelFormat, off, n int) []byte {
	bpp := int(pf.BPP) / 8
	var px [4]byte
	pad := pf.padding()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := img.Pix[img.PixOffset(r.Min.X, y):img.PixOffset(r.Max.X, y)]
		for i := 0; i < len(row); i += 4 {
			pf.put(px[:bpp], pad|pf.pixel(row[i], row[i+1], row[i+2]))
			dst = append(dst, px[off:off+n]...)
		}
	}
	return dst
}

func (wr *writer) rawRect(img *image.RGBA, r image.Rectangle, pf PixelFormat) error {
	bpp := int(pf.BPP) / 8
	for y := r.Min.Y; y < r.Max.Y; y++ {
		wr.pix = convert(wr.pix[:0], img, image.Rect(r.Min.X, y, r.Max.X, y+1), pf, 0, bpp)
		if _, err := wr.bw.Write(wr.pix); err != nil {
			return err
		}
	}
	return nil
}

// zrleRect writes r (at most serveTile high) as ZRLE: each 64x64 tile
// solid (subencoding 1) when it is one colour, else raw CPIXELs
// (subencoding 0), through the session's one zlib stream.
func (wr *writer) zrleRect(img *image.RGBA, r image.Rectangle, pf PixelFormat) error {
	if wr.zw == nil {
		var err error
		if wr.zw, err = zlib.NewWriterLevel(&wr.zbuf, zlib.BestSpeed); err != nil {
			return err
		}
	}
	wr.zbuf.Reset()
	off, n := pf.cpixel()
	for ty := r.Min.Y; ty < r.Max.Y; ty += zrleTile {
		for tx := r.Min.X; tx < r.Max.X; tx += zrleTile {
			t := image.Rect(tx, ty, min(tx+zrleTile, r.Max.X), min(ty+zrleTile, r.Max.Y))
			if solidTile(img, t) {
				wr.pix = append(wr.pix[:0], 1)
				wr.pix = convert(wr.pix, img, image.Rect(t.Min.X, t.Min.Y, t.Min.X+1, t.Min.Y+1), pf, off, n)
			} else {
				wr.pix = append(wr.pix[:0], 0)
				wr.pix = convert(wr.pix, img, t, pf, off, n)
			}
			if _, err := wr.zw.Write(wr.pix); err != nil {
				return err
			}
		}
	}
	if err := wr.zw.Flush(); err != nil {
		return err
	}
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(wr.zbuf.Len()))
	if _, err := wr.bw.Write(l[:]); err != nil {
		return err
	}
	_, err := wr.bw.Write(wr.zbuf.Bytes())
	return err
}

func solidTile(img *image.RGBA, t image.Rectangle) bool {
	first := img.Pix[img.PixOffset(t.Min.X, t.Min.Y):]
	for y := t.Min.Y; y < t.Max.Y; y++ {
		row := img.Pix[img.PixOffset(t.Min.X, y):img.PixOffset(t.Max.X, y)]
		for i := 0; i < len(row); i += 4 {
			if row[i] != first[0] || row[i+1] != first[1] || row[i+2] != first[2] {
				return false
			}
		}
	}
	return true
}

// cursorShape writes the Cursor pseudo-rectangle: the arrow DrawPointer
// draws, its hotspot at its tip.
func (wr *writer) cursorShape(pf PixelFormat, rectHdr func(image.Rectangle, int32) error) error {
	w, h := arrowSize()
	if err := rectHdr(image.Rect(0, 0, w, h), EncodingCursor); err != nil {
		return err
	}
	shape := image.NewRGBA(image.Rect(0, 0, w, h))
	DrawPointer(shape, image.Point{})
	bpp := int(pf.BPP) / 8
	wr.pix = convert(wr.pix[:0], shape, shape.Rect, pf, 0, bpp)
	stride := (w + 7) / 8
	mask := make([]byte, stride*h)
	for y, row := range arrow {
		for x, ch := range row {
			if ch == '#' || ch == '.' {
				mask[y*stride+x/8] |= 0x80 >> (x % 8)
			}
		}
	}
	wr.pix = append(wr.pix, mask...)
	_, err := wr.bw.Write(wr.pix)
	return err
}

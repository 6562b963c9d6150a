package rfb

import (
	"bufio"
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

// ErrClosed is Err's answer after Close.
var ErrClosed = errors.New("rfb: closed")

// Frame identifies the last FramebufferUpdate fully applied.
type Frame struct {
	// Seq counts the updates applied since the handshake.
	Seq uint64
	// At is when that update was applied.
	At time.Time
}

// Client is one RFB session. Its read loop applies updates to the
// framebuffer and asks for the next one after each, so the framebuffer stays
// current without callers asking.
type Client struct {
	conn net.Conn
	br   *bufio.Reader
	o    Options

	// wmu guards writes to conn, so each message goes out whole and
	// messages go out in call order.
	wmu sync.Mutex

	// mu guards fb, frame, written, answered, changed and err.
	mu sync.Mutex
	fb *image.RGBA
	// frame is the last update applied.
	frame Frame
	// written counts update requests written to the server.
	written uint64
	// answered is written's value when the last applied update's header
	// was read: that update answers every request up to it.
	answered uint64
	// changed is closed and replaced after each applied update.
	changed chan struct{}
	err     error
	// pointer is where the pointer is: the last PointerPos the server
	// sent or the last Pointer this client wrote, whichever came later.
	pointer      image.Point
	pointerKnown bool
	// movedAt is when this client last wrote a pointer event: for
	// ownMoveWins after it, a server position other than ours is one the
	// server read before our event (x11vnc reports the pointer it polled)
	// and is ignored.
	movedAt time.Time
	// inputAt is when this client last wrote an input event (pointer,
	// key or cut text).
	inputAt time.Time

	// done is closed when the read loop has ended.
	done chan struct{}

	// Read-loop state, touched by the read loop only.
	payload []byte // one message's payload, at most MaxMessage
	row     []byte // one raw row
	zsrc    zlibSource
	zr      io.ReadCloser
	tile    []byte // one decoded ZRLE tile, RGBA
	cpix    []byte // one ZRLE tile's raw CPIXELs
	// seen counts rectangles by encoding and ZRLE tiles by subencoding, for
	// tests; read them only after Done.
	seen struct {
		rects   map[int32]int
		zrleSub [256]int
	}
}

func newClient(conn net.Conn, br *bufio.Reader, o Options, w, h int) *Client {
	c := &Client{
		conn:    conn,
		br:      br,
		o:       o,
		fb:      image.NewRGBA(image.Rect(0, 0, w, h)),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.seen.rects = make(map[int32]int)
	return c
}

// Size is the framebuffer's size.
func (c *Client) Size() (w, h int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fb.Rect.Dx(), c.fb.Rect.Dy()
}

// Snapshot copies the framebuffer into dst, or into a new image when dst is
// nil or too small, and says which update it shows. Rectangles of an update
// still being read may already be in it: a snapshot is never older than its
// Frame.
func (c *Client) Snapshot(dst *image.RGBA) (*image.RGBA, Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.fb.Rect
	n := len(c.fb.Pix)
	if dst == nil || cap(dst.Pix) < n {
		dst = image.NewRGBA(r)
	} else {
		dst.Pix = dst.Pix[:n]
		dst.Stride = c.fb.Stride
		dst.Rect = r
	}
	copy(dst.Pix, c.fb.Pix)
	return dst, c.frame
}

// Frame says which update the framebuffer shows.
func (c *Client) Frame() Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frame
}

// InputAt is when this client last wrote an input event (zero if never):
// whoever wrote it, an update applied before then may not show it.
func (c *Client) InputAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inputAt
}

// Refresh asks for the whole screen and waits until an update that answers
// the request (its header read after the request was written) is applied.
// Besides the incremental request it asks for one pixel non-incrementally,
// because servers answer an incremental request only once something changed
// and a still screen must not hang the caller. A server that finds changes
// by polling the screen (x11vnc) may answer before it noticed a change made
// just before the request; TestRefreshShowsNewContent measures how often.
func (c *Client) Refresh(ctx context.Context) (Frame, error) {
	w, h := c.Size()
	mark, err := c.request(true, 0, 0, w, h)
	if err != nil {
		return Frame{}, err
	}
	if w > 0 && h > 0 {
		if mark, err = c.request(false, 0, 0, 1, 1); err != nil {
			return Frame{}, err
		}
	}
	for {
		c.mu.Lock()
		if c.answered >= mark {
			f := c.frame
			c.mu.Unlock()
			return f, nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Frame{}, fmt.Errorf("rfb refresh: %w", context.Cause(ctx))
		case <-c.done:
			return Frame{}, c.Err()
		}
	}
}

// Pointer sends a pointer event: position and the mask of buttons held
// (bit 0 left, 1 middle, 2 right, 3/4 wheel up/down).
func (c *Client) Pointer(x, y int, buttons uint8) error {
	if x < 0 || y < 0 || x > 0xffff || y > 0xffff {
		return fmt.Errorf("rfb: pointer %d,%d out of range", x, y)
	}
	if err := c.write([]byte{5, buttons, byte(x >> 8), byte(x), byte(y >> 8), byte(y)}); err != nil {
		return err
	}
	c.mu.Lock()
	c.pointer, c.pointerKnown, c.movedAt = image.Pt(x, y), true, time.Now()
	c.inputAt = c.movedAt
	c.mu.Unlock()
	return nil
}

// SeedPointer sets where the pointer is when the session does not know it
// yet (nothing moved it since the handshake): p must have been read after
// the handshake, since any later move reaches the session itself.
func (c *Client) SeedPointer(p image.Point) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pointerKnown {
		c.pointer, c.pointerKnown = p, true
	}
}

// ownMoveWins is how long after a Pointer the server's differing position
// reports are taken for stale ones.
const ownMoveWins = time.Second

// PointerPos is where the pointer is, as far as this session knows: the
// last pointer-position update the server sent (with EncodingPointerPos
// requested) or the last Pointer written, whichever came later (a server
// report within ownMoveWins of our own move counts only if it agrees);
// ok is false before either.
func (c *Client) PointerPos() (p image.Point, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pointer, c.pointerKnown
}

// Key sends a key event for an X keysym.
func (c *Client) Key(keysym uint32, down bool) error {
	msg := []byte{4, 0, 0, 0, 0, 0, 0, 0}
	if down {
		msg[1] = 1
	}
	binary.BigEndian.PutUint32(msg[4:], keysym)
	return c.writeInput(msg)
}

// CutText sets the server's clipboard. RFB carries Latin-1 only: other
// characters become '?'.
func (c *Client) CutText(text string) error {
	b := make([]byte, 8, 8+len(text))
	b[0] = 6
	n := 0
	for _, r := range text {
		if r > 0xff {
			r = '?'
		}
		b = append(b, byte(r))
		n++
	}
	if n > c.o.MaxMessage {
		return fmt.Errorf("rfb: cut text of %d bytes over the %d byte limit", n, c.o.MaxMessage)
	}
	binary.BigEndian.PutUint32(b[4:], uint32(n))
	return c.writeInput(b)
}

// writeInput writes an input message and notes when (InputAt).
func (c *Client) writeInput(msg []byte) error {
	err := c.write(msg)
	c.mu.Lock()
	c.inputAt = time.Now()
	c.mu.Unlock()
	return err
}

// Changed is closed when the next update has been applied.
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Done is closed when the session has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err says why the session ended, or nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the session and waits for its read loop. Safe to call twice.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.done
	return nil
}

// fail ends the session with err unless it already ended.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.conn.Close()
}

// write sends one whole message within the write timeout. A failed write
// ends the session: the server may have half a message.
func (c *Client) write(msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(msg)
}

func (c *Client) writeLocked(msg []byte) error {
	if err := c.Err(); err != nil {
		return err
	}
	c.conn.SetWriteDeadline(time.Now().Add(c.o.WriteTimeout))
	if _, err := c.conn.Write(msg); err != nil {
		err = fmt.Errorf("rfb: write: %w", err)
		c.fail(err)
		return err
	}
	return nil
}

// request writes a FramebufferUpdateRequest and returns its number: an
// update whose header is read after it answers it.
func (c *Client) request(incremental bool, x, y, w, h int) (uint64, error) {
	msg := []byte{3, 0, byte(x >> 8), byte(x), byte(y >> 8), byte(y), byte(w >> 8), byte(w), byte(h >> 8), byte(h)}
	if incremental {
		msg[1] = 1
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writeLocked(msg); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written++
	return c.written, nil
}

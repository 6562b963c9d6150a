package desktop

import (
	"context"
	"fmt"
	"image"
	"net"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/apps/worker/internal/rfb"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/jpegenc"
)

// HeldStreamEnv turns the held stream off for the machines the vendor
// providers make ("0"); it is on by default.
const HeldStreamEnv = "WORKER_DESKTOP_HELD_STREAM"

// heldFresh is how long after an update the framebuffer is read without a
// refresh (when no input came since): x11vnc pushes changes as it finds
// them, and a refresh at least this often bounds what a lost push costs.
const heldFresh = time.Second

// heldRefresh is Options.HeldRefresh's default: the wait for the
// stream's answer to one refresh, past which the observation takes the
// command path.
const heldRefresh = 2 * time.Second

// holdStream starts the worker's own RFB session to screen s's control
// x11vnc (slot's control port, through the backend's port URL), kept
// current and redialled by rfb.Stream, so an observation is read from the
// worker's memory instead of a screenshot command in the sandbox.
func (m *Machine) holdStream(s *screen, slot int) {
	if !m.o.HeldStream {
		return
	}
	port := m.ctlPort(slot)
	dial := func(ctx context.Context) (net.Conn, error) {
		base, hc, err := m.b.PortURL(ctx, port)
		if err != nil {
			// The backend's errors may quote its routing URL and token.
			return nil, fmt.Errorf("no URL for the screen's vnc port %d", port)
		}
		ws, err := dialWebsockify(ctx, base, hc)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("dial the screen's vnc port %d: %w", port, ctx.Err())
			}
			return nil, fmt.Errorf("dial the screen's vnc port %d failed", port)
		}
		ws.SetReadLimit(rfb.DefaultMaxMessage + 64)
		// The connection lives as long as the session, not the dial.
		return websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary), nil
	}
	st := rfb.Hold(dial, rfb.Options{}, m.o.Log.With().Str("screen", s.id).Logger())
	m.mu.Lock()
	old := s.stream
	s.stream = st
	m.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// dropStream ends s's held stream, if any, and frees its JPEG encoder.
func (m *Machine) dropStream(s *screen) {
	m.mu.Lock()
	st := s.stream
	s.stream = nil
	m.mu.Unlock()
	if st != nil {
		st.Close()
	}
	s.held.close()
}

// heldJPEG is a screen's JPEG of its held stream: the framebuffer's copy
// and the libjpeg-turbo encoder, both kept from one observation to the
// next (an encoder allocates its worst-case output buffer), and the last
// JPEG made, by session, update and pointer.
type heldJPEG struct {
	// mu orders an observation's encode and dropStream's close.
	mu      sync.Mutex
	enc     jpegenc.Encoder
	shot    *image.RGBA
	c       *rfb.Client
	seq     uint64
	pointer image.Point
	jpeg    []byte
}

// frame is c's framebuffer with the pointer drawn at p as a quality-72
// JPEG: the last one made when neither the update nor p changed since.
func (h *heldJPEG) frame(c *rfb.Client, p image.Point) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.jpeg != nil && h.c == c && h.seq == c.Frame().Seq && h.pointer == p {
		return h.jpeg, nil
	}
	img, fr := c.Snapshot(h.shot)
	h.shot = img
	rfb.DrawPointer(img, p)
	if h.enc == nil {
		h.enc = jpegenc.New(jpegenc.RGBX)
	}
	b, err := h.enc.Encode(img.Pix, img.Rect.Dx(), img.Rect.Dy(), img.Stride, 72)
	if err != nil {
		return nil, err
	}
	h.c, h.seq, h.pointer, h.jpeg = c, fr.Seq, p, b
	return b, nil
}

// close frees the encoder and forgets the frames.
func (h *heldJPEG) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.enc != nil {
		h.enc.Close()
	}
	h.enc, h.shot, h.c, h.jpeg = nil, nil, nil, nil
}

// streamFrame is s's screen from its held stream, the pointer drawn in,
// as a quality-72 JPEG. The frame is never older than the settle after
// the last input: when no update was applied since the end of the last
// act's settle (s.settledAt) and since the session's last input event (a
// person's, through a control link, included), it first asks for a
// refresh and waits for its answer; otherwise the framebuffer is already
// that current and is read as it is, for heldFresh after that update.
// The JPEG of a frame and pointer
// already encoded is reused. ok is false when there is no live stream,
// the stream does not know the pointer yet, or the refresh was not
// answered in time: the caller takes the command path then.
func (m *Machine) streamFrame(ctx context.Context, s *screen) (f frame, ok bool) {
	m.mu.Lock()
	st := s.stream
	m.mu.Unlock()
	if st == nil {
		return frame{}, false
	}
	c := st.Client()
	if c == nil {
		return frame{}, false
	}
	if cur := c.Frame(); cur.Seq == 0 || !cur.At.After(s.settledAt) || !cur.At.After(c.InputAt()) || time.Since(cur.At) > heldFresh {
		rctx, cancel := context.WithTimeout(ctx, m.o.HeldRefresh)
		_, err := c.Refresh(rctx)
		cancel()
		if err != nil {
			return frame{}, false
		}
		m.heldRefreshes.Add(1)
	}
	p, known := c.PointerPos()
	if !known {
		// Nothing moved the pointer since the session began: ask X once.
		q, err := m.queryPointer(ctx, s)
		if err != nil {
			return frame{}, false
		}
		c.SeedPointer(q)
		p, _ = c.PointerPos()
	}
	b, err := s.held.frame(c, p)
	if err != nil {
		return frame{}, false
	}
	m.heldFrames.Add(1)
	return frame{jpeg: b, pointer: shared.Point{X: p.X, Y: p.Y}}, true
}

// StreamState is screen id's held stream state ("" when it has none) and
// why its last session ended.
func (m *Machine) StreamState(id string) (state, lastErr string) {
	m.mu.Lock()
	s := m.screens[id]
	var st *rfb.Stream
	if s != nil {
		st = s.stream
	}
	m.mu.Unlock()
	if st == nil {
		return "", ""
	}
	return st.State()
}

// queryPointer is where X has s's pointer (xdotool through a command).
func (m *Machine) queryPointer(ctx context.Context, s *screen) (image.Point, error) {
	m.mu.Lock()
	slot := s.slot
	m.mu.Unlock()
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"xdotool", "getmouselocation", "--shell"}, User: m.o.User, Cwd: m.o.Home, Env: m.displayEnv(slot)})
	if err != nil {
		return image.Point{}, err
	}
	if r.ExitCode != 0 {
		return image.Point{}, fmt.Errorf("xdotool getmouselocation exited %d: %s", r.ExitCode, firstLine(r.Stderr))
	}
	p, ok := mouseShell(r.Stdout)
	if !ok {
		return image.Point{}, fmt.Errorf("no pointer in xdotool's answer %q", firstLine(r.Stdout))
	}
	return image.Pt(p.X, p.Y), nil
}

// HeldCounts are how many observations came from held streams and how many
// actions went through them, since New (for tests and benchmarks).
func (m *Machine) HeldCounts() (frames, inputs int64) {
	return m.heldFrames.Load(), m.heldInputs.Load()
}

// HeldRefreshes is how many held observations waited for a refresh (the
// others read a framebuffer already newer than the last input), since New.
func (m *Machine) HeldRefreshes() int64 { return m.heldRefreshes.Load() }

// RFB pointer button bits.
const (
	rfbLeft, rfbMiddle, rfbRight = 1, 2, 4
	rfbWheelUp, rfbWheelDown     = 8, 16
	rfbWheelLeft, rfbWheelRight  = 32, 64
)

// streamInput performs a on s's held stream as RFB messages, in order, as
// xdotool would (input.go's timings): pointer actions, keypresses, and
// type when every character of the chunk is printable ASCII, "\n" or
// "\t" (other text goes to xdotool, which types any Unicode). handled is
// false without a live stream, or for text it leaves to xdotool.
func (m *Machine) streamInput(ctx context.Context, s *screen, a shared.Action) (handled bool, err error) {
	defer func() {
		if handled && err == nil {
			m.heldInputs.Add(1)
		}
	}()
	m.mu.Lock()
	st := s.stream
	m.mu.Unlock()
	if st == nil {
		return false, nil
	}
	c := st.Client()
	if c == nil {
		return false, nil
	}
	pause := func(ms int) error { return sleepCtx(ctx, time.Duration(ms)*time.Millisecond) }
	press := func(x, y int, mask uint8, n, gapMs int) error {
		for i := 0; i < n; i++ {
			if i > 0 {
				if err := pause(gapMs); err != nil {
					return err
				}
			}
			if err := c.Pointer(x, y, mask); err != nil {
				return err
			}
			if err := c.Pointer(x, y, 0); err != nil {
				return err
			}
		}
		return nil
	}
	key := func(ks uint32) error {
		if err := c.Key(ks, true); err != nil {
			return err
		}
		return c.Key(ks, false)
	}
	switch a.Type {
	case shared.ActionMove:
		return true, c.Pointer(*a.X, *a.Y, 0)
	case shared.ActionClick:
		mask := uint8(rfbLeft)
		switch a.Button {
		case "right":
			mask = rfbRight
		case "middle":
			mask = rfbMiddle
		}
		if err := c.Pointer(*a.X, *a.Y, 0); err != nil {
			return true, err
		}
		return true, press(*a.X, *a.Y, mask, 1, 0)
	case shared.ActionDoubleClick:
		if err := c.Pointer(*a.X, *a.Y, 0); err != nil {
			return true, err
		}
		return true, press(*a.X, *a.Y, rfbLeft, 2, clickGapMs)
	case shared.ActionDrag:
		p := a.Path
		if err := c.Pointer(p[0].X, p[0].Y, 0); err != nil {
			return true, err
		}
		if err := c.Pointer(p[0].X, p[0].Y, rfbLeft); err != nil {
			return true, err
		}
		if err := pause(40); err != nil {
			return true, err
		}
		prev := p[0]
		for _, q := range p[1:] {
			for _, step := range shared.DragSteps(prev, q, dragStep) {
				if err := c.Pointer(step.X, step.Y, rfbLeft); err != nil {
					return true, err
				}
			}
			prev = q
		}
		if err := pause(40); err != nil {
			return true, err
		}
		return true, c.Pointer(prev.X, prev.Y, 0)
	case shared.ActionScroll:
		if err := c.Pointer(*a.X, *a.Y, 0); err != nil {
			return true, err
		}
		for _, w := range []struct {
			px       int
			neg, pos uint8
		}{{deref(a.ScrollY), rfbWheelUp, rfbWheelDown}, {deref(a.ScrollX), rfbWheelLeft, rfbWheelRight}} {
			if n := wheelClicks(w.px); n > 0 {
				mask := w.pos
				if w.px < 0 {
					mask = w.neg
				}
				if err := press(*a.X, *a.Y, mask, n, 8); err != nil {
					return true, err
				}
			}
		}
		return true, nil
	case shared.ActionKeypress:
		kss := make([]uint32, 0, len(a.Keys))
		for _, k := range a.Keys {
			ks, err := shared.KeyKeysym(k)
			if err != nil {
				return true, err
			}
			// A letter in a combo is its lowercase (ctrl+A is ctrl+a).
			if len(a.Keys) > 1 && ks >= 'A' && ks <= 'Z' {
				ks += 'a' - 'A'
			}
			kss = append(kss, ks)
		}
		for _, ks := range kss {
			if err := c.Key(ks, true); err != nil {
				return true, err
			}
		}
		for i := len(kss) - 1; i >= 0; i-- {
			if err := c.Key(kss[i], false); err != nil {
				return true, err
			}
		}
		return true, nil
	case shared.ActionType:
		text := *a.Text
		for _, r := range text {
			if !keymapRune(r) {
				return false, nil
			}
		}
		for i, ks := range shared.TypingKeysyms(text) {
			if i > 0 {
				if err := pause(typeDelayMs); err != nil {
					return true, err
				}
			}
			if err := key(ks); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	return false, nil
}

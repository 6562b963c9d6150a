package rfb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// served is a Serve listener in front of a held stream to a real x11vnc.
type served struct {
	x      *xserver
	st     *Stream
	addr   string
	errs   chan error
	active atomic.Int32
}

// serveX holds a stream to x's x11vnc and serves every connection to the
// returned listener from it with o; each session's error goes to errs.
func serveX(t *testing.T, x *xserver, o ServeOptions) *served {
	t.Helper()
	st := Hold(func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", x.addr())
	}, Options{}, zerolog.Nop())
	t.Cleanup(st.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &served{x: x, st: st, addr: l.Addr().String(), errs: make(chan error, 16)}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			s.active.Add(1)
			go func() {
				defer s.active.Add(-1)
				s.errs <- Serve(t.Context(), conn, st, o)
			}()
		}
	}()
	return s
}

// viewer connects this package's client to the served screen.
func (s *served) viewer(t *testing.T, o Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Handshake(ctx, conn, o)
	if err != nil {
		t.Fatalf("handshake with Serve: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sameAsUpstream reports whether the viewer's frame is the upstream's
// with the pointer drawn in (the first differing pixel when not).
func sameAsUpstream(up, down *Client) (bool, string) {
	want, _ := up.Snapshot(nil)
	if p, ok := up.PointerPos(); ok {
		DrawPointer(want, p)
	}
	got, _ := down.Snapshot(nil)
	if got.Rect != want.Rect {
		return false, fmt.Sprintf("size %v, want %v", got.Rect, want.Rect)
	}
	for i := 0; i < len(want.Pix); i += 4 {
		if !bytes.Equal(want.Pix[i:i+3], got.Pix[i:i+3]) {
			p := i / 4
			return false, fmt.Sprintf("pixel %d,%d is %v, want %v", p%want.Rect.Dx(), p/want.Rect.Dx(), got.Pix[i:i+3], want.Pix[i:i+3])
		}
	}
	return true, ""
}

// TestServeMirrorsScreen: viewers taking ZRLE and Raw see exactly the
// upstream framebuffer (with the pointer drawn in) after each change:
// a solid colour, a window with text, another colour.
func TestServeMirrorsScreen(t *testing.T) {
	t.Parallel()
	x := startX(t)
	s := serveX(t, x, ServeOptions{Name: "test"})
	zr := s.viewer(t, Options{})
	raw := s.viewer(t, Options{Encodings: []int32{EncodingRaw, EncodingDesktopSize}})
	waitFor(t, 10*time.Second, "the stream is live", func() (bool, string) {
		st, why := s.st.State()
		return st == StateLive, st + " " + why
	})
	up := s.st.Client()
	if err := up.Pointer(300, 200, 0); err != nil {
		t.Fatal(err)
	}
	step := func(what string, do func()) {
		do()
		for _, v := range []struct {
			name string
			c    *Client
		}{{"zrle", zr}, {"raw", raw}} {
			waitFor(t, 15*time.Second, v.name+" viewer mirrors "+what, func() (bool, string) {
				if _, err := up.Refresh(t.Context()); err != nil {
					return false, err.Error()
				}
				return sameAsUpstream(up, v.c)
			})
		}
	}
	step("a red screen", func() { x.run("xsetroot", "-solid", "#ff2000") })
	step("a window with text", func() {
		x.background("xmessage", "-geometry", "+100+100", "the quick brown fox jumps over the lazy dog")
	})
	step("a blue screen and a moved pointer", func() {
		x.run("xsetroot", "-solid", "#1030c0")
		if err := up.Pointer(900, 600, 0); err != nil {
			t.Fatal(err)
		}
	})
	zr.Close()
	raw.Close()
	if zr.seen.rects[EncodingZRLE] == 0 || zr.seen.rects[EncodingRaw] != 0 {
		t.Errorf("the ZRLE viewer got %v", zr.seen.rects)
	}
	if raw.seen.rects[EncodingRaw] == 0 || raw.seen.rects[EncodingZRLE] != 0 {
		t.Errorf("the Raw viewer got %v", raw.seen.rects)
	}
	if zr.seen.zrleSub[1] == 0 || zr.seen.zrleSub[0] == 0 {
		t.Errorf("ZRLE tiles by subencoding: solid %d, raw %d; want both", zr.seen.zrleSub[1], zr.seen.zrleSub[0])
	}
}

// TestServeInput: a view-only viewer's events never reach X; a control
// viewer's do only while Control says so.
func TestServeInput(t *testing.T) {
	t.Parallel()
	x := startX(t)
	var allowed atomic.Bool
	view := serveX(t, x, ServeOptions{})
	ctl := serveX(t, x, ServeOptions{Control: allowed.Load})
	v := view.viewer(t, Options{})
	c := ctl.viewer(t, Options{})
	at := func(want string) {
		t.Helper()
		waitFor(t, 5*time.Second, "X pointer at "+want, func() (bool, string) {
			got := x.run("xdotool", "getmouselocation")
			return strings.HasPrefix(got, "x:"+strings.Replace(want, ",", " y:", 1)+" "), got
		})
	}
	x.run("xdotool", "mousemove", "10", "10")
	at("10,10")
	allowed.Store(true)
	if err := c.Pointer(200, 210, 0); err != nil {
		t.Fatal(err)
	}
	at("200,210")
	// Dropped: the view-only viewer's move, and the control viewer's
	// once control ended. A later allowed move proves the session still
	// carries input, and the pointer never visited the dropped spots.
	if err := v.Pointer(500, 500, 0); err != nil {
		t.Fatal(err)
	}
	allowed.Store(false)
	if err := c.Pointer(300, 300, 0); err != nil {
		t.Fatal(err)
	}
	const capsLock = 0xffe5
	if err := c.Key(capsLock, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Key(capsLock, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	at("200,210")
	if got := capsLockState(x); got != "off" {
		t.Fatalf("a key reached X without control: Caps Lock %s", got)
	}
	allowed.Store(true)
	if err := c.Key(capsLock, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Key(capsLock, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Pointer(400, 410, 0); err != nil {
		t.Fatal(err)
	}
	at("400,410")
	waitFor(t, 5*time.Second, "Caps Lock on", func() (bool, string) {
		got := capsLockState(x)
		return got == "on", got
	})
}

// capsLockState is X's Caps Lock state ("on" or "off") as xset reports it.
func capsLockState(x *xserver) string {
	got := x.run("xset", "q")
	i := strings.Index(got, "Caps Lock:")
	if i < 0 {
		return "?"
	}
	f := strings.Fields(got[i+len("Caps Lock:"):])
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// rawViewer is a hand-written viewer: it speaks the handshake at version
// ver, sets a pixel format and Raw, and reads updates.
type rawViewer struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	w, h int
}

func dialRaw(t *testing.T, addr, ver string) *rawViewer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	v := &rawViewer{t: t, conn: conn, br: bufio.NewReader(conn)}
	v.must(v.read(12))
	v.write([]byte(ver))
	if ver == "RFB 003.003\n" {
		if sec := binary.BigEndian.Uint32(v.must(v.read(4))); sec != 1 {
			t.Fatalf("3.3 security %d, want None", sec)
		}
	} else {
		if types := v.must(v.read(2)); types[0] != 1 || types[1] != 1 {
			t.Fatalf("security types %v, want [None]", types)
		}
		v.write([]byte{1})
		if ver == "RFB 003.008\n" {
			if res := v.must(v.read(4)); binary.BigEndian.Uint32(res) != 0 {
				t.Fatalf("security result %v", res)
			}
		}
	}
	v.write([]byte{1})
	init := v.must(v.read(24))
	v.w, v.h = int(binary.BigEndian.Uint16(init[0:])), int(binary.BigEndian.Uint16(init[2:]))
	v.must(v.read(int(binary.BigEndian.Uint32(init[20:]))))
	return v
}

func (v *rawViewer) read(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(v.br, b)
	return b, err
}

func (v *rawViewer) must(b []byte, err error) []byte {
	v.t.Helper()
	if err != nil {
		v.t.Fatal(err)
	}
	return b
}

func (v *rawViewer) write(b []byte) {
	v.t.Helper()
	if _, err := v.conn.Write(b); err != nil {
		v.t.Fatal(err)
	}
}

// setup sends pf, Raw only, and a full update request.
func (v *rawViewer) setup(pf PixelFormat) {
	v.write(append([]byte{0, 0, 0, 0}, pf.bytes()...))
	v.write([]byte{2, 0, 0, 1, 0, 0, 0, 0})
	v.write([]byte{3, 0, 0, 0, 0, 0, byte(v.w >> 8), byte(v.w), byte(v.h >> 8), byte(v.h)})
}

// pixelAt reads one update and returns the raw bytes of pixel (px, py).
func (v *rawViewer) pixelAt(bpp, px, py int) []byte {
	v.t.Helper()
	hdr := v.must(v.read(4))
	if hdr[0] != 0 {
		v.t.Fatalf("message type %d, want an update", hdr[0])
	}
	var got []byte
	for i := 0; i < int(binary.BigEndian.Uint16(hdr[2:])); i++ {
		rh := v.must(v.read(12))
		x, y := int(binary.BigEndian.Uint16(rh[0:])), int(binary.BigEndian.Uint16(rh[2:]))
		w, h := int(binary.BigEndian.Uint16(rh[4:])), int(binary.BigEndian.Uint16(rh[6:]))
		if enc := int32(binary.BigEndian.Uint32(rh[8:])); enc != EncodingRaw {
			v.t.Fatalf("encoding %d, want Raw", enc)
		}
		data := v.must(v.read(w * h * bpp))
		if image.Pt(px, py).In(image.Rect(x, y, x+w, y+h)) {
			o := ((py-y)*w + (px - x)) * bpp
			got = data[o : o+bpp]
		}
	}
	if got == nil {
		v.t.Fatalf("the update did not cover %d,%d", px, py)
	}
	return got
}

// TestServePixelFormats: hand-written viewers of RFB 3.3, 3.7 and 3.8
// ask for other true-colour formats and read Raw pixels of a known
// colour (#ff8040) in them; a 32-bit pixel's padding byte is 0xff
// (noVNC 1.3 takes it for alpha).
func TestServePixelFormats(t *testing.T) {
	t.Parallel()
	x := startX(t)
	x.run("xsetroot", "-solid", "#ff8040")
	s := serveX(t, x, ServeOptions{})
	for _, tc := range []struct {
		ver  string
		pf   PixelFormat
		want []byte
	}{
		// RGB565, big-endian: r 31, g 32, b 8.
		{"RFB 003.003\n", PixelFormat{BPP: 16, Depth: 16, BigEndian: true, TrueColour: true, RedMax: 31, GreenMax: 63, BlueMax: 31, RedShift: 11, GreenShift: 5}, []byte{0xfc, 0x08}},
		// 32 bits, big-endian, red in the top byte.
		{"RFB 003.007\n", PixelFormat{BPP: 32, Depth: 24, BigEndian: true, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 24, GreenShift: 16, BlueShift: 8}, []byte{0xff, 0x80, 0x40, 0xff}},
		// noVNC's: 32 bits little-endian, red at 0.
		{"RFB 003.008\n", PixelFormat{BPP: 32, Depth: 24, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255, GreenShift: 8, BlueShift: 16}, []byte{0xff, 0x80, 0x40, 0xff}},
		// BGR233.
		{"RFB 003.008\n", PixelFormat{BPP: 8, Depth: 8, TrueColour: true, RedMax: 7, GreenMax: 7, BlueMax: 3, GreenShift: 3, BlueShift: 6}, []byte{7 | 4<<3 | 1<<6}},
	} {
		v := dialRaw(t, s.addr, tc.ver)
		if v.w != 1280 || v.h != 800 {
			t.Fatalf("%q: ServerInit says %dx%d", tc.ver, v.w, v.h)
		}
		v.setup(tc.pf)
		if got := v.pixelAt(int(tc.pf.BPP)/8, 1200, 780); !bytes.Equal(got, tc.want) {
			t.Errorf("%q %+v: pixel %x, want %x", tc.ver, tc.pf, got, tc.want)
		}
		v.conn.Close()
	}
}

// serveErr waits for the next session's end.
func (s *served) serveErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.errs:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the session did not end")
		return nil
	}
}

// TestServeRefusesBadViewers: a colour-map format, an unknown message,
// cut text over the bound and a version that is not RFB each end their
// own session with an error naming it; the served stream stays live.
func TestServeRefusesBadViewers(t *testing.T) {
	t.Parallel()
	x := startX(t)
	s := serveX(t, x, ServeOptions{MaxCutText: 1000})
	for _, tc := range []struct {
		name, want string
		send       []byte
	}{
		{"colour map", "colour-map", append([]byte{0, 0, 0, 0}, PixelFormat{BPP: 8, Depth: 8}.bytes()...)},
		{"unknown message", "unknown message type 99", []byte{99}},
		{"cut text", "cut text of 1001 bytes", append([]byte{6, 0, 0, 0, 0, 0, 0x03, 0xe9}, make([]byte, 1001)...)},
		{"24 bits", "24 bits per pixel", append([]byte{0, 0, 0, 0}, PixelFormat{BPP: 24, Depth: 24, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255}.bytes()...)},
	} {
		v := dialRaw(t, s.addr, "RFB 003.008\n")
		v.write(tc.send)
		err := s.serveErr(t)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Serve ended with %v, want %q", tc.name, err, tc.want)
		}
	}
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("GET / HTTP/1.1\r\n"))
	if err := s.serveErr(t); err == nil || !strings.Contains(err.Error(), "not an RFB") {
		t.Errorf("an HTTP client: Serve ended with %v", err)
	}
	conn.Close()
	if st, why := s.st.State(); st != StateLive {
		t.Errorf("the upstream is %s (%s) after bad viewers", st, why)
	}
}

// TestServeSlowViewerStallsNoOne: a viewer that asks for full updates and
// never reads fills its socket; another viewer of the same stream keeps
// getting each change, and the stuck one's session ends at its write
// timeout.
func TestServeSlowViewerStallsNoOne(t *testing.T) {
	t.Parallel()
	x := startX(t)
	s := serveX(t, x, ServeOptions{WriteTimeout: 2 * time.Second})
	stuck := dialRaw(t, s.addr, "RFB 003.008\n")
	stuck.setup(serverFormat)
	// It keeps asking for the whole screen and never reads.
	go func() {
		for {
			if _, err := stuck.conn.Write([]byte{3, 0, 0, 0, 0, 0, 5, 0, 3, 0x20}); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	ok := s.viewer(t, Options{})
	for _, col := range []string{"#00ff00", "#ff00ff", "#00ffff"} {
		x.run("xsetroot", "-solid", col)
		var want [4]byte
		fmt.Sscanf(col, "#%02x%02x%02x", &want[0], &want[1], &want[2])
		waitFor(t, 10*time.Second, "the live viewer sees "+col, func() (bool, string) {
			img, _ := ok.Snapshot(nil)
			px := img.Pix[img.PixOffset(1200, 780):]
			return bytes.Equal(px[:3], want[:3]), fmt.Sprint(px[:3])
		})
	}
	var ne net.Error
	if err := s.serveErr(t); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("the stuck viewer's session ended with %v, want a write timeout", err)
	}
}

// TestServeFollowsRedial: when the upstream x11vnc dies and comes back,
// the viewer's session stays and shows the new session's screen.
func TestServeFollowsRedial(t *testing.T) {
	t.Parallel()
	x := startX(t)
	s := serveX(t, x, ServeOptions{})
	v := s.viewer(t, Options{})
	waitFor(t, 10*time.Second, "the stream is live", func() (bool, string) {
		st, why := s.st.State()
		return st == StateLive, st + " " + why
	})
	x.stopVNC()
	waitFor(t, 10*time.Second, "the stream is down", func() (bool, string) {
		st, _ := s.st.State()
		return st != StateLive, st
	})
	// (Xvfb resets when its last client leaves: the colour is set once
	// x11vnc is back.)
	x.startVNC()
	x.run("xsetroot", "-solid", "#a0b0c0")
	waitFor(t, 30*time.Second, "the viewer shows the screen after the redial", func() (bool, string) {
		img, _ := v.Snapshot(nil)
		px := img.Pix[img.PixOffset(1200, 780):]
		st, why := s.st.State()
		var upPx []byte
		if c := s.st.Client(); c != nil {
			ui, _ := c.Snapshot(nil)
			upPx = ui.Pix[ui.PixOffset(1200, 780):][:3]
		}
		return bytes.Equal(px[:3], []byte{0xa0, 0xb0, 0xc0}), fmt.Sprint(px[:3], " upstream ", st, why, upPx, " viewer err ", v.Err())
	})
	select {
	case <-v.Done():
		t.Fatalf("the viewer's session ended: %v", v.Err())
	default:
	}
}

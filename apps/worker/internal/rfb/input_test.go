package rfb

import (
	"context"
	"errors"
	"image"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPointerMovesX sends pointer events and reads the X pointer back.
func TestPointerMovesX(t *testing.T) {
	t.Parallel()
	x := startX(t)
	c := x.connect(t, Options{})
	for _, p := range [][2]int{{10, 20}, {640, 400}, {123, 456}} {
		if err := c.Pointer(p[0], p[1], 0); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "X pointer at 123,456", func() (bool, string) {
		got := x.run("xdotool", "getmouselocation")
		return strings.HasPrefix(got, "x:123 y:456 "), got
	})
	if err := c.Pointer(-1, 0, 0); err == nil {
		t.Error("Pointer(-1, 0) sent")
	}
}

// TestKeyTogglesCapsLock presses Caps_Lock through the session and reads
// the X server's lock state.
func TestKeyTogglesCapsLock(t *testing.T) {
	t.Parallel()
	x := startX(t)
	c := x.connect(t, Options{})
	const capsLock = 0xffe5
	for _, want := range []string{"on", "off"} {
		if err := c.Key(capsLock, true); err != nil {
			t.Fatal(err)
		}
		if err := c.Key(capsLock, false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "Caps Lock "+want, func() (bool, string) {
			got := x.run("xset", "q")
			i := strings.Index(got, "Caps Lock:")
			if i < 0 {
				return false, got
			}
			f := strings.Fields(got[i+len("Caps Lock:"):])
			return len(f) > 0 && f[0] == want, got[i:min(len(got), i+30)]
		})
	}
}

// TestRefreshShowsNewContent draws, then takes one Refresh: the frame it
// returns holds the new colour. x11vnc finds changes by polling the X
// screen, so an answer can precede its noticing one; the test allows one of
// three changes to need more than one Refresh. A Refresh on a still screen
// returns too (the one-pixel non-incremental request is always answered).
func TestRefreshShowsNewContent(t *testing.T) {
	t.Parallel()
	x := startX(t, "-nopw", "-nonap")
	c := x.connect(t, Options{})
	x.run("xsetroot", "-solid", "#000000")
	var img *image.RGBA
	waitFor(t, 10*time.Second, "black screen", func() (bool, string) {
		refresh(t, c)
		img, _ = c.Snapshot(img)
		return solid(img, [4]byte{0, 0, 0, 255})
	})
	misses := 0
	for i, col := range []struct {
		arg  string
		want [4]byte
	}{{"#400000", [4]byte{0x40, 0, 0, 255}}, {"#11aa33", [4]byte{0x11, 0xaa, 0x33, 255}}, {"#cc2288", [4]byte{0xcc, 0x22, 0x88, 255}}, {"#ffffff", [4]byte{255, 255, 255, 255}}} {
		x.run("xsetroot", "-solid", col.arg)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		before := c.Frame()
		f, err := c.Refresh(ctx)
		cancel()
		if err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
		if f.Seq <= before.Seq {
			t.Fatalf("refresh %d returned frame %d, not newer than %d", i, f.Seq, before.Seq)
		}
		img, _ = c.Snapshot(img)
		n := 1
		start := time.Now()
		for ok, why := solid(img, col.want); !ok; ok, why = solid(img, col.want) {
			if n >= 50 {
				t.Fatalf("after %d refreshes: %s", n, why)
			}
			refresh(t, c)
			n++
			img, _ = c.Snapshot(img)
		}
		t.Logf("%s: %d refreshes, %v", col.arg, n, time.Since(start))
		if n > 1 && i > 0 { // the first change only warms x11vnc up
			misses++
		}
	}
	if misses > 1 {
		t.Errorf("%d of 3 refreshes missed the drawing", misses)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := c.Refresh(ctx); err != nil {
		t.Fatalf("refresh on a still screen: %v", err)
	}
}

// TestVNCAuth: x11vnc -passwd takes the right password and refuses a wrong
// one.
func TestVNCAuth(t *testing.T) {
	t.Parallel()
	x := startX(t, "-passwd", "s3cret!x")
	c := x.connect(t, Options{Password: "s3cret!x"})
	if w, h := c.Size(); w != 1280 || h != 800 {
		t.Fatalf("size %dx%d", w, h)
	}
	for _, pw := range []string{"wrong", ""} {
		conn, err := net.Dial("tcp", x.addr())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err = Handshake(ctx, conn, Options{Password: pw})
		cancel()
		if err == nil || !(strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "none is set")) {
			t.Fatalf("password %q: err %v, want a refusal", pw, err)
		}
	}
}

// TestStreamReconnects kills x11vnc under a held stream and restarts it:
// the stream goes down, then live again with a new session.
func TestStreamReconnects(t *testing.T) {
	t.Parallel()
	x := startX(t)
	dial := func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", x.addr())
	}
	s := Hold(dial, Options{}, testLogger(t))
	defer s.Close()
	waitLive := func() *Client {
		var c *Client
		waitFor(t, 20*time.Second, "stream live", func() (bool, string) {
			st, e := s.State()
			c = s.Client()
			return st == StateLive && c != nil, st + " " + e
		})
		return c
	}
	first := waitLive()
	refresh(t, first)
	x.stopVNC()
	waitFor(t, 10*time.Second, "stream not live", func() (bool, string) {
		st, e := s.State()
		return st != StateLive && e != "", st + " " + e
	})
	if s.Client() == first {
		t.Fatal("Client() still the dead session")
	}
	x.startVNC()
	second := waitLive()
	if second == first {
		t.Fatal("no new session")
	}
	refresh(t, second)
	s.Close()
	s.Close()
	if st, _ := s.State(); st != StateDown {
		t.Fatalf("after Close: %s", st)
	}
	if !errors.Is(first.Err(), first.Err()) || first.Err() == nil {
		t.Fatal("first session has no Err")
	}
}

// TestPointerPosFollowsX moves the X pointer outside the session
// (xdotool): the server's pointer-position updates bring it to the client.
func TestPointerPosFollowsX(t *testing.T) {
	t.Parallel()
	x := startX(t, "-nopw", "-nonap")
	c := x.connect(t, Options{})
	for _, p := range []image.Point{{321, 222}, {17, 590}} {
		x.run("xdotool", "mousemove", strconv.Itoa(p.X), strconv.Itoa(p.Y))
		waitFor(t, 10*time.Second, "the session's pointer at "+p.String(), func() (bool, string) {
			refresh(t, c)
			got, ok := c.PointerPos()
			return ok && got == p, got.String()
		})
	}
	if err := c.Pointer(5, 6, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.PointerPos(); got != image.Pt(5, 6) {
		t.Fatalf("after Pointer(5, 6) PointerPos is %v", got)
	}
}

package rfb

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"strconv"
	"testing"
	"time"
)

// TestEncodingsMatchScreen asks x11vnc for each encoding alone (plus
// DesktopSize) and checks the framebuffer against known colours on a solid
// root, then against a Raw-only session on busy content (text, many colours
// in one tile, a moved window).
func TestEncodingsMatchScreen(t *testing.T) {
	t.Parallel()
	x := startX(t)
	ref := x.connect(t, Options{Encodings: []int32{EncodingRaw, EncodingDesktopSize}})
	clients := map[string]*Client{}
	for _, e := range []struct {
		name string
		enc  int32
	}{{"ZRLE", EncodingZRLE}, {"Raw", EncodingRaw}, {"CopyRect", EncodingCopyRect}} {
		clients[e.name] = x.connect(t, Options{Encodings: []int32{e.enc, EncodingDesktopSize}})
	}
	for name, c := range clients {
		if w, h := c.Size(); w != 1280 || h != 800 {
			t.Fatalf("%s: size %dx%d, want 1280x800", name, w, h)
		}
	}

	// Known colours: each channel different, so a swapped channel shows.
	for _, col := range []struct {
		arg  string
		want [4]byte
	}{{"#ff8010", [4]byte{0xff, 0x80, 0x10, 0xff}}, {"#2040c0", [4]byte{0x20, 0x40, 0xc0, 0xff}}} {
		x.run("xsetroot", "-solid", col.arg)
		for name, c := range clients {
			var img *image.RGBA
			waitFor(t, 10*time.Second, name+" shows "+col.arg, func() (bool, string) {
				refresh(t, c)
				img, _ = c.Snapshot(img)
				return solid(img, col.want)
			})
		}
	}

	// Busy content: a plaid root, windows of text, and 24 two-pixel-wide
	// strips of distinct colours, in a staircase inside a few tiles.
	x.run("xsetroot", "-mod", "5", "3", "-fg", "#123456", "-bg", "#fedcba")
	for i := 0; i < 24; i++ {
		name := fmt.Sprintf("strip%d", i)
		x.background("xmessage", "-name", name, "-xrm", "*borderWidth: 0", "-geometry", fmt.Sprintf("+%d+%d", 200+2*i, 300+2*i),
			"-bg", fmt.Sprintf("#%02x%02x%02x", 10*i, 255-7*i, (37*i)%256), "-fg", "black", " ")
	}
	x.background("xmessage", "-name", "mover", "-geometry", "+500+100", "-bg", "yellow", "The quick brown fox jumps over the lazy dog 0123456789")
	x.background("xmessage", "-geometry", "+100+500", "Hello, framebuffer! ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	compareAll(t, ref, clients, 12)

	// Move a window: x11vnc may send it as CopyRect.
	id := firstLine(x.run("xdotool", "search", "--sync", "--classname", "mover"))
	for _, pos := range [][2]int{{520, 130}, {560, 180}, {600, 250}} {
		x.run("xdotool", "windowmove", "--sync", id, strconv.Itoa(pos[0]), strconv.Itoa(pos[1]))
	}
	compareAll(t, ref, clients, 12)

	for name, c := range clients {
		c.Close()
		t.Logf("%s: rects %v, zrle subencodings %v", name, c.seen.rects, nonZero(c.seen.zrleSub[:]))
	}
	if clients["ZRLE"].seen.rects[EncodingZRLE] == 0 {
		t.Error("ZRLE session got no ZRLE rect")
	}
	if clients["Raw"].seen.rects[EncodingRaw] == 0 {
		t.Error("Raw session got no Raw rect")
	}
}

// compareAll refreshes every session and the Raw reference until all show
// the same pixels, and fails if they never do.
func compareAll(t *testing.T, ref *Client, clients map[string]*Client, minColours int) {
	t.Helper()
	var want *image.RGBA
	imgs := map[string]*image.RGBA{}
	waitFor(t, 15*time.Second, "all sessions agree with Raw", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := ref.Refresh(ctx); err != nil {
			t.Fatalf("ref refresh: %v", err)
		}
		want, _ = ref.Snapshot(want)
		if n := distinctColours(want, minColours); n < minColours {
			return false, fmt.Sprintf("reference has %d colours, want >= %d", n, minColours)
		}
		for name, c := range clients {
			if _, err := c.Refresh(ctx); err != nil {
				t.Fatalf("%s refresh: %v", name, err)
			}
			imgs[name], _ = c.Snapshot(imgs[name])
			if !bytes.Equal(imgs[name].Pix, want.Pix) {
				return false, name + ": " + firstDiff(imgs[name], want)
			}
		}
		return true, ""
	})
}

func firstDiff(a, b *image.RGBA) string {
	for i := 0; i < len(a.Pix) && i < len(b.Pix); i += 4 {
		if !bytes.Equal(a.Pix[i:i+4], b.Pix[i:i+4]) {
			p := i / 4
			return fmt.Sprintf("pixel %d,%d is %v, Raw has %v", p%a.Rect.Dx(), p/a.Rect.Dx(), a.Pix[i:i+4], b.Pix[i:i+4])
		}
	}
	return fmt.Sprintf("sizes %v vs %v", a.Rect, b.Rect)
}

func firstLine(s string) string {
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func nonZero(counts []int) map[int]int {
	m := map[int]int{}
	for i, n := range counts {
		if n > 0 {
			m[i] = n
		}
	}
	return m
}

package desktop

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/BurntSushi/xgb/xfixes"

	"github.com/open-bot/computer/pkg/shared"
)

// xauthEntry encodes one Xauthority record.
func xauthEntry(family uint16, addr, disp, name string, data []byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, family)
	for _, s := range [][]byte{[]byte(addr), []byte(disp), []byte(name), data} {
		_ = binary.Write(&b, binary.BigEndian, uint16(len(s)))
		b.Write(s)
	}
	return b.Bytes()
}

func TestParseCookie(t *testing.T) {
	c1 := bytes.Repeat([]byte{1}, 16)
	c2 := bytes.Repeat([]byte{2}, 16)
	c3 := bytes.Repeat([]byte{3}, 16)
	const magic = "MIT-MAGIC-COOKIE-1"
	tests := []struct {
		name string
		file []byte
		num  int
		want []byte
	}{
		{"family wild, no display", xauthEntry(0xffff, "", "", magic, c1), 10, c1},
		{"exact display wins over wild", append(xauthEntry(0xffff, "", "", magic, c1), xauthEntry(256, "host", "10", magic, c2)...), 10, c2},
		{"other display skipped", append(xauthEntry(256, "host", "11", magic, c2), xauthEntry(256, "host", "10", magic, c3)...), 10, c3},
		{"other auth skipped", append(xauthEntry(0xffff, "", "", "XDM-AUTHORIZATION-1", c2), xauthEntry(0xffff, "", "", magic, c1)...), 10, c1},
		{"only another display", xauthEntry(256, "host", "11", magic, c2), 10, nil},
		{"empty file", nil, 10, nil},
		{"truncated", xauthEntry(0xffff, "", "", magic, c1)[:20], 10, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCookie(tc.file, tc.num)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("want error, got %x", got)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %x, %v; want %x", got, err, tc.want)
			}
		})
	}
}

func TestSetupRequest(t *testing.T) {
	cookie := bytes.Repeat([]byte{0xab}, 16)
	b := setupRequest(cookie)
	if b[0] != 'l' || binary.LittleEndian.Uint16(b[2:]) != 11 {
		t.Fatalf("header %x", b[:12])
	}
	nl, dl := int(binary.LittleEndian.Uint16(b[6:])), int(binary.LittleEndian.Uint16(b[8:]))
	if nl != 18 || dl != 16 || len(b) != 12+20+16 {
		t.Fatalf("lengths %d %d total %d", nl, dl, len(b))
	}
	if string(b[12:30]) != "MIT-MAGIC-COOKIE-1" || !bytes.Equal(b[32:48], cookie) {
		t.Fatalf("body %q", b[12:])
	}
	if n := setupRequest(nil); len(n) != 12 || binary.LittleEndian.Uint16(n[6:]) != 0 {
		t.Fatalf("no-auth setup %x", n)
	}
}

func TestDisplayNumber(t *testing.T) {
	for in, want := range map[string]int{":0": 0, ":10": 10, ":160.0": 160} {
		if got, err := displayNumber(in); err != nil || got != want {
			t.Errorf("%q: %d %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "10", "host:10", ":x", ":-1"} {
		if _, err := displayNumber(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestWheelClicks(t *testing.T) {
	for px, want := range map[int]int{0: 0, 1: 1, -1: 1, 59: 1, 120: 1, 179: 1, 180: 2, 300: 3, -360: 3, 20000: 167} {
		if got := wheelClicks(px); got != want {
			t.Errorf("wheelClicks(%d) = %d, want %d", px, got, want)
		}
	}
}

func TestTypingKeysyms(t *testing.T) {
	got := shared.TypingKeysyms("aÉ€\r\n\t\x00\u0085日😀\r")
	want := []uint32{'a', 0xc9, 0x010020ac, shared.KeysymReturn, shared.KeysymTab, 0x01000000 | '日', 0x01000000 | 0x1f600, shared.KeysymReturn}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}

func TestKeyKeysym(t *testing.T) {
	for name, want := range map[string]uint32{
		"ctrl": 0xffe3, "Enter": 0xff0d, "f5": 0xffc2, "PageDown": 0xff56, "a": 'a', "A": 'A', "é": 0xe9, "日": 0x01000000 | '日', "space": ' ',
	} {
		if got, err := shared.KeyKeysym(name); err != nil || got != want {
			t.Errorf("shared.KeyKeysym(%q) = %x, %v; want %x", name, got, err, want)
		}
	}
	if _, err := shared.KeyKeysym("hyperdrive"); err == nil {
		t.Error("unknown key accepted")
	}
	// Every name shared.KeyName produces has a keysym.
	for _, name := range []string{"ctrl", "shift", "alt", "meta", "enter", "tab", "escape", "backspace", "delete", "insert",
		"space", "up", "down", "left", "right", "pageup", "pagedown", "home", "end", "capslock", "f1", "f12"} {
		if _, err := shared.KeyKeysym(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDrawCursor(t *testing.T) {
	const w, h = 4, 3
	pix := make([]byte, w*h*4)
	for i := range pix {
		pix[i] = 100
	}
	cur := &xfixes.GetCursorImageReply{X: 1, Y: 1, Width: 2, Height: 2, Xhot: 1, Yhot: 1, CursorImage: []uint32{
		0xff0000ff, // opaque blue at (0,0)
		0x00000000, // transparent at (1,0)
		0x80800000, // half red (premultiplied) at (0,1)
		0xffffffff, // white at (1,1)
	}}
	drawCursor(pix, w, h, cur)
	px := func(x, y int) [3]byte { o := (y*w + x) * 4; return [3]byte{pix[o], pix[o+1], pix[o+2]} }
	if got := px(0, 0); got != [3]byte{255, 0, 0} { // BGR: blue
		t.Errorf("opaque: %v", got)
	}
	if got := px(1, 0); got != [3]byte{100, 100, 100} {
		t.Errorf("transparent: %v", got)
	}
	if got := px(0, 1); got != [3]byte{50, 50, 178} {
		t.Errorf("half: %v", got)
	}
	if got := px(1, 1); got != [3]byte{255, 255, 255} {
		t.Errorf("white: %v", got)
	}
	// Clipped at the edges: the part on screen is drawn, nothing else is
	// touched (a write past the frame would panic).
	for _, tc := range []struct {
		name   string
		x, y   int16
		drawn  map[[2]int][3]byte
		shortI bool
	}{
		{name: "top-left: only the cursor's last pixel shows", x: 0, y: 0, drawn: map[[2]int][3]byte{{0, 0}: {255, 255, 255}}},
		{name: "bottom-right: only its first pixel shows", x: w, y: h, drawn: map[[2]int][3]byte{{w - 1, h - 1}: {255, 0, 0}}},
		{name: "right edge: its left column shows", x: w, y: 1, drawn: map[[2]int][3]byte{{w - 1, 0}: {255, 0, 0}, {w - 1, 1}: {50, 50, 178}}},
		{name: "far outside", x: w + 5, y: h + 5},
		{name: "far outside, negative", x: -10, y: -10},
		{name: "an image shorter than its size", x: 1, y: 1, shortI: true},
	} {
		for i := range pix {
			pix[i] = 100
		}
		c := *cur
		c.X, c.Y = tc.x, tc.y
		if tc.shortI {
			c.CursorImage = c.CursorImage[:3]
		}
		drawCursor(pix, w, h, &c)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				want, ok := tc.drawn[[2]int{x, y}]
				if !ok {
					want = [3]byte{100, 100, 100}
				}
				if got := px(x, y); got != want {
					t.Errorf("%s: pixel (%d,%d) = %v, want %v", tc.name, x, y, got, want)
				}
			}
		}
	}
}

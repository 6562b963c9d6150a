package desktop

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/xproto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// TestKeymapBorrowedAndRestored: characters the keymap lacks go onto
// spare keycodes, which are given back (empty) after a quiet spell.
func TestKeymapBorrowedAndRestored(t *testing.T) {
	x := startX(t)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 20*time.Second)
	old := restoreAfter
	restoreAfter = 300 * time.Millisecond
	t.Cleanup(func() { restoreAfter = old })

	text := "ÎÖ日😀"
	require.NoError(t, d.Do(ctx, shared.Action{Type: "type", Text: &text}))
	s, err := d.session(ctx)
	require.NoError(t, err)
	row := func(code int) []xproto.Keysym {
		r, err := xproto.GetKeyboardMapping(s.c, xproto.Keycode(code), 1).Reply()
		require.NoError(t, err)
		return r.Keysyms
	}
	d.inMu.Lock()
	borrowed := map[int]uint32{}
	for code, b := range d.kb.borrowed {
		borrowed[code] = b.keysym
	}
	d.inMu.Unlock()
	require.Len(t, borrowed, 4)
	want := map[uint32]bool{0xce: true, 0xd6: true, 0x01000000 | '日': true, 0x01000000 | 0x1f600: true}
	for code, ks := range borrowed {
		require.True(t, want[ks], "keysym %x", ks)
		require.Equal(t, xproto.Keysym(ks), row(code)[0])
	}
	require.Eventually(t, func() bool {
		for code := range borrowed {
			for _, ks := range row(code) {
				if ks != 0 {
					return false
				}
			}
		}
		return true
	}, 5*time.Second, 50*time.Millisecond)
}

// keymapClient is a minimal X client that behaves like a toolkit: it reads
// key events in order, re-reads the keymap when told it changed, answers
// _NET_WM_PING, and records the characters it saw.
type keymapClient struct {
	mu    sync.Mutex // mu guards typed
	typed []rune
}

func startKeymapClient(t *testing.T, x *testX) *keymapClient {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	xc, err := dialX(ctx, x.display, x.xauth, false)
	require.NoError(t, err)
	// Its event loop may be sending a request when the test ends: drop the
	// socket instead of racing xgb's Close against that send.
	t.Cleanup(func() { xc.sc.markDead(errors.New("test over")); xc.sc.Conn.Close() })
	c := xc.c
	root := xproto.Window(xc.root)
	wid, err := xproto.NewWindowId(c)
	require.NoError(t, err)
	require.NoError(t, xproto.CreateWindowChecked(c, 0, wid, root, 0, 0, 1280, 800, 0, xproto.WindowClassInputOutput, 0,
		xproto.CwOverrideRedirect|xproto.CwEventMask, []uint32{1, xproto.EventMaskKeyPress}).Check())
	atom := func(name string) xproto.Atom {
		r, err := xproto.InternAtom(c, false, uint16(len(name)), name).Reply()
		require.NoError(t, err)
		return r.Atom
	}
	protocols, ping := atom("WM_PROTOCOLS"), atom("_NET_WM_PING")
	val := make([]byte, 4)
	xgb.Put32(val, uint32(ping))
	require.NoError(t, xproto.ChangePropertyChecked(c, xproto.PropModeReplace, wid, protocols, xproto.AtomAtom, 32, 1, val).Check())
	require.NoError(t, xproto.MapWindowChecked(c, wid).Check())
	require.NoError(t, xproto.SetInputFocusChecked(c, xproto.InputFocusPointerRoot, wid, xproto.TimeCurrentTime).Check())
	setup := xproto.Setup(c)
	var per int
	var syms []xproto.Keysym
	loadMap := func() {
		r, err := xproto.GetKeyboardMapping(c, setup.MinKeycode, byte(setup.MaxKeycode-setup.MinKeycode+1)).Reply()
		if err == nil {
			per, syms = int(r.KeysymsPerKeycode), r.Keysyms
		}
	}
	loadMap()
	k := &keymapClient{}
	go func() {
		// At cleanup the connection closes under a request: xgb panics.
		defer func() { _ = recover() }()
		for {
			ev, xerr := c.WaitForEvent()
			if ev == nil && xerr == nil {
				return
			}
			switch e := ev.(type) {
			case xproto.MappingNotifyEvent:
				loadMap()
			case xproto.ClientMessageEvent:
				if e.Type == protocols && xproto.Atom(e.Data.Data32[0]) == ping {
					e.Window = root
					xproto.SendEvent(c, false, root, xproto.EventMaskSubstructureNotify|xproto.EventMaskSubstructureRedirect, string(e.Bytes()))
				}
			case xproto.KeyPressEvent:
				i := int(e.Detail-setup.MinKeycode) * per
				col := 0
				if e.State&xproto.ModMaskShift != 0 {
					col = 1
				}
				ks := uint32(syms[i+col])
				var r rune
				switch {
				case ks == shared.KeysymReturn:
					r = '\n'
				case ks == shared.KeysymTab:
					r = '\t'
				case ks < 0x100:
					r = rune(ks)
				case ks&0xff000000 == 0x01000000:
					r = rune(ks & 0xffffff)
				default:
					continue // modifiers
				}
				k.mu.Lock()
				k.typed = append(k.typed, r)
				k.mu.Unlock()
			}
		}
	}()
	return k
}

func (k *keymapClient) text() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return string(k.typed)
}

// TestTypeManyDistinctCharacters types far more distinct missing
// characters than there are spare keycodes, interleaved so that batches
// pin, reuse and remap keycodes, into a client that reads the keymap the
// way toolkits do. Every character must arrive as sent.
func TestTypeManyDistinctCharacters(t *testing.T) {
	x := startX(t)
	k := startKeymapClient(t, x)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 60*time.Second)
	var b strings.Builder
	cjk := []rune("一二三四五六七八九十百千万亿上下左右前后东南西北春夏秋冬金木水火土日月星云雨雪风山川河海天地人")
	for round := 0; round < 3; round++ {
		for i, r := range cjk {
			b.WriteRune(r)
			if i%7 == round {
				b.WriteString("Aé\t")
			}
			if i%11 == 0 {
				b.WriteRune(cjk[(i*5+round)%len(cjk)]) // an earlier one again
			}
		}
		b.WriteString("😀\n")
	}
	text := b.String()
	require.NoError(t, d.Do(ctx, shared.Action{Type: "type", Text: &text}))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, text, k.text(), "typed") }, 5*time.Second, 20*time.Millisecond)

	// Every spare keycode borrowed, then exactly as many new characters
	// followed by an already mapped one: the batch must stop before it.
	d.inMu.Lock()
	spare := len(d.kb.spare)
	d.inMu.Unlock()
	var first, second []rune
	for i := 0; i < spare; i++ {
		first = append(first, rune(0x3041+i))   // hiragana
		second = append(second, rune(0x30a1+i)) // katakana
	}
	more := string(first) + string(second) + string(first[0]) + string(second) + string(first)
	require.NoError(t, d.Do(ctx, shared.Action{Type: "type", Text: &more}))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, text+more, k.text(), "typed") }, 5*time.Second, 20*time.Millisecond)
}

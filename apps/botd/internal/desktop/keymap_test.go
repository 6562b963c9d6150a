package desktop

import (
	"testing"
	"time"

	"github.com/BurntSushi/xgb/xproto"
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

package desktop

import (
	"context"
	"fmt"
	"time"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/xproto"
)

// Typing any Unicode text through XTEST: a character the keymap has is typed
// with its key (and Shift for the second column); any other character is
// mapped onto a spare keycode (one with no keysyms) with
// ChangeKeyboardMapping, then pressed. Every client re-reads the keymap when
// it sees the MappingNotify, so a borrowed keycode must keep its keysym until
// every client has interpreted the key events sent for it: reverting or
// reusing it at once types the wrong character (FIELD-NOTES: "ööööö" for
// "€→日本語 😀" in Chromium). Hence borrowed keycodes are reused least
// recently used first and never before minReuse has passed, stay mapped
// across actions (typing the same characters again costs nothing), and are
// given back only after restoreAfter of keyboard silence.
var (
	minReuse     = 250 * time.Millisecond
	restoreAfter = 3 * time.Second
	// keyGap is the pause after each typed character; it keeps apps (and
	// Chromium's UI thread) from receiving thousands of events at once.
	keyGap = 4 * time.Millisecond
	// syncEvery is how many characters go out between round trips.
	syncEvery = 16
)

// X event types for XTEST FakeInput.
const (
	evKeyPress      = 2
	evKeyRelease    = 3
	evButtonPress   = 4
	evButtonRelease = 5
	evMotion        = 6
)

// borrow is one spare keycode we mapped.
type borrow struct {
	keysym  uint32
	lastUse time.Time
}

// keyboard is the keymap as we know it. It belongs to Desktop.inMu.
type keyboard struct {
	owner    *session
	min, max int
	per      int               // keysyms per keycode
	syms     [][]uint32        // keycode-min → keysyms
	have     map[uint32]keyLoc // keysym → key that types it natively
	spare    []int             // keycodes with no keysyms (ours to borrow)
	borrowed map[int]*borrow   // keycode → what we mapped there
	byKeysym map[uint32]int    // keysym → borrowed keycode
	timer    *time.Timer       // restores borrowed keycodes after silence
}

// keyLoc is a key that types a keysym, with or without Shift.
type keyLoc struct {
	code  int
	shift bool
}

// load (re)reads the keymap on s. Borrowed keycodes survive when the server
// still holds our keysym there (someone else may have remapped them).
func (k *keyboard) load(ctx context.Context, s *session) error {
	var min, max int
	var per int
	var syms []xproto.Keysym
	err := s.do(ctx, callTimeout, "get keyboard mapping", func(c *xgb.Conn) error {
		setup := xproto.Setup(c)
		min, max = int(setup.MinKeycode), int(setup.MaxKeycode)
		r, err := xproto.GetKeyboardMapping(c, xproto.Keycode(min), byte(max-min+1)).Reply()
		if err != nil {
			return err
		}
		per, syms = int(r.KeysymsPerKeycode), r.Keysyms
		return nil
	})
	if err != nil {
		return err
	}
	if per <= 0 || len(syms) < per*(max-min+1) {
		return fmt.Errorf("keyboard mapping: %d keysyms for %d keycodes", len(syms), max-min+1)
	}
	if k.owner != s {
		k.borrowed = map[int]*borrow{}
		k.byKeysym = map[uint32]int{}
	}
	k.owner, k.min, k.max, k.per = s, min, max, per
	k.syms = make([][]uint32, max-min+1)
	k.have = map[uint32]keyLoc{}
	k.spare = k.spare[:0]
	for i := range k.syms {
		row := make([]uint32, per)
		empty := true
		for j := 0; j < per; j++ {
			row[j] = uint32(syms[i*per+j])
			if row[j] != 0 {
				empty = false
			}
		}
		k.syms[i] = row
		code := min + i
		if b, ok := k.borrowed[code]; ok {
			if row[0] == b.keysym {
				k.spare = append(k.spare, code)
				continue
			}
			delete(k.borrowed, code)
			delete(k.byKeysym, b.keysym)
		}
		if empty {
			k.spare = append(k.spare, code)
			continue
		}
		// Only the first two columns (plain and Shift) of the first group:
		// other levels need modifiers whose meaning varies by layout.
		for j := 1; j >= 0; j-- {
			if j < per && row[j] != 0 {
				if old, ok := k.have[row[j]]; !ok || (old.shift && j == 0) || (old.shift == (j == 1) && code < old.code) {
					k.have[row[j]] = keyLoc{code: code, shift: j == 1}
				}
			}
		}
	}
	// A keysym in both columns of a key (e.g. a keypad key) types without Shift.
	for i, row := range k.syms {
		if per >= 2 && row[0] != 0 && row[0] == row[1] {
			k.have[row[0]] = keyLoc{code: min + i}
		}
	}
	return nil
}

// locate returns the key that types ks, borrowing a spare keycode when the
// keymap has none. It may wait (at most minReuse) for a keycode to be free.
func (k *keyboard) locate(ctx context.Context, s *session, ks uint32) (keyLoc, error) {
	if loc, ok := k.have[ks]; ok {
		return loc, nil
	}
	if code, ok := k.byKeysym[ks]; ok {
		k.borrowed[code].lastUse = time.Now()
		return keyLoc{code: code}, nil
	}
	if len(k.spare) == 0 {
		return keyLoc{}, fmt.Errorf("no spare keycode to type keysym 0x%x", ks)
	}
	// A never-borrowed spare first, else the least recently used.
	code := -1
	var oldest time.Time
	for _, c := range k.spare {
		b, ok := k.borrowed[c]
		if !ok {
			code = c
			break
		}
		if code == -1 || b.lastUse.Before(oldest) {
			code, oldest = c, b.lastUse
		}
	}
	if b, ok := k.borrowed[code]; ok {
		if wait := minReuse - time.Since(b.lastUse); wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				return keyLoc{}, err
			}
		}
		delete(k.byKeysym, b.keysym)
	}
	if err := k.mapCode(ctx, s, code, ks); err != nil {
		return keyLoc{}, err
	}
	k.borrowed[code] = &borrow{keysym: ks, lastUse: time.Now()}
	k.byKeysym[ks] = code
	return keyLoc{code: code}, nil
}

// mapCode puts ks in every column of code, so no modifier changes it.
func (k *keyboard) mapCode(ctx context.Context, s *session, code int, ks uint32) error {
	row := make([]xproto.Keysym, k.per)
	for i := range row {
		row[i] = xproto.Keysym(ks)
	}
	return s.do(ctx, callTimeout, "change keyboard mapping", func(c *xgb.Conn) error {
		return xproto.ChangeKeyboardMappingChecked(c, 1, xproto.Keycode(code), byte(k.per), row).Check()
	})
}

// restore gives every borrowed keycode back (empty again).
func (k *keyboard) restore(ctx context.Context, s *session) error {
	if k.owner != s || len(k.borrowed) == 0 {
		return nil
	}
	empty := make([]xproto.Keysym, k.per)
	var first error
	for code := range k.borrowed {
		err := s.do(ctx, callTimeout, "restore keyboard mapping", func(c *xgb.Conn) error {
			return xproto.ChangeKeyboardMappingChecked(c, 1, xproto.Keycode(code), byte(k.per), empty).Check()
		})
		if err != nil && first == nil {
			first = err
		}
		delete(k.borrowed, code)
	}
	k.byKeysym = map[uint32]int{}
	return first
}

// stopTimer cancels a pending restore.
func (k *keyboard) stopTimer() {
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

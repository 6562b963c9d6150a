package desktop

import (
	"context"
	"fmt"
	"sort"
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
// "€→日本語 😀" in Chromium). Hence: missing characters are mapped in
// batches (as many as there are spare keycodes), the application is asked
// for a barrier (barrier.go) before a keycode it may not have read yet is
// remapped and again before typing on remapped ones (fixed pauses,
// minReuse and mapSettle, when it cannot answer); keycodes are reused least
// recently used first, stay mapped across actions (typing the same
// characters again costs nothing), and are given back only after
// restoreAfter of keyboard silence.
var (
	minReuse = 250 * time.Millisecond
	// mapSettle is the pause between remapping keycodes and typing on them
	// when the application gives no barrier (see barrier.go); pingSettle
	// the pause after its barrier, for a keymap reload off its event loop.
	mapSettle    = 150 * time.Millisecond
	pingSettle   = 30 * time.Millisecond
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

// locate returns the key that types ks, borrowing a spare keycode (and
// waiting for applications to see the new mapping) when the keymap has none.
func (k *keyboard) locate(ctx context.Context, s *session, ks uint32) (keyLoc, error) {
	if _, err := k.prepare(ctx, s, []uint32{ks}, nil); err != nil {
		return keyLoc{}, err
	}
	return k.loc(ks), nil
}

// loc is where ks is now; prepare must have made it typeable.
func (k *keyboard) loc(ks uint32) keyLoc {
	if loc, ok := k.have[ks]; ok {
		return loc
	}
	code := k.byKeysym[ks]
	k.borrowed[code].lastUse = time.Now()
	return keyLoc{code: code}
}

// prepare makes the longest prefix of seq typeable that the spare keycodes
// allow, mapping every missing keysym of it at once, and returns its
// length (at least 1). Mapping in batches matters: applications (Chromium
// loads its XKB keymap asynchronously) need time after a remap before a
// key event on a remapped keycode is read right, so we pay that wait once
// per batch instead of once per character.
func (k *keyboard) prepare(ctx context.Context, s *session, seq []uint32, app *appSync) (int, error) {
	pinned := map[int]bool{} // borrowed keycodes this batch types
	var missing []uint32
	n := 0
	for _, ks := range seq {
		if _, ok := k.have[ks]; ok {
			n++
			continue
		}
		if code, ok := k.byKeysym[ks]; ok {
			if !pinned[code] {
				// A pinned keycode is one fewer to map missing keysyms on.
				if len(missing)+len(pinned) >= len(k.spare) {
					break
				}
				pinned[code] = true
			}
			n++
			continue
		}
		dup := false
		for _, m := range missing {
			dup = dup || m == ks
		}
		if !dup {
			if len(missing)+len(pinned) >= len(k.spare) {
				break
			}
			missing = append(missing, ks)
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no spare keycode to type keysym 0x%x", seq[0])
	}
	if len(missing) == 0 {
		return n, nil
	}
	// Free keycodes: never borrowed first, then least recently used.
	var free []int
	for _, c := range k.spare {
		if _, ok := k.borrowed[c]; !ok {
			free = append(free, c)
		}
	}
	var used []int
	for _, c := range k.spare {
		if _, ok := k.borrowed[c]; ok && !pinned[c] {
			used = append(used, c)
		}
	}
	sort.Slice(used, func(i, j int) bool { return k.borrowed[used[i]].lastUse.Before(k.borrowed[used[j]].lastUse) })
	free = append(free, used...)
	if len(free) < len(missing) { // cannot happen (see the scan above); never panic
		return 0, fmt.Errorf("keymap: %d keycodes free for %d characters", len(free), len(missing))
	}
	// A keycode typed a moment ago may not have been read yet: wait until
	// the application has handled those key events.
	var latest time.Time
	for i := range missing {
		if b, ok := k.borrowed[free[i]]; ok && b.lastUse.After(latest) {
			latest = b.lastUse
		}
	}
	if !latest.IsZero() && !app.barrier(ctx, s) {
		if err := sleep(ctx, minReuse-time.Since(latest)); err != nil {
			return 0, err
		}
	}
	for i, ks := range missing {
		code := free[i]
		if b, ok := k.borrowed[code]; ok {
			delete(k.byKeysym, b.keysym)
			delete(k.borrowed, code)
		}
		if err := k.mapCode(ctx, s, code, ks); err != nil {
			return 0, err
		}
		k.borrowed[code] = &borrow{keysym: ks, lastUse: time.Now()}
		k.byKeysym[ks] = code
	}
	// Then until it has seen the MappingNotify (and reloaded its keymap).
	settle := mapSettle
	if app.barrier(ctx, s) {
		settle = pingSettle
	}
	if err := sleep(ctx, settle); err != nil {
		return 0, err
	}
	return n, nil
}

// appSync is the barrier of the application being typed into, found once
// per type action; nil or broken means fixed pauses.
type appSync struct {
	pt     pingTarget
	ok     bool
	failed bool
}

// newAppSync finds the focused application's ping target.
func newAppSync(ctx context.Context, s *session) *appSync {
	pt, err := findPingTarget(ctx, s)
	if err != nil {
		return &appSync{}
	}
	return &appSync{pt: pt, ok: true}
}

// barrier reports whether the application confirmed it is caught up.
func (a *appSync) barrier(ctx context.Context, s *session) bool {
	if a == nil || !a.ok || a.failed {
		return false
	}
	if err := a.pt.barrier(ctx, s); err != nil {
		// One missed pong and we stop asking: a hung application would
		// otherwise cost pingTimeout per batch.
		a.failed = true
		return false
	}
	return true
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

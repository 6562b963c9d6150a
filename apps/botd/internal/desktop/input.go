package desktop

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/xproto"
	"github.com/BurntSushi/xgb/xtest"

	"github.com/open-bot/computer/pkg/shared"
)

// Input goes through XTEST on botd's own connection to the display (as
// root, holding that display's cookie): it reaches that display only, needs
// no process per action, and can be stopped between any two events. A
// cancelled action releases whatever it held down.

// WheelPixels is how many pixels one wheel click stands for when a scroll
// in pixels becomes wheel clicks: |pixels|/WheelPixels rounded, at least one
// click for any non-zero amount. Chromium (measured, TestScrollChromium)
// scrolls a page 120 px per click at 100% zoom; GTK views scroll by a
// similar amount that depends on the view's height.
const WheelPixels = 120

// X pointer buttons.
const (
	buttonLeft       = 1
	buttonMiddle     = 2
	buttonRight      = 3
	buttonWheelUp    = 4
	buttonWheelDown  = 5
	buttonWheelLeft  = 6
	buttonWheelRight = 7
)

// Pauses that let applications see distinct events.
var (
	clickGap  = 10 * time.Millisecond // between press and release, and between clicks
	dragStep  = 16                    // pixels between intermediate drag positions
	dragPause = 4 * time.Millisecond
	dragHold  = 40 * time.Millisecond // after press and before release, for drag thresholds
	wheelGap  = 8 * time.Millisecond
)

// Do performs one validated action. Cancelling ctx aborts it between two
// events: what it held down is released and Do returns ctx.Err() (wrapped).
// A dead X server gives an error wrapping ErrDisplayGone. screenshot is a
// no-op here (the caller captures).
func (d *Desktop) Do(ctx context.Context, a shared.Action) (err error) {
	defer d.guard("do "+a.Type, &err)
	if err := shared.ValidateActions([]shared.Action{a}, d.t.Width, d.t.Height); err != nil {
		return err
	}
	switch a.Type {
	case shared.ActionScreenshot:
		return nil
	case shared.ActionWait:
		if err := sleep(ctx, time.Duration(*a.Ms)*time.Millisecond); err != nil {
			return fmt.Errorf("wait: %w", err)
		}
		return nil
	case shared.ActionFocusWindow, shared.ActionCloseWindow, shared.ActionMoveWindow, shared.ActionResizeWindow:
		return d.windowAction(ctx, a)
	}
	return d.input(ctx, a.Type, func(op *inputOp) error { return op.action(a) })
}

// TypeSecret types secret exactly like a type action. The secret never
// leaves this process except as key events: no argv, no log, no error text.
func (d *Desktop) TypeSecret(ctx context.Context, secret string) (err error) {
	defer d.guard("type secret", &err)
	if !utf8.ValidString(secret) {
		return errors.New("type secret: not valid UTF-8")
	}
	return d.input(ctx, "type secret", func(op *inputOp) error { return op.typeText(secret) })
}

// guard turns a panic in our own code into an error: a bug on the hot
// path must cost one action, not botd. The panic value goes to the log
// only (never into the error, which callers may show).
func (d *Desktop) guard(what string, err *error) {
	if r := recover(); r != nil {
		d.log.Error().Str("op", what).Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).Msg("desktop panic recovered")
		*err = fmt.Errorf("%s: internal error", what)
	}
}

// input runs f with the input lock and a live session, and cleans up after
// a failure or a cancellation.
func (d *Desktop) input(ctx context.Context, what string, f func(op *inputOp) error) error {
	d.inMu.Lock()
	defer d.inMu.Unlock()
	s, err := d.session(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	d.kb.stopTimer()
	op := &inputOp{ctx: ctx, d: d, s: s}
	err = f(op)
	if err != nil {
		op.releaseAll()
	}
	if len(d.kb.borrowed) > 0 {
		d.kb.timer = time.AfterFunc(restoreAfter, func() { d.restoreKeymap(s) })
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// restoreKeymap gives borrowed keycodes back after a quiet spell.
func (d *Desktop) restoreKeymap(s *session) {
	d.inMu.Lock()
	defer d.inMu.Unlock()
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed || d.kb.owner != s || s.isDead() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := d.kb.restore(ctx, s); err != nil {
		d.log.Debug().Err(err).Msg("restore keymap")
	}
}

// inputOp is one action in progress; it remembers what is held down.
type inputOp struct {
	ctx     context.Context
	d       *Desktop
	s       *session
	keys    []int // keycodes down, in press order
	buttons []int
}

// fakeEvent is one XTEST event.
type fakeEvent struct {
	typ    byte
	detail byte
	x, y   int
}

// send writes events in order (one X call) and tracks what is held.
func (op *inputOp) send(evs ...fakeEvent) error {
	if err := op.ctx.Err(); err != nil {
		return err
	}
	err := op.s.do(op.ctx, callTimeout, "fake input", func(c *xgb.Conn) error {
		for _, e := range evs {
			root := xproto.Window(0)
			if e.typ == evMotion {
				root = xproto.Window(op.s.root)
			}
			xtest.FakeInput(c, e.typ, e.detail, 0, root, int16(e.x), int16(e.y), 0)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range evs {
		switch e.typ {
		case evKeyPress:
			op.keys = append(op.keys, int(e.detail))
		case evKeyRelease:
			op.keys = remove(op.keys, int(e.detail))
		case evButtonPress:
			op.buttons = append(op.buttons, int(e.detail))
		case evButtonRelease:
			op.buttons = remove(op.buttons, int(e.detail))
		}
	}
	return nil
}

func remove(s []int, v int) []int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// sync waits until the server has processed everything sent so far.
func (op *inputOp) sync() error {
	return op.s.do(op.ctx, callTimeout, "sync", func(c *xgb.Conn) error {
		_, err := xproto.GetInputFocus(c).Reply()
		return err
	})
}

// releaseAll lets go of held keys and buttons, even after ctx ended.
func (op *inputOp) releaseAll() {
	if len(op.keys) == 0 && len(op.buttons) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = op.s.do(ctx, time.Second, "release", func(c *xgb.Conn) error {
		for i := len(op.keys) - 1; i >= 0; i-- {
			xtest.FakeInput(c, evKeyRelease, byte(op.keys[i]), 0, 0, 0, 0, 0)
		}
		for _, b := range op.buttons {
			xtest.FakeInput(c, evButtonRelease, byte(b), 0, 0, 0, 0, 0)
		}
		_, err := xproto.GetInputFocus(c).Reply()
		return err
	})
	op.keys, op.buttons = nil, nil
}

func (op *inputOp) action(a shared.Action) error {
	switch a.Type {
	case shared.ActionMove:
		return op.then(op.send(motion(*a.X, *a.Y)))
	case shared.ActionClick:
		b := buttonLeft
		switch a.Button {
		case "right":
			b = buttonRight
		case "middle":
			b = buttonMiddle
		}
		return op.click(*a.X, *a.Y, b, 1)
	case shared.ActionDoubleClick:
		return op.click(*a.X, *a.Y, buttonLeft, 2)
	case shared.ActionDrag:
		return op.drag(a.Path)
	case shared.ActionScroll:
		return op.scroll(*a.X, *a.Y, deref(a.ScrollX), deref(a.ScrollY))
	case shared.ActionKeypress:
		return op.keypress(a.Keys)
	case shared.ActionType:
		return op.typeText(*a.Text)
	}
	return fmt.Errorf("unsupported action %q", a.Type)
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// then syncs after a successful step.
func (op *inputOp) then(err error) error {
	if err != nil {
		return err
	}
	return op.sync()
}

func motion(x, y int) fakeEvent { return fakeEvent{typ: evMotion, x: x, y: y} }

func (op *inputOp) click(x, y, button, n int) error {
	if err := op.send(motion(x, y)); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			if err := sleep(op.ctx, clickGap); err != nil {
				return err
			}
		}
		if err := op.then(op.send(fakeEvent{typ: evButtonPress, detail: byte(button)})); err != nil {
			return err
		}
		if err := sleep(op.ctx, clickGap); err != nil {
			return err
		}
		if err := op.send(fakeEvent{typ: evButtonRelease, detail: byte(button)}); err != nil {
			return err
		}
	}
	return op.sync()
}

func (op *inputOp) drag(path []shared.Point) error {
	if err := op.send(motion(path[0].X, path[0].Y)); err != nil {
		return err
	}
	if err := op.then(op.send(fakeEvent{typ: evButtonPress, detail: buttonLeft})); err != nil {
		return err
	}
	if err := sleep(op.ctx, dragHold); err != nil {
		return err
	}
	prev := path[0]
	for _, p := range path[1:] {
		for _, q := range shared.DragSteps(prev, p, dragStep) {
			if err := op.send(motion(q.X, q.Y)); err != nil {
				return err
			}
			if err := sleep(op.ctx, dragPause); err != nil {
				return err
			}
		}
		prev = p
	}
	if err := op.then(nil); err != nil {
		return err
	}
	if err := sleep(op.ctx, dragHold); err != nil {
		return err
	}
	return op.then(op.send(fakeEvent{typ: evButtonRelease, detail: buttonLeft}))
}

// wheelClicks converts a scroll in pixels to wheel clicks (see WheelPixels).
func wheelClicks(px int) int {
	if px == 0 {
		return 0
	}
	n := int(math.Round(math.Abs(float64(px)) / WheelPixels))
	if n < 1 {
		n = 1
	}
	return n
}

func (op *inputOp) scroll(x, y, sx, sy int) error {
	if err := op.then(op.send(motion(x, y))); err != nil {
		return err
	}
	wheel := func(px, neg, pos int) error {
		b := pos
		if px < 0 {
			b = neg
		}
		for i := 0; i < wheelClicks(px); i++ {
			if err := op.send(fakeEvent{typ: evButtonPress, detail: byte(b)}, fakeEvent{typ: evButtonRelease, detail: byte(b)}); err != nil {
				return err
			}
			if err := sleep(op.ctx, wheelGap); err != nil {
				return err
			}
		}
		return nil
	}
	if err := wheel(sy, buttonWheelUp, buttonWheelDown); err != nil {
		return err
	}
	if err := wheel(sx, buttonWheelLeft, buttonWheelRight); err != nil {
		return err
	}
	return op.sync()
}

// keypress presses keys in order and releases them in reverse: a combo.
func (op *inputOp) keypress(names []string) error {
	kb := &op.d.kb
	if err := kb.load(op.ctx, op.s); err != nil {
		return err
	}
	combo := len(names) > 1
	var codes []int
	shiftNeeded, hasShift := false, false
	for _, n := range names {
		ks, err := shared.KeyKeysym(n)
		if err != nil {
			return err
		}
		// ctrl+A means ctrl+a: in a combo a letter is its key, not Shift+key.
		if combo && ks < 0x80 && unicode.IsUpper(rune(ks)) {
			ks = uint32(unicode.ToLower(rune(ks)))
		}
		if ks == keysymShiftL {
			hasShift = true
		}
		loc, err := kb.locate(op.ctx, op.s, ks)
		if err != nil {
			return err
		}
		shiftNeeded = shiftNeeded || loc.shift
		codes = append(codes, loc.code)
	}
	if shiftNeeded && !hasShift {
		loc, ok := kb.have[keysymShiftL]
		if !ok {
			return errors.New("no Shift key in the keymap")
		}
		codes = append([]int{loc.code}, codes...)
	}
	for _, c := range codes {
		if err := op.send(fakeEvent{typ: evKeyPress, detail: byte(c)}); err != nil {
			return err
		}
	}
	if err := op.then(nil); err != nil {
		return err
	}
	if err := sleep(op.ctx, clickGap); err != nil {
		return err
	}
	for i := len(codes) - 1; i >= 0; i-- {
		if err := op.send(fakeEvent{typ: evKeyRelease, detail: byte(codes[i])}); err != nil {
			return err
		}
	}
	return op.sync()
}

// typeText types text exactly (see keyboard.go for how).
func (op *inputOp) typeText(text string) error {
	kb := &op.d.kb
	if err := kb.load(op.ctx, op.s); err != nil {
		return err
	}
	// Caps Lock would turn typed letters into capitals: switch it off for
	// the duration.
	var capsOn bool
	err := op.s.do(op.ctx, callTimeout, "query pointer", func(c *xgb.Conn) error {
		r, err := xproto.QueryPointer(c, xproto.Window(op.s.root)).Reply()
		if err != nil {
			return err
		}
		capsOn = r.Mask&xproto.ModMaskLock != 0
		return nil
	})
	if err != nil {
		return err
	}
	caps, hasCaps := kb.have[keysymCapsLck]
	tapCaps := func() error {
		return op.send(fakeEvent{typ: evKeyPress, detail: byte(caps.code)}, fakeEvent{typ: evKeyRelease, detail: byte(caps.code)})
	}
	if capsOn && hasCaps {
		if err := tapCaps(); err != nil {
			return err
		}
		defer func() { _ = tapCaps(); _ = op.sync() }()
	}
	shift, hasShift := kb.have[keysymShiftL]
	seq := shared.TypingKeysyms(text)
	var app *appSync
	for i := 0; i < len(seq); {
		if app == nil {
			if _, ok := kb.have[seq[i]]; !ok {
				app = newAppSync(op.ctx, op.s)
			}
		}
		n, err := kb.prepare(op.ctx, op.s, seq[i:], app)
		if err != nil {
			return err
		}
		for _, ks := range seq[i : i+n] {
			loc := kb.loc(ks)
			evs := make([]fakeEvent, 0, 4)
			if loc.shift {
				if !hasShift {
					return errors.New("no Shift key in the keymap")
				}
				evs = append(evs, fakeEvent{typ: evKeyPress, detail: byte(shift.code)})
			}
			evs = append(evs, fakeEvent{typ: evKeyPress, detail: byte(loc.code)}, fakeEvent{typ: evKeyRelease, detail: byte(loc.code)})
			if loc.shift {
				evs = append(evs, fakeEvent{typ: evKeyRelease, detail: byte(shift.code)})
			}
			if err := op.send(evs...); err != nil {
				return err
			}
			i++
			if i%syncEvery == 0 {
				if err := op.sync(); err != nil {
					return err
				}
			}
			if err := sleep(op.ctx, keyGap); err != nil {
				return err
			}
		}
	}
	return op.sync()
}

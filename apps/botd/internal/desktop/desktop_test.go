package desktop

import (
	"bytes"
	"context"
	"errors"
	"image/jpeg"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/xproto"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

func ip(v int) *int { return &v }

// eventWindow is a full-screen window of our own that records the input
// events it receives: proof that an action landed where it should.
type eventWindow struct {
	c      *xconn
	wid    xproto.Window
	marker uint32     // the last marker take sent
	mu     sync.Mutex // mu guards evs
	evs    []xgb.Event
	keys   map[xproto.Keycode]xproto.Keysym
}

func newEventWindow(t *testing.T, x *testX) *eventWindow {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	xc, err := dialX(ctx, x.display, x.xauth, false)
	require.NoError(t, err)
	t.Cleanup(xc.close)
	c := xc.c
	wid, err := xproto.NewWindowId(c)
	require.NoError(t, err)
	mask := uint32(xproto.EventMaskButtonPress | xproto.EventMaskButtonRelease | xproto.EventMaskKeyPress |
		xproto.EventMaskKeyRelease | xproto.EventMaskPointerMotion)
	require.NoError(t, xproto.CreateWindowChecked(c, 0, wid, xproto.Window(xc.root), 0, 0, 1280, 800, 0,
		xproto.WindowClassInputOutput, 0, xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{0x336699, 1, mask}).Check())
	require.NoError(t, xproto.MapWindowChecked(c, wid).Check())
	// Without a window manager, focus follows the pointer root: give it to us.
	require.NoError(t, xproto.SetInputFocusChecked(c, xproto.InputFocusPointerRoot, wid, xproto.TimeCurrentTime).Check())
	w := &eventWindow{c: xc, wid: wid}
	setup := xproto.Setup(c)
	km, err := xproto.GetKeyboardMapping(c, setup.MinKeycode, byte(setup.MaxKeycode-setup.MinKeycode+1)).Reply()
	require.NoError(t, err)
	w.keys = map[xproto.Keycode]xproto.Keysym{}
	for i := 0; i <= int(setup.MaxKeycode-setup.MinKeycode); i++ {
		w.keys[setup.MinKeycode+xproto.Keycode(i)] = km.Keysyms[i*int(km.KeysymsPerKeycode)]
	}
	go func() {
		for {
			ev, xerr := c.WaitForEvent()
			if ev == nil && xerr == nil {
				return
			}
			if ev != nil {
				w.mu.Lock()
				w.evs = append(w.evs, ev)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// take returns and forgets the events so far, after the server and our
// reader have caught up: it sends the window a marker event (a client
// message, which the server queues behind every event already due to us)
// and waits until the reader has it.
func (w *eventWindow) take(t *testing.T) []xgb.Event {
	t.Helper()
	w.marker++
	m := w.marker
	ev := xproto.ClientMessageEvent{Format: 32, Window: w.wid, Type: xproto.AtomString,
		Data: xproto.ClientMessageDataUnionData32New([]uint32{m, 0, 0, 0, 0})}
	// An empty event mask sends it to the window's creator: us.
	require.NoError(t, xproto.SendEventChecked(w.c.c, false, w.wid, 0, string(ev.Bytes())).Check())
	deadline := time.Now().Add(30 * time.Second)
	for {
		w.mu.Lock()
		for i, e := range w.evs {
			if cm, ok := e.(xproto.ClientMessageEvent); ok && cm.Window == w.wid && cm.Data.Data32[0] == m {
				evs := w.evs[:i:i]
				w.evs = append([]xgb.Event(nil), w.evs[i+1:]...)
				w.mu.Unlock()
				return evs
			}
		}
		w.mu.Unlock()
		require.True(t, time.Now().Before(deadline), "the marker event never came back")
		time.Sleep(5 * time.Millisecond)
	}
}

// onFirstKey calls fn once a key press reaches the window (or when ctx ends).
func (w *eventWindow) onFirstKey(ctx context.Context, fn func()) {
	defer fn()
	for ctx.Err() == nil {
		w.mu.Lock()
		for _, e := range w.evs {
			if _, ok := e.(xproto.KeyPressEvent); ok {
				w.mu.Unlock()
				return
			}
		}
		w.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

// describe renders events compactly: "press1@100,200 release1@100,200".
func (w *eventWindow) describe(evs []xgb.Event, withMotion bool) string {
	var parts []string
	for _, ev := range evs {
		switch e := ev.(type) {
		case xproto.ButtonPressEvent:
			parts = append(parts, "press"+itoa(int(e.Detail))+"@"+itoa(int(e.EventX))+","+itoa(int(e.EventY)))
		case xproto.ButtonReleaseEvent:
			parts = append(parts, "release"+itoa(int(e.Detail))+"@"+itoa(int(e.EventX))+","+itoa(int(e.EventY)))
		case xproto.MotionNotifyEvent:
			if withMotion {
				parts = append(parts, "motion@"+itoa(int(e.EventX))+","+itoa(int(e.EventY)))
			}
		case xproto.KeyPressEvent:
			parts = append(parts, "key+"+keysymHex(w.keys[e.Detail]))
		case xproto.KeyReleaseEvent:
			parts = append(parts, "key-"+keysymHex(w.keys[e.Detail]))
		}
	}
	return strings.Join(parts, " ")
}

func itoa(v int) string { return strconv.Itoa(v) }

func keysymHex(k xproto.Keysym) string {
	const digits = "0123456789abcdef"
	v := uint32(k)
	out := []byte{}
	for i := 0; i < 4; i++ {
		out = append([]byte{digits[v&0xf]}, out...)
		v >>= 4
	}
	return string(out)
}

func TestActionsLand(t *testing.T) {
	x := startX(t)
	w := newEventWindow(t, x)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 60*time.Second)

	cases := []struct {
		name       string
		a          shared.Action
		want       string
		withMotion bool
	}{
		{"left click", shared.Action{Type: "click", X: ip(100), Y: ip(200)}, "press1@100,200 release1@100,200", false},
		{"right click", shared.Action{Type: "click", X: ip(640), Y: ip(400), Button: "right"}, "press3@640,400 release3@640,400", false},
		{"middle click", shared.Action{Type: "click", X: ip(1279), Y: ip(799), Button: "middle"}, "press2@1279,799 release2@1279,799", false},
		{"double click", shared.Action{Type: "double_click", X: ip(10), Y: ip(20)}, "press1@10,20 release1@10,20 press1@10,20 release1@10,20", false},
		{"move", shared.Action{Type: "move", X: ip(300), Y: ip(301)}, "motion@300,301", true},
		{"drag", shared.Action{Type: "drag", Path: []shared.Point{{X: 10, Y: 10}, {X: 42, Y: 10}, {X: 42, Y: 26}}},
			"motion@10,10 press1@10,10 motion@26,10 motion@42,10 motion@42,26 release1@42,26", true},
		{"scroll down 300px = 3 clicks", shared.Action{Type: "scroll", X: ip(500), Y: ip(500), ScrollY: ip(300)},
			"press5@500,500 release5@500,500 press5@500,500 release5@500,500 press5@500,500 release5@500,500", false},
		{"scroll up and right", shared.Action{Type: "scroll", X: ip(5), Y: ip(5), ScrollY: ip(-40), ScrollX: ip(120)},
			"press4@5,5 release4@5,5 press7@5,5 release7@5,5", false},
		{"ctrl+a", shared.Action{Type: "keypress", Keys: []string{"ctrl", "A"}}, "key+ffe3 key+0061 key-0061 key-ffe3", false},
		{"enter", shared.Action{Type: "keypress", Keys: []string{"Enter"}}, "key+ff0d key-ff0d", false},
		{"shift+f5", shared.Action{Type: "keypress", Keys: []string{"shift", "F5"}}, "key+ffe1 key+ffc2 key-ffc2 key-ffe1", false},
		{"wait", shared.Action{Type: "wait", Ms: ip(10)}, "", false},
		{"screenshot", shared.Action{Type: "screenshot"}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.take(t)
			require.NoError(t, d.Do(ctx, tc.a))
			got := w.describe(w.take(t), tc.withMotion)
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("invalid action refused", func(t *testing.T) {
		var ae *shared.ActionError
		require.ErrorAs(t, d.Do(ctx, shared.Action{Type: "click", X: ip(1280), Y: ip(0)}), &ae)
		require.Equal(t, "x", ae.Field)
	})
}

func TestCapture(t *testing.T) {
	x := startX(t)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 60*time.Second)

	require.NoError(t, d.Do(ctx, shared.Action{Type: "move", X: ip(321), Y: ip(123)}))
	f, err := d.Capture(ctx)
	require.NoError(t, err)
	require.Equal(t, 1280, f.Width)
	require.Equal(t, 800, f.Height)
	require.Equal(t, 321, f.Pointer.X)
	require.Equal(t, 123, f.Pointer.Y)
	img, err := jpeg.Decode(bytes.NewReader(f.JPEG))
	require.NoError(t, err)
	require.Equal(t, 1280, img.Bounds().Dx())
	require.Equal(t, 800, img.Bounds().Dy())

	// The pointer is drawn in: the frame differs near it from one with the
	// pointer elsewhere.
	require.NoError(t, d.Do(ctx, shared.Action{Type: "move", X: ip(900), Y: ip(700)}))
	g, err := d.Capture(ctx)
	require.NoError(t, err)
	require.NotEqual(t, f.Hash, g.Hash)
	img2, err := jpeg.Decode(bytes.NewReader(g.JPEG))
	require.NoError(t, err)
	diff := 0
	for yy := 118; yy < 140; yy++ {
		for xx := 316; xx < 340; xx++ {
			r1, g1, b1, _ := img.At(xx, yy).RGBA()
			r2, g2, b2, _ := img2.At(xx, yy).RGBA()
			if absDiff(r1, r2)+absDiff(g1, g2)+absDiff(b1, b2) > 3*0x2000 {
				diff++
			}
		}
	}
	require.Greater(t, diff, 10, "no cursor drawn near the pointer")

	// Unchanged screen: same hash, no encoding.
	h, changed, err := d.CaptureIfChanged(ctx, g.Hash)
	require.NoError(t, err)
	require.False(t, changed)
	require.Nil(t, h.JPEG)
	require.Equal(t, g.Hash, h.Hash)
	require.Equal(t, 900, h.Pointer.X)

	// A changed one is encoded.
	require.NoError(t, d.Do(ctx, shared.Action{Type: "move", X: ip(901), Y: ip(700)}))
	h, changed, err = d.CaptureIfChanged(ctx, g.Hash)
	require.NoError(t, err)
	require.True(t, changed)
	require.NotEmpty(t, h.JPEG)
}

func absDiff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestDisplayGone(t *testing.T) {
	x := startX(t)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 60*time.Second)
	_, err := d.Capture(ctx)
	require.NoError(t, err)

	// Capture in a loop while Xvfb is killed: the loop must end with
	// ErrDisplayGone, and nothing may panic.
	errc := make(chan error, 1)
	var captures atomic.Int64
	go func() {
		for {
			if _, err := d.Capture(ctx); err != nil {
				errc <- err
				return
			}
			captures.Add(1)
		}
	}()
	require.Eventually(t, func() bool { return captures.Load() >= 2 }, 30*time.Second, 5*time.Millisecond, "the capture loop never ran")
	x.kill()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, ErrDisplayGone)
	case <-time.After(10 * time.Second):
		t.Fatal("capture did not fail after Xvfb died")
	}
	require.ErrorIs(t, d.Do(ctx, shared.Action{Type: "click", X: ip(1), Y: ip(1)}), ErrDisplayGone)
	_, err = d.Capture(ctx)
	require.ErrorIs(t, err, ErrDisplayGone)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close())
}

func TestNoDisplay(t *testing.T) {
	d, err := New(Target{Display: ":179", Width: 1280, Height: 800}, Options{})
	require.NoError(t, err)
	defer d.Close()
	ctx := testenv.Context(t, 10*time.Second)
	_, err = d.Capture(ctx)
	require.ErrorIs(t, err, ErrDisplayGone)
	require.ErrorIs(t, d.Do(ctx, shared.Action{Type: "move", X: ip(1), Y: ip(1)}), ErrDisplayGone)
}

func TestCancelAbortsTyping(t *testing.T) {
	x := startX(t)
	w := newEventWindow(t, x)
	d := newDesktop(t, x)
	ctx, cancel := context.WithCancel(testenv.Context(t, 60*time.Second))
	text := strings.Repeat("abc日本語", 500)
	w.take(t)
	go w.onFirstKey(ctx, cancel) // cancel once typing has begun
	err := d.Do(ctx, shared.Action{Type: "type", Text: &text})
	require.ErrorIs(t, err, context.Canceled)
	// Nothing stays held down: the server's keyboard comes back to all keys
	// up (the releases may still be on their way from the desktop's
	// connection), and presses and releases pair up.
	keysUp := func() bool {
		km, err := xproto.QueryKeymap(w.c.c).Reply()
		require.NoError(t, err)
		for _, b := range km.Keys {
			if b != 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for !keysUp() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	evs := w.take(t)
	down := map[xproto.Keycode]int{}
	presses := 0
	for _, ev := range evs {
		switch e := ev.(type) {
		case xproto.KeyPressEvent:
			down[e.Detail]++
			presses++
		case xproto.KeyReleaseEvent:
			down[e.Detail]--
		}
	}
	for k, n := range down {
		require.Zero(t, n, "keycode %d left down", k)
	}
	require.Positive(t, presses)
	require.Less(t, presses, len([]rune(text)), "the typing ran to its end: not cut off")
	require.False(t, errors.Is(err, ErrDisplayGone))
}

// TestDisplayGoneMidTyping: Xvfb dies while a long type action runs.
func TestDisplayGoneMidTyping(t *testing.T) {
	x := startX(t)
	w := newEventWindow(t, x)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 60*time.Second)
	text := strings.Repeat("typing 日本語 😀 ", 300)
	w.take(t)
	go w.onFirstKey(ctx, x.kill) // the display dies once typing has begun
	err := d.Do(ctx, shared.Action{Type: "type", Text: &text})
	require.ErrorIs(t, err, ErrDisplayGone)
	require.NoError(t, d.Close())
}

// TestCapturePlainGetImage: without MIT-SHM the plain GetImage fallback
// sees the same pixels (same hash) as the shared-memory path.
func TestCapturePlainGetImage(t *testing.T) {
	x := startX(t)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 20*time.Second)
	require.NoError(t, d.Do(ctx, shared.Action{Type: "move", X: ip(50), Y: ip(60)}))
	f, err := d.Capture(ctx)
	require.NoError(t, err)
	require.NotNil(t, d.cap.buf, "MIT-SHM was not used")
	d.capMu.Lock()
	d.cap.noShm = true
	d.capMu.Unlock()
	g, err := d.Capture(ctx)
	require.NoError(t, err)
	require.Equal(t, f.Hash, g.Hash)
	require.Equal(t, f.Pointer, g.Pointer)
	require.NotEmpty(t, g.JPEG)
}

package desktop

import (
	"context"
	"errors"
	"time"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/xproto"
)

// A barrier tells us that the application taking the keys has processed
// every event sent so far. Typing needs it around keymap changes: Chromium
// reloads its keymap when it *handles* a MappingNotify, reading the server's
// keymap as it is then. A busy Chromium that is still behind on earlier key
// events while we remap again would read those with the new keymap (we saw
// "î" typed for "Ö" under load). _NET_WM_PING (EWMH) is the one request
// every toolkit (Chromium, GTK, Qt) answers from its event loop, in order
// with the key events: its pong is the barrier. An application without it
// gets fixed pauses instead.

// pingTimeout bounds one barrier; past it we fall back to fixed pauses.
var pingTimeout = 2 * time.Second

// errNoPing means the focused application does not speak _NET_WM_PING.
var errNoPing = errors.New("focused window does not answer _NET_WM_PING")

// pingTarget is the focused client window that accepts _NET_WM_PING, or 0.
type pingTarget struct {
	win                xproto.Window
	wmProtocols, ping  xproto.Atom
	selectedRootEvents bool
}

// findPingTarget looks for the top-level client window with the keyboard
// focus (or under the pointer when focus follows it) that lists
// _NET_WM_PING in WM_PROTOCOLS.
func findPingTarget(ctx context.Context, s *session) (pingTarget, error) {
	var pt pingTarget
	err := s.do(ctx, callTimeout, "find focused window", func(c *xgb.Conn) error {
		root := xproto.Window(s.root)
		protoCookie := xproto.InternAtom(c, false, uint16(len("WM_PROTOCOLS")), "WM_PROTOCOLS")
		pingCookie := xproto.InternAtom(c, false, uint16(len("_NET_WM_PING")), "_NET_WM_PING")
		focusCookie := xproto.GetInputFocus(c)
		pr, err := protoCookie.Reply()
		if err != nil {
			return err
		}
		pg, err := pingCookie.Reply()
		if err != nil {
			return err
		}
		pt.wmProtocols, pt.ping = pr.Atom, pg.Atom
		f, err := focusCookie.Reply()
		if err != nil {
			return err
		}
		w := f.Focus
		if w == xproto.WindowNone || w == 1 /* PointerRoot */ || w == root {
			q, err := xproto.QueryPointer(c, root).Reply()
			if err != nil {
				return err
			}
			w = q.Child
		}
		has := func(w xproto.Window) bool {
			r, err := xproto.GetProperty(c, false, w, pt.wmProtocols, xproto.AtomAtom, 0, 32).Reply()
			if err != nil || r.Format != 32 {
				return false
			}
			for i := 0; i+4 <= len(r.Value); i += 4 {
				if xproto.Atom(xgb.Get32(r.Value[i:])) == pt.ping {
					return true
				}
			}
			return false
		}
		// Walk up from the focus to the root, then down one or two levels
		// (a window manager's frame holds the client).
		for cur := w; cur != 0 && cur != root; {
			if has(cur) {
				pt.win = cur
				return nil
			}
			t, err := xproto.QueryTree(c, cur).Reply()
			if err != nil {
				return err
			}
			if t.Parent == root {
				break
			}
			cur = t.Parent
		}
		var down func(w xproto.Window, depth int) bool
		down = func(w xproto.Window, depth int) bool {
			if has(w) {
				pt.win = w
				return true
			}
			if depth == 0 {
				return false
			}
			t, err := xproto.QueryTree(c, w).Reply()
			if err != nil {
				return false
			}
			for _, ch := range t.Children {
				if down(ch, depth-1) {
					return true
				}
			}
			return false
		}
		if w != 0 && w != root {
			for cur := w; ; {
				t, err := xproto.QueryTree(c, cur).Reply()
				if err != nil {
					return err
				}
				if t.Parent == root || t.Parent == 0 {
					down(cur, 2)
					break
				}
				cur = t.Parent
			}
		}
		return nil
	})
	if err != nil {
		return pingTarget{}, err
	}
	if pt.win == 0 {
		return pingTarget{}, errNoPing
	}
	return pt, nil
}

// barrier pings the target and waits for its pong: when it returns nil,
// the application has handled every event sent before.
func (pt *pingTarget) barrier(ctx context.Context, s *session) error {
	token, ch := s.pongs.add()
	defer s.pongs.forget(token)
	err := s.do(ctx, callTimeout, "ping", func(c *xgb.Conn) error {
		root := xproto.Window(s.root)
		if !pt.selectedRootEvents {
			// Pongs go to the root window with SubstructureNotify.
			a, err := xproto.GetWindowAttributes(c, root).Reply()
			if err != nil {
				return err
			}
			mask := a.YourEventMask | xproto.EventMaskSubstructureNotify
			if err := xproto.ChangeWindowAttributesChecked(c, root, xproto.CwEventMask, []uint32{uint32(mask)}).Check(); err != nil {
				return err
			}
			pt.selectedRootEvents = true
		}
		ev := xproto.ClientMessageEvent{
			Format: 32,
			Window: pt.win,
			Type:   pt.wmProtocols,
			Data:   xproto.ClientMessageDataUnionData32New([]uint32{uint32(pt.ping), token, uint32(pt.win), 0, 0}),
		}
		return xproto.SendEventChecked(c, false, pt.win, xproto.EventMaskNoEvent, string(ev.Bytes())).Check()
	})
	if err != nil {
		return err
	}
	t := time.NewTimer(pingTimeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return errNoPing
	case <-ctx.Done():
		return ctx.Err()
	}
}

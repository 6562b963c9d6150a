package desktop

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/xproto"

	"github.com/open-bot/computer/pkg/shared"
)

// Windows come from the window manager through EWMH (xfwm4 keeps these
// root properties): _NET_CLIENT_LIST_STACKING names the application windows
// bottom to top, _NET_ACTIVE_WINDOW the focused one; each window's
// _NET_WM_NAME (or WM_NAME), WM_CLASS, _NET_WM_WINDOW_TYPE, _NET_WM_STATE
// and _NET_FRAME_EXTENTS say the rest. Window actions are EWMH client
// messages to the root, as a pager sends them, so the window manager does
// the focusing, closing, moving and resizing its own way.

var windowAtoms = []string{
	"_NET_CLIENT_LIST_STACKING", "_NET_ACTIVE_WINDOW", "_NET_WM_NAME", "UTF8_STRING",
	"_NET_WM_WINDOW_TYPE", "_NET_WM_WINDOW_TYPE_DESKTOP", "_NET_WM_WINDOW_TYPE_DOCK",
	"_NET_WM_STATE", "_NET_WM_STATE_HIDDEN", "_NET_FRAME_EXTENTS",
	"_NET_CLOSE_WINDOW", "_NET_MOVERESIZE_WINDOW",
}

type atoms map[string]xproto.Atom

func internAtoms(c *xgb.Conn) (atoms, error) {
	cookies := make([]xproto.InternAtomCookie, len(windowAtoms))
	for i, n := range windowAtoms {
		cookies[i] = xproto.InternAtom(c, false, uint16(len(n)), n)
	}
	out := atoms{}
	for i, ck := range cookies {
		r, err := ck.Reply()
		if err != nil {
			return nil, fmt.Errorf("intern %s: %w", windowAtoms[i], err)
		}
		out[windowAtoms[i]] = r.Atom
	}
	return out, nil
}

// prop reads up to max 32-bit units of property p of w (nil when unset).
func prop(c *xgb.Conn, w xproto.Window, p xproto.Atom, max uint32) (*xproto.GetPropertyReply, error) {
	r, err := xproto.GetProperty(c, false, w, p, xproto.GetPropertyTypeAny, 0, max).Reply()
	if err != nil {
		return nil, err
	}
	if r.Format == 0 {
		return nil, nil
	}
	return r, nil
}

func u32s(r *xproto.GetPropertyReply) []uint32 {
	if r == nil || r.Format != 32 {
		return nil
	}
	out := make([]uint32, 0, len(r.Value)/4)
	for i := 0; i+4 <= len(r.Value); i += 4 {
		out = append(out, binary.LittleEndian.Uint32(r.Value[i:]))
	}
	return out
}

// clients is the window manager's client list, bottom to top.
func clients(c *xgb.Conn, root xproto.Window, a atoms) ([]xproto.Window, error) {
	r, err := prop(c, root, a["_NET_CLIENT_LIST_STACKING"], 4096)
	if err != nil {
		return nil, err
	}
	var out []xproto.Window
	for _, v := range u32s(r) {
		out = append(out, xproto.Window(v))
	}
	return out, nil
}

// Windows lists the screen's application windows (panels and the desktop
// left out), bottom to top.
func (d *Desktop) Windows(ctx context.Context) (ws []shared.Window, err error) {
	defer d.guard("windows", &err)
	s, err := d.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("windows: %w", err)
	}
	err = s.do(ctx, callTimeout, "windows", func(c *xgb.Conn) error {
		root := xproto.Window(s.root)
		a, err := internAtoms(c)
		if err != nil {
			return err
		}
		list, err := clients(c, root, a)
		if err != nil {
			return err
		}
		var active xproto.Window
		if r, err := prop(c, root, a["_NET_ACTIVE_WINDOW"], 1); err == nil {
			if v := u32s(r); len(v) == 1 {
				active = xproto.Window(v[0])
			}
		}
		ws = make([]shared.Window, 0, len(list))
		for _, w := range list {
			win, ok := describeWindow(c, root, w, a)
			if !ok {
				continue // gone since the list was read, or a panel
			}
			win.Focused = w == active
			ws = append(ws, win)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("windows: %w", err)
	}
	return ws, nil
}

// describeWindow reads one client window; ok is false for a window that
// is gone, the desktop or a dock (panel).
func describeWindow(c *xgb.Conn, root, w xproto.Window, a atoms) (shared.Window, bool) {
	if r, err := prop(c, w, a["_NET_WM_WINDOW_TYPE"], 16); err != nil {
		return shared.Window{}, false
	} else {
		for _, t := range u32s(r) {
			if xproto.Atom(t) == a["_NET_WM_WINDOW_TYPE_DESKTOP"] || xproto.Atom(t) == a["_NET_WM_WINDOW_TYPE_DOCK"] {
				return shared.Window{}, false
			}
		}
	}
	geo, err := xproto.GetGeometry(c, xproto.Drawable(w)).Reply()
	if err != nil {
		return shared.Window{}, false
	}
	tr, err := xproto.TranslateCoordinates(c, w, root, 0, 0).Reply()
	if err != nil {
		return shared.Window{}, false
	}
	win := shared.Window{ID: shared.WindowID(uint32(w)),
		Box: shared.Rect{X: int(tr.DstX), Y: int(tr.DstY), W: int(geo.Width), H: int(geo.Height)}}
	if ext := frameExtents(c, w, a); ext != nil {
		win.Box = shared.Rect{X: win.Box.X - int(ext[0]), Y: win.Box.Y - int(ext[2]),
			W: win.Box.W + int(ext[0]) + int(ext[1]), H: win.Box.H + int(ext[2]) + int(ext[3])}
	}
	win.Title = windowTitle(c, w, a)
	if r, err := prop(c, w, xproto.AtomWmClass, 64); err == nil && r != nil {
		// WM_CLASS is "instance\0class\0": the class names the program.
		parts := strings.Split(strings.TrimRight(string(r.Value), "\x00"), "\x00")
		win.App = parts[len(parts)-1]
		if !utf8.ValidString(win.App) {
			win.App = strings.ToValidUTF8(win.App, "?")
		}
	}
	if r, err := prop(c, w, a["_NET_WM_STATE"], 32); err == nil {
		for _, st := range u32s(r) {
			if xproto.Atom(st) == a["_NET_WM_STATE_HIDDEN"] {
				win.Minimized = true
			}
		}
	}
	return win, true
}

// frameExtents is _NET_FRAME_EXTENTS: left, right, top, bottom.
func frameExtents(c *xgb.Conn, w xproto.Window, a atoms) []uint32 {
	r, err := prop(c, w, a["_NET_FRAME_EXTENTS"], 4)
	if err != nil {
		return nil
	}
	if v := u32s(r); len(v) == 4 && v[0] < 200 && v[1] < 200 && v[2] < 200 && v[3] < 200 {
		return v
	}
	return nil
}

// windowTitle is _NET_WM_NAME (UTF-8), else WM_NAME (Latin-1), cut to
// shared.MaxWindowTitle runes.
func windowTitle(c *xgb.Conn, w xproto.Window, a atoms) string {
	var t string
	if r, err := prop(c, w, a["_NET_WM_NAME"], 1024); err == nil && r != nil && r.Format == 8 {
		t = strings.ToValidUTF8(string(r.Value), "?")
	} else if r, err := prop(c, w, xproto.AtomWmName, 1024); err == nil && r != nil && r.Format == 8 {
		rs := make([]rune, len(r.Value))
		for i, b := range r.Value {
			rs[i] = rune(b)
		}
		t = string(rs)
	}
	if utf8.RuneCountInString(t) > shared.MaxWindowTitle {
		t = string([]rune(t)[:shared.MaxWindowTitle]) + "…"
	}
	return t
}

// errWindowGone answers an action on a window the screen does not have.
func errWindowGone(id string) error {
	return shared.Errorf(http.StatusNotFound, shared.CodeWindowGone, "window %s is not on this screen (it closed, or the id is not from this screen's window list)", id)
}

// windowAction runs a focus_window, close_window, move_window or
// resize_window action (already validated).
func (d *Desktop) windowAction(ctx context.Context, act shared.Action) error {
	xid, _ := shared.ParseWindowID(act.Window)
	s, err := d.session(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", act.Type, err)
	}
	var gone bool
	err = s.do(ctx, callTimeout, act.Type, func(c *xgb.Conn) error {
		root := xproto.Window(s.root)
		a, err := internAtoms(c)
		if err != nil {
			return err
		}
		list, err := clients(c, root, a)
		if err != nil {
			return err
		}
		w := xproto.Window(xid)
		found := false
		for _, cw := range list {
			found = found || cw == w
		}
		if _, ok := describeWindow(c, root, w, a); !found || !ok {
			gone = true
			return nil
		}
		// Source indication 2: a pager, which window managers obey.
		const source = 2
		switch act.Type {
		case shared.ActionFocusWindow:
			return sendRootMessage(c, root, w, a["_NET_ACTIVE_WINDOW"], source, 0, 0, 0, 0)
		case shared.ActionCloseWindow:
			return sendRootMessage(c, root, w, a["_NET_CLOSE_WINDOW"], 0, source, 0, 0, 0)
		case shared.ActionMoveWindow:
			// NorthWest gravity: x,y is the frame's top-left corner, the
			// box the window list reports.
			flags := uint32(xproto.GravityNorthWest) | 1<<8 | 1<<9 | source<<12
			return sendRootMessage(c, root, w, a["_NET_MOVERESIZE_WINDOW"], flags, uint32(*act.X), uint32(*act.Y), 0, 0)
		case shared.ActionResizeWindow:
			// The message sizes the client area; the action sizes the
			// frame (the box the list reports).
			cw, ch := *act.Width, *act.Height
			if ext := frameExtents(c, w, a); ext != nil {
				cw -= int(ext[0] + ext[1])
				ch -= int(ext[2] + ext[3])
			}
			cw, ch = max(cw, 1), max(ch, 1)
			flags := uint32(xproto.GravityNorthWest) | 1<<10 | 1<<11 | source<<12
			return sendRootMessage(c, root, w, a["_NET_MOVERESIZE_WINDOW"], flags, 0, 0, uint32(cw), uint32(ch))
		}
		return fmt.Errorf("not a window action")
	})
	if err != nil {
		return fmt.Errorf("%s: %w", act.Type, err)
	}
	if gone {
		return errWindowGone(act.Window)
	}
	return nil
}

// sendRootMessage sends an EWMH client message about w to the root window.
func sendRootMessage(c *xgb.Conn, root, w xproto.Window, typ xproto.Atom, data ...uint32) error {
	var d [5]uint32
	copy(d[:], data)
	ev := xproto.ClientMessageEvent{Format: 32, Window: w, Type: typ,
		Data: xproto.ClientMessageDataUnionData32New(d[:])}
	return xproto.SendEventChecked(c, false, root,
		xproto.EventMaskSubstructureNotify|xproto.EventMaskSubstructureRedirect, string(ev.Bytes())).Check()
}

package screen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/safefs"
)

// x11probe is a deliberately tiny X11 client for readiness checks: connect
// with our cookie, intern an atom, read a root-window property. It exists
// because xgb panics the whole process when the server dies under it
// (FIELD-NOTES) and a readiness check runs exactly while servers come and
// go. Every call has a deadline; nothing here can panic on a dead server.
type x11probe struct {
	conn net.Conn
	root uint32
}

// errXAuth means the server answered but refused our cookie.
var errXAuth = errors.New("x server refused the cookie")

// x11SocketPath is where an X server for display n listens locally.
func x11SocketPath(n int) string { return "/tmp/.X11-unix/X" + strconv.Itoa(n) }

// dialX connects to display n over its unix socket and authenticates with
// cookie (MIT-MAGIC-COOKIE-1).
// Only a socket owned by uid (the desktop user's Xvfb) is dialed: one that
// another user placed in /tmp/.X11-unix would receive the cookie.
func dialX(ctx context.Context, display, uid int, cookie []byte) (*x11probe, error) {
	if err := safefs.CheckSocket(x11SocketPath(display), uid); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", x11SocketPath(display))
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(2 * time.Second)
	}
	_ = c.SetDeadline(dl)
	p := &x11probe{conn: c}
	if err := p.setup(cookie); err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

func pad4(n int) int { return (4 - n%4) % 4 }

func (p *x11probe) setup(cookie []byte) error {
	name := []byte(cookieName)
	req := make([]byte, 12, 12+len(name)+pad4(len(name))+len(cookie)+pad4(len(cookie)))
	req[0] = 'l' // little-endian
	binary.LittleEndian.PutUint16(req[2:], 11)
	binary.LittleEndian.PutUint16(req[4:], 0)
	binary.LittleEndian.PutUint16(req[6:], uint16(len(name)))
	binary.LittleEndian.PutUint16(req[8:], uint16(len(cookie)))
	req = append(req, name...)
	req = append(req, make([]byte, pad4(len(name)))...)
	req = append(req, cookie...)
	req = append(req, make([]byte, pad4(len(cookie)))...)
	if _, err := p.conn.Write(req); err != nil {
		return err
	}
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(p.conn, hdr); err != nil {
		return err
	}
	rest := make([]byte, int(binary.LittleEndian.Uint16(hdr[6:]))*4)
	if _, err := io.ReadFull(p.conn, rest); err != nil {
		return err
	}
	switch hdr[0] {
	case 1:
	case 0, 2:
		return errXAuth
	default:
		return fmt.Errorf("x setup: status %d", hdr[0])
	}
	// Fixed part of the success reply (after the 8-byte header): 32 bytes,
	// then the vendor string, then 8 bytes per pixmap format, then screens.
	if len(rest) < 32 {
		return errors.New("x setup: short reply")
	}
	vendorLen := int(binary.LittleEndian.Uint16(rest[16:]))
	formats := int(rest[21])
	off := 32 + vendorLen + pad4(vendorLen) + 8*formats
	if len(rest) < off+4 {
		return errors.New("x setup: no screen")
	}
	p.root = binary.LittleEndian.Uint32(rest[off:])
	return nil
}

// reply reads one 32-byte reply (plus its extra data), skipping events; an
// X error becomes a Go error.
func (p *x11probe) reply() ([]byte, error) {
	for {
		b := make([]byte, 32)
		if _, err := io.ReadFull(p.conn, b); err != nil {
			return nil, err
		}
		switch b[0] {
		case 0:
			return nil, fmt.Errorf("x error %d", b[1])
		case 1:
			extra := int(binary.LittleEndian.Uint32(b[4:])) * 4
			if extra > 1<<20 {
				return nil, errors.New("x reply too long")
			}
			if extra > 0 {
				more := make([]byte, extra)
				if _, err := io.ReadFull(p.conn, more); err != nil {
					return nil, err
				}
				b = append(b, more...)
			}
			return b, nil
		}
		// An event: we select none, but skip any anyway.
	}
}

// atom interns name without creating it (0 when the atom does not exist).
func (p *x11probe) atom(name string) (uint32, error) {
	n := len(name)
	req := make([]byte, 8, 8+n+pad4(n))
	req[0] = 16 // InternAtom
	req[1] = 1  // only-if-exists
	binary.LittleEndian.PutUint16(req[2:], uint16((8+n+pad4(n))/4))
	binary.LittleEndian.PutUint16(req[4:], uint16(n))
	req = append(req, name...)
	req = append(req, make([]byte, pad4(n))...)
	if _, err := p.conn.Write(req); err != nil {
		return 0, err
	}
	b, err := p.reply()
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[8:]), nil
}

// property reads up to longs 32-bit items of property prop on win; n is 0
// when it is not set (or not 32-bit).
func (p *x11probe) property(win, prop uint32, longs uint32) (vals []uint32, err error) {
	req := make([]byte, 24)
	req[0] = 20 // GetProperty
	binary.LittleEndian.PutUint16(req[2:], 6)
	binary.LittleEndian.PutUint32(req[4:], win)
	binary.LittleEndian.PutUint32(req[8:], prop)
	binary.LittleEndian.PutUint32(req[12:], 0) // AnyPropertyType
	binary.LittleEndian.PutUint32(req[16:], 0)
	binary.LittleEndian.PutUint32(req[20:], longs)
	if _, err := p.conn.Write(req); err != nil {
		return nil, err
	}
	b, err := p.reply()
	if err != nil {
		return nil, err
	}
	typ, format, n := binary.LittleEndian.Uint32(b[8:]), b[1], binary.LittleEndian.Uint32(b[16:])
	if typ == 0 || format != 32 {
		return nil, nil
	}
	for i := uint32(0); i < n && int(32+4*i+4) <= len(b); i++ {
		vals = append(vals, binary.LittleEndian.Uint32(b[32+4*i:]))
	}
	return vals, nil
}

// windowProperty reads a WINDOW-typed (32-bit) property of win; ok is false
// when it is not set.
func (p *x11probe) windowProperty(win, prop uint32) (uint32, bool, error) {
	vals, err := p.property(win, prop, 1)
	if err != nil || len(vals) == 0 {
		return 0, false, err
	}
	return vals[0], true, nil
}

// clients counts the windows the window manager manages
// (_NET_CLIENT_LIST on the root; the panel and the desktop are two).
func (p *x11probe) clients() (int, error) {
	a, err := p.atom("_NET_CLIENT_LIST")
	if err != nil || a == 0 {
		return 0, err
	}
	vals, err := p.property(p.root, a, 256)
	return len(vals), err
}

// wmRunning reports whether an EWMH window manager is up: the root's
// _NET_SUPPORTING_WM_CHECK names a window whose own property points at
// itself (the spec's proof that the WM is alive, not a stale property).
func (p *x11probe) wmRunning() (bool, error) {
	a, err := p.atom("_NET_SUPPORTING_WM_CHECK")
	if err != nil || a == 0 {
		return false, err
	}
	w, ok, err := p.windowProperty(p.root, a)
	if err != nil || !ok {
		return false, err
	}
	self, ok, err := p.windowProperty(w, a)
	if err != nil {
		// The window named by a stale property is gone: BadWindow.
		return false, nil
	}
	return ok && self == w, nil
}

func (p *x11probe) Close() error { return p.conn.Close() }

package desktop

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/xproto"

	"github.com/open-bot/computer/apps/botd/internal/safefs"
)

// ErrDisplayGone means the X server of the target is not there (never
// started, killed, or not answering): the screen has crashed.
var ErrDisplayGone = errors.New("display gone")

// xgbLoggerOnce silences xgb's package logger: it writes to stderr on every
// read error, and it would log nothing we do not already report.
var xgbLoggerOnce sync.Once

// safeConn wraps the socket to the X server so that xgb never sees a read
// error. xgb reacts to one by closing its request channel, and a second
// close (ours, or another read error) panics the whole process ("close of
// closed channel"). Instead the first error marks the display dead and every
// later Read blocks forever: xgb's reader goroutine parks, and our callers
// learn about the death from dead, not from xgb.
type safeConn struct {
	net.Conn
	cookie []byte // MIT-MAGIC-COOKIE-1 data, nil for no auth

	// mu guards wroteSetup (the first Write, rewritten with our cookie).
	mu         sync.Mutex
	wroteSetup bool

	deadOnce sync.Once
	dead     chan struct{} // closed at the first I/O error or Close
	deadErr  error         // the first error; set before dead is closed
}

func (c *safeConn) markDead(err error) {
	c.deadOnce.Do(func() {
		c.deadErr = err
		close(c.dead)
	})
}

func (c *safeConn) Read(p []byte) (int, error) {
	select {
	case <-c.dead:
		select {} // park xgb's reader for good; see safeConn.
	default:
	}
	n, err := c.Conn.Read(p)
	if err != nil {
		c.markDead(err)
		if n > 0 {
			return n, nil
		}
		select {}
	}
	return n, nil
}

// Write rewrites xgb's connection setup (which reads $XAUTHORITY, a process
// global) with the cookie of this target, so several displays with their own
// cookie files can be driven from one process.
func (c *safeConn) Write(p []byte) (int, error) {
	select {
	case <-c.dead:
		return 0, fmt.Errorf("x connection: %w", ErrDisplayGone)
	default:
	}
	c.mu.Lock()
	first := !c.wroteSetup
	c.wroteSetup = true
	c.mu.Unlock()
	if first && len(p) >= 12 && p[0] == 'l' {
		if _, err := c.Conn.Write(setupRequest(c.cookie)); err != nil {
			c.markDead(err)
			return 0, err
		}
		return len(p), nil
	}
	n, err := c.Conn.Write(p)
	if err != nil {
		c.markDead(err)
	}
	return n, err
}

// setupRequest is the little-endian X11 connection setup with cookie.
func setupRequest(cookie []byte) []byte {
	name := ""
	if len(cookie) > 0 {
		name = "MIT-MAGIC-COOKIE-1"
	}
	pad := func(n int) int { return (n + 3) &^ 3 }
	buf := make([]byte, 12+pad(len(name))+pad(len(cookie)))
	buf[0] = 'l'
	binary.LittleEndian.PutUint16(buf[2:], 11)
	binary.LittleEndian.PutUint16(buf[6:], uint16(len(name)))
	binary.LittleEndian.PutUint16(buf[8:], uint16(len(cookie)))
	copy(buf[12:], name)
	copy(buf[12+pad(len(name)):], cookie)
	return buf
}

// displayNumber parses ":10" or ":10.0" into 10.
func displayNumber(display string) (int, error) {
	s, ok := strings.CutPrefix(display, ":")
	if !ok {
		return 0, fmt.Errorf("display %q: only local displays (:N) are supported", display)
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("display %q: bad number", display)
	}
	return n, nil
}

// readCookie returns the MIT-MAGIC-COOKIE-1 for display number num from an
// Xauthority file: an entry for that display number, or one with an empty
// display number (family-wild files have one such entry).
// readCookie reads the cookie file without following a link or blocking on
// a FIFO, and only when owner (>= 0) owns it: it lives in desktop's home.
func readCookie(path string, num, owner int) ([]byte, error) {
	b, err := safefs.ReadOwned(path, 64<<10, owner)
	if err != nil {
		return nil, fmt.Errorf("read xauthority: %w", err)
	}
	return parseCookie(b, num)
}

func parseCookie(b []byte, num int) ([]byte, error) {
	want := strconv.Itoa(num)
	var fallback []byte
	str := func() ([]byte, bool) {
		if len(b) < 2 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return nil, false
		}
		s := b[2 : 2+n]
		b = b[2+n:]
		return s, true
	}
	for len(b) > 0 {
		if len(b) < 2 {
			break
		}
		b = b[2:] // family: we only ever talk to local displays
		_, ok1 := str()
		disp, ok2 := str()
		name, ok3 := str()
		data, ok4 := str()
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, errors.New("xauthority: truncated entry")
		}
		if string(name) != "MIT-MAGIC-COOKIE-1" || len(data) != 16 {
			continue
		}
		switch string(disp) {
		case want:
			return append([]byte(nil), data...), nil
		case "":
			if fallback == nil {
				fallback = append([]byte(nil), data...)
			}
		}
	}
	if fallback != nil {
		return fallback, nil
	}
	return nil, fmt.Errorf("xauthority: no MIT-MAGIC-COOKIE-1 for display :%d", num)
}

// xconn is one live xgb connection and its death signal.
type xconn struct {
	c    *xgb.Conn
	sc   *safeConn
	root uint32 // root window id
	// screen geometry and depth of screen 0.
	width, height int
	depth         byte
	pongs         pongWaiters
}

// dialX connects to the target's display with its cookie. It fails with
// ErrDisplayGone when nothing listens. drain discards events (tests that
// read events pass false).
func dialX(ctx context.Context, display, xauth string, drain bool) (*xconn, error) {
	return dialXOwned(ctx, display, xauth, -1, drain)
}

// dialXOwned is dialX for a server run by uid owner (-1: any): its cookie
// file and its socket must be owner's, so a socket or a file another user
// placed is never used (the cookie would go to them).
func dialXOwned(ctx context.Context, display, xauth string, owner int, drain bool) (*xconn, error) {
	xgbLoggerOnce.Do(func() { xgb.Logger.SetOutput(io.Discard) })
	num, err := displayNumber(display)
	if err != nil {
		return nil, err
	}
	var cookie []byte
	if xauth != "" {
		if cookie, err = readCookie(xauth, num, owner); err != nil {
			return nil, err
		}
	}
	sock := fmt.Sprintf("/tmp/.X11-unix/X%d", num)
	if owner >= 0 {
		if err := safefs.CheckSocket(sock, owner); err != nil {
			return nil, fmt.Errorf("dial %s: %w: %v", display, ErrDisplayGone, err)
		}
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	raw, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w: %v", display, ErrDisplayGone, err)
	}
	sc := &safeConn{Conn: raw, cookie: cookie, dead: make(chan struct{})}
	type result struct {
		c   *xgb.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- result{err: fmt.Errorf("xgb panic: %v", r)}
			}
		}()
		c, err := xgb.NewConnNet(sc)
		ch <- result{c, err}
	}()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			raw.Close()
			return nil, fmt.Errorf("connect %s: %w: %v", display, ErrDisplayGone, r.err)
		}
		setup := xproto.Setup(r.c)
		if setup == nil || len(setup.Roots) == 0 {
			raw.Close()
			return nil, fmt.Errorf("connect %s: no screens", display)
		}
		s := setup.Roots[0]
		x := &xconn{c: r.c, sc: sc, root: uint32(s.Root), width: int(s.WidthInPixels), height: int(s.HeightInPixels), depth: s.RootDepth}
		// Nobody else reads xgb's event queue; without a drain, 500
		// MappingNotify events (one per remap while typing) fill it and
		// xgb's reader blocks for good.
		if drain {
			go x.drain()
		}
		return x, nil
	case <-sc.dead:
		raw.Close()
		return nil, fmt.Errorf("connect %s: %w: %v", display, ErrDisplayGone, sc.deadErr)
	case <-timer.C:
		sc.markDead(errors.New("setup timed out"))
		raw.Close()
		return nil, fmt.Errorf("connect %s: %w: setup timed out", display, ErrDisplayGone)
	case <-ctx.Done():
		sc.markDead(ctx.Err())
		raw.Close()
		return nil, fmt.Errorf("connect %s: %w", display, ctx.Err())
	}
}

// drain reads xgb's event queue until the connection ends, handing
// ClientMessage events (pongs) to whoever waits for them.
func (x *xconn) drain() {
	for {
		ev, xerr := x.c.WaitForEvent()
		if ev == nil && xerr == nil {
			return
		}
		if cm, ok := ev.(xproto.ClientMessageEvent); ok && cm.Format == 32 && len(cm.Data.Data32) >= 2 {
			x.pongs.deliver(cm.Data.Data32[1])
		}
	}
}

// pongWaiters routes _NET_WM_PING replies by their token.
type pongWaiters struct {
	// mu guards next and waiting.
	mu      sync.Mutex
	next    uint32
	waiting map[uint32]chan struct{}
}

// add registers a new token and the channel closed when its pong arrives.
func (p *pongWaiters) add() (uint32, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == nil {
		p.waiting = map[uint32]chan struct{}{}
		// Far from the small X server timestamps of a window manager's
		// own pings, which arrive on the root window too.
		p.next = 0xb0000000
	}
	p.next++
	ch := make(chan struct{})
	p.waiting[p.next] = ch
	return p.next, ch
}

func (p *pongWaiters) forget(token uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, token)
}

func (p *pongWaiters) deliver(token uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.waiting[token]; ok {
		close(ch)
		delete(p.waiting, token)
	}
}

// isDead reports whether the connection has seen an I/O error.
func (x *xconn) isDead() bool {
	select {
	case <-x.sc.dead:
		return true
	default:
		return false
	}
}

// close shuts the connection. A dead one only loses its socket: calling
// xgb's Close on it could race xgb's own close and panic.
func (x *xconn) close() {
	if !x.isDead() {
		done := make(chan struct{})
		go func() {
			defer func() { _ = recover(); close(done) }()
			x.c.Close()
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	x.sc.markDead(errors.New("closed"))
	x.sc.Conn.Close()
}

// do runs f against the connection with a recover guard and a deadline. The
// display's death, ctx and the timeout all end the wait; f may then be left
// blocked on a reply that never comes (its goroutine parks with the dead
// connection).
func (x *xconn) do(ctx context.Context, timeout time.Duration, what string, f func(c *xgb.Conn) error) error {
	if x.isDead() {
		return fmt.Errorf("%s: %w", what, ErrDisplayGone)
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("%s: xgb panic: %v", what, r)
			}
		}()
		done <- f(x.c)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil && x.isDead() {
			return fmt.Errorf("%s: %w: %v", what, ErrDisplayGone, x.sc.deadErr)
		}
		return err
	case <-x.sc.dead:
		return fmt.Errorf("%s: %w: %v", what, ErrDisplayGone, x.sc.deadErr)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case <-timer.C:
		// An X server that does not answer for this long is as good as
		// gone; drop the connection so the next call redials.
		x.sc.markDead(errors.New("no answer"))
		return fmt.Errorf("%s: %w: no answer in %s", what, ErrDisplayGone, timeout)
	}
}

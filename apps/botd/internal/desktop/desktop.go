// Package desktop drives one X display: the nine desktop actions as input
// (XTEST through xgb) and native screen capture (MIT-SHM, the XFixes cursor,
// libjpeg-turbo). It is the hot path under the screen package and must never
// crash botd when an X server dies: every X call is guarded, bounded in time
// and reports ErrDisplayGone instead.
package desktop

import (
	"context"
	"errors"
	"fmt"
	"github.com/open-bot/computer/pkg/shared/jpegenc"
	"sync"
	"time"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/shm"
	"github.com/BurntSushi/xgb/xfixes"
	"github.com/BurntSushi/xgb/xtest"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
)

// Target is one X display botd drives.
type Target struct {
	Display    string       // e.g. ":10"
	XAuthority string       // cookie file path (family-wild single entry; root reads it)
	User       *osuser.User // input commands (xdotool) run as this user (desktop)
	Width      int          // 1280
	Height     int          // 800
}

// Options are the dependencies of a Desktop; nil/zero values get defaults.
type Options struct {
	// Runner starts helper processes. Input and capture need none: both go
	// through botd's own X connection (XTEST, MIT-SHM), measured faster and
	// abortable between any two events.
	Runner runner.Runner
	Log    zerolog.Logger
}

// Timeouts for one X round trip. An X server that does not answer within
// them is treated as gone.
const (
	callTimeout    = 5 * time.Second
	connectTimeout = 5 * time.Second
)

// Desktop drives one display. Input is serialized; capture may run next to
// input (each has its own lock).
type Desktop struct {
	t   Target
	run runner.Runner
	log zerolog.Logger

	// mu guards x (the live connection, redialled after a death) and closed.
	mu     sync.Mutex
	x      *session
	closed bool

	// inMu guards kb and serializes input: the keyboard remapping state
	// and the order of events belong to one action at a time.
	inMu sync.Mutex
	kb   keyboard

	// capMu guards the capture buffers and the JPEG encoder.
	capMu sync.Mutex
	cap   captureState
}

// session is one connection plus what we learned about the server on it.
type session struct {
	*xconn
	hasShm    bool
	hasXfixes bool
	hasXtest  bool
}

// New returns a Desktop for t. It connects lazily: a display that is not up
// yet (or gone) only fails the first Do or Capture, never New.
func New(t Target, o Options) (*Desktop, error) {
	if _, err := displayNumber(t.Display); err != nil {
		return nil, err
	}
	if t.Width <= 0 || t.Height <= 0 {
		return nil, fmt.Errorf("desktop %s: bad size %dx%d", t.Display, t.Width, t.Height)
	}
	if o.Runner == nil {
		o.Runner = runner.Exec{}
	}
	d := &Desktop{t: t, run: o.Runner, log: o.Log.With().Str("component", "desktop").Str("display", t.Display).Logger()}
	d.cap.enc = jpegenc.New(jpegenc.BGRX)
	return d, nil
}

// errClosed is returned after Close.
var errClosed = errors.New("desktop closed")

// session returns the live connection, dialling a new one when there is
// none or the last one died.
func (d *Desktop) session(ctx context.Context) (*session, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errClosed
	}
	if d.x != nil && !d.x.isDead() {
		return d.x, nil
	}
	if d.x != nil {
		d.x.close()
		d.x = nil
	}
	owner := -1
	if d.t.User != nil {
		owner = int(d.t.User.UID)
	}
	xc, err := dialXOwned(ctx, d.t.Display, d.t.XAuthority, owner, true)
	if err != nil {
		return nil, err
	}
	s := &session{xconn: xc}
	err = xc.do(ctx, connectTimeout, "init extensions", func(c *xgb.Conn) error {
		s.hasXtest = xtest.Init(c) == nil
		s.hasShm = shm.Init(c) == nil
		if xfixes.Init(c) == nil {
			if _, err := xfixes.QueryVersion(c, 5, 0).Reply(); err == nil {
				s.hasXfixes = true
			}
		}
		return nil
	})
	if err != nil {
		xc.close()
		return nil, err
	}
	if !s.hasXtest {
		xc.close()
		return nil, fmt.Errorf("display %s: no XTEST extension", d.t.Display)
	}
	d.log.Debug().Bool("shm", s.hasShm).Bool("xfixes", s.hasXfixes).Msg("connected")
	d.x = s
	return s, nil
}

// Close releases the connection and the capture buffers. It is safe to call
// twice.
func (d *Desktop) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	x := d.x
	d.x = nil
	d.mu.Unlock()

	// Give back the keycodes typing borrowed while the server still lives.
	d.inMu.Lock()
	if x != nil && !x.isDead() && len(d.kb.borrowed) > 0 {
		// Keys typed a moment ago may still be unread: reverting their
		// keycodes now would change what they type.
		var latest time.Time
		for _, b := range d.kb.borrowed {
			if b.lastUse.After(latest) {
				latest = b.lastUse
			}
		}
		time.Sleep(minReuse - time.Since(latest))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = d.kb.restore(ctx, x)
		cancel()
	}
	d.kb.stopTimer()
	d.inMu.Unlock()

	d.capMu.Lock()
	d.cap.release()
	d.cap.enc.Close()
	d.capMu.Unlock()
	if x != nil {
		x.close()
	}
	return nil
}

// Size is the target's screen size.
func (d *Desktop) Size() (int, int) { return d.t.Width, d.t.Height }

// Package browser runs one Chromium per screen, as the desktop user on the
// screen's display, driven only over --remote-debugging-pipe (no DevTools
// TCP port ever). It maximizes the windows once ready, opens URLs, reads the
// page in front, lists the visible pages, runs the apply guard on every
// request that mentions "apply", and exposes the cookie store to CookieSync.
package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/browser"
	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/cdp"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/pkg/shared"
)

// Errors callers branch on.
var (
	// ErrNotRunning means the browser exited or was never started.
	ErrNotRunning = errors.New("browser is not running")
	// ErrNoPage means the browser has no page open.
	ErrNoPage = errors.New("browser has no page open")
	// ErrBadURL is returned by Open for a target that is not an http(s) URL.
	ErrBadURL = errors.New("not an http or https URL")
	// ErrPageCrashed means the page's renderer crashed.
	ErrPageCrashed = errors.New("the page crashed; reload or open another page")
	// ErrPageLoading means the page in front is still navigating (a slow
	// site) and cannot be read yet.
	ErrPageLoading = errors.New("the page is still loading or not responding; try again shortly")
	// ErrPageUnresponsive means the page did not answer in time (a busy or
	// hung renderer).
	ErrPageUnresponsive = errors.New("the page is not responding")
)

// Options configures one browser; zero fields get defaults.
type Options struct {
	// ID is the screen's id (logs, events, blocks).
	ID string
	// Display is the X display (":10"); XAuthority the cookie file for it.
	Display    string
	XAuthority string
	// ProfileDir is the screen's --user-data-dir ($BOTD_HOME/desktop/screens/<id>/chromium).
	ProfileDir string
	// SocksAddr is the egress proxy (default 127.0.0.1:1080).
	SocksAddr string
	// Width and Height are the screen size (default 1280x800).
	Width, Height int
	// NoSandbox is the outcome of the start-up sandbox probe.
	NoSandbox bool
	// User runs Chromium (the desktop user); nil means root, for tests only.
	User *osuser.User
	// Runner starts the process (default runner.Exec).
	Runner runner.Runner
	// Bin is the Chromium executable (default "chromium", Debian's wrapper).
	Bin string
	// ExtraArgs are appended to the flags (tests: resolver rules).
	ExtraArgs []string
	// Env is added to the child's environment.
	Env []string
	// Stderr receives Chromium's own log (nil: discarded).
	Stderr io.Writer
	// ApplyGuardExtraDomains extends the guarded portals.
	ApplyGuardExtraDomains []string
	// UserHolds reports whether a person holds the screen (then the apply
	// guard lets everything pass). Nil means nobody does.
	UserHolds func() bool
	// OnBlocked is told about every blocked request (publish the event).
	OnBlocked func(Blocked)
	// OnState is told about every process state change.
	OnState func(shared.ProcessState)
	// ReadyTimeout bounds the start (default: what is left of Start's
	// context, 30 s when it has no deadline).
	ReadyTimeout time.Duration
	// CallTimeout bounds each DevTools call without its own deadline.
	CallTimeout time.Duration
	Log         *zerolog.Logger
}

// Browser is one running Chromium.
type Browser struct {
	o    Options
	log  zerolog.Logger
	conn *cdp.Conn
	sup  *supervisor.Supervisor
	proc *supervisor.Proc

	ctx    context.Context // ends when the browser is gone
	cancel context.CancelFunc
	// maximized is closed once start-up's maximize is done (or gave up).
	maximized chan struct{}
	// elems is the element bookkeeping (elements.go).
	elems elemState
	// secrets remembers the fields that received a secret (secretfields.go).
	secrets secretFields
	// cdpg is what CDP clients touched and what secrets sealed (cdpguard.go).
	cdpg cdpGuard

	// mu guards sessions, crashed, lastFront, lastTabChange, blocked and
	// state.
	mu            sync.Mutex
	sessions      map[target.ID]*cdp.Session
	crashed       map[target.ID]bool
	lastFront     target.ID
	lastTabChange time.Time
	blocked       []Blocked
	state         shared.ProcessState
}

// Start launches Chromium and returns once it answers over the pipe, has a
// page, and its windows are maximized. ctx bounds only the start.
func Start(ctx context.Context, o Options) (*Browser, error) {
	if o.ProfileDir == "" || o.Display == "" {
		return nil, errors.New("browser: ProfileDir and Display are required")
	}
	if o.SocksAddr == "" {
		o.SocksAddr = "127.0.0.1:1080"
	}
	if o.Runner == nil {
		o.Runner = runner.Exec{}
	}
	if o.Bin == "" {
		o.Bin = "chromium"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			o.ReadyTimeout = time.Until(dl)
		}
	}
	if o.Width <= 0 || o.Height <= 0 {
		o.Width, o.Height = 1280, 800
	}
	b := &Browser{o: o, sessions: map[target.ID]*cdp.Session{}, crashed: map[target.ID]bool{}, state: shared.StateStarting, maximized: make(chan struct{})}
	if o.Log != nil {
		b.log = o.Log.With().Str("component", "browser").Str("screen", o.ID).Logger()
	} else {
		b.log = zerolog.Nop()
	}
	if err := b.prepareProfile(ctx); err != nil {
		return nil, err
	}

	// fd 3: Chromium reads our commands; fd 4: it writes replies and events.
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("browser: pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = cmdR.Close()
		_ = cmdW.Close()
		return nil, fmt.Errorf("browser: pipe: %w", err)
	}
	b.conn = cdp.New(cmdW, outR, cdp.Options{CallTimeout: o.CallTimeout, Log: &b.log})
	b.ctx, b.cancel = context.WithCancel(context.Background())
	go func() {
		<-b.conn.Done()
		b.cancel()
	}()

	argv := append([]string{o.Bin, "--remote-debugging-pipe"}, ScreenFlags(FlagOptions{
		SocksAddr: o.SocksAddr, ProfileDir: o.ProfileDir, Width: o.Width, Height: o.Height, NoSandbox: o.NoSandbox,
	})...)
	argv = append(argv, o.ExtraArgs...)
	env := append([]string{"DISPLAY=" + o.Display, "XAUTHORITY=" + o.XAuthority}, o.Env...)

	readyErr := make(chan error, 1)
	b.sup = supervisor.New(supervisor.Options{
		Runner: childEndsCloser{r: o.Runner, files: []*os.File{cmdR, outW}},
		Log:    &b.log,
		OnEvent: func(ev supervisor.Event) {
			b.mu.Lock()
			b.state = ev.State
			b.mu.Unlock()
			if ev.State == shared.StateStopped || ev.State == shared.StateCrashed {
				_ = b.conn.Close()
			}
			if o.OnState != nil {
				o.OnState(ev.State)
			}
		},
	})
	b.proc, err = b.sup.Start(supervisor.Spec{
		Name:         "chromium:" + o.ID,
		Cmd:          runner.Spec{Argv: argv, User: o.User, Env: env, ExtraFiles: []*os.File{cmdR, outW}, Stderr: o.Stderr},
		Restart:      supervisor.RestartNever,
		ReadyTimeout: o.ReadyTimeout,
		Ready: func(rctx context.Context) error {
			err := b.ready(rctx)
			readyErr <- err
			return err
		},
	})
	if err != nil {
		_ = b.conn.Close()
		return nil, fmt.Errorf("browser: start: %w", err)
	}
	addOwn(b)
	if err := b.proc.WaitRunning(ctx); err != nil {
		b.kill()
		select {
		case rerr := <-readyErr:
			if rerr != nil {
				return nil, fmt.Errorf("browser: not ready: %w", rerr)
			}
		default:
		}
		return nil, fmt.Errorf("browser: start: %w", err)
	}
	return b, nil
}

// childEndsCloser closes the child's pipe ends in botd once the child has
// them, so the browser's exit reads as EOF on our side.
type childEndsCloser struct {
	r     runner.Runner
	files []*os.File
}

func (c childEndsCloser) Start(s runner.Spec) (runner.Process, error) {
	p, err := c.r.Start(s)
	for _, f := range c.files {
		_ = f.Close()
	}
	return p, err
}

// ready waits until the browser answers, has a page and runs the apply
// guard; then it reloads restored tabs under the guard. The steps that do
// not depend on each other run at once: the guard's Fetch.enable and the
// target discovery go out together, the first page is an event (not a
// poll), and the windows are maximized in the background (Windows waits for
// it), so a cold start is Chromium's own start-up plus a few round trips.
func (b *Browser) ready(ctx context.Context) error {
	t0 := time.Now()
	defer func() { b.log.Debug().Dur("elapsed", time.Since(t0)).Msg("ready done") }()
	// Everything is asked at once: commands wait in the pipe until Chromium
	// reads it, and run in order. The first page is subscribed to before
	// watchTargets turns discovery on, which announces the targets that
	// already exist as well as new ones.
	pageSeen := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	created := cdpapi.Events(wctx, b.conn.Browser(), target.TargetCreated)
	go func() {
		for ev, err := range created {
			if err != nil {
				return
			}
			if ev.TargetInfo != nil && isPage(ev.TargetInfo) {
				close(pageSeen)
				return
			}
		}
	}()
	guard := make(chan error, 1)
	go func() { guard <- b.startGuard(ctx) }()
	go b.watchTargets()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cdpapi.Call(cctx, b.conn.Browser(), browser.GetVersion, cdpapi.Empty{})
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, cdp.ErrClosed) {
			return fmt.Errorf("chromium exited during start-up")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	b.log.Debug().Dur("elapsed", time.Since(t0)).Msg("answers")
	if err := <-guard; err != nil {
		return fmt.Errorf("apply guard: %w", err)
	}
	b.log.Debug().Dur("elapsed", time.Since(t0)).Msg("guard on")
	var pages []*target.Info
	// The event is the fast path; a slow poll covers a discovery that
	// failed to turn on.
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for len(pages) == 0 {
		select {
		case <-pageSeen:
			pageSeen = nil // once: then only the poll
		case <-poll.C:
		case <-ctx.Done():
			return fmt.Errorf("no page appeared: %w", ctx.Err())
		}
		var err error
		if pages, err = b.pageTargets(ctx); err != nil {
			return err
		}
	}
	b.log.Debug().Dur("elapsed", time.Since(t0)).Msg("has page")
	b.reloadRestored(ctx, pages)
	go func() {
		defer close(b.maximized)
		mctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		b.maximize(mctx, pages)
	}()
	return nil
}

// reloadRestored reloads the pages that were already open when the apply
// guard came on (tabs restored at launch, which Chromium opens before botd
// can enable anything): their documents were loaded before the Fetch
// interception existed, and their requests were seen to slip past it.
// Reloaded, they run under the guard like every later page.
func (b *Browser) reloadRestored(ctx context.Context, pages []*target.Info) {
	for _, p := range pages {
		if p.URL == "" || strings.HasPrefix(p.URL, "about:") || strings.HasPrefix(p.URL, "chrome:") {
			continue
		}
		s, err := b.session(ctx, p.TargetID)
		if err != nil {
			continue
		}
		if _, err := cdpapi.Call(ctx, s, page.Reload, page.ReloadParams{}); err != nil {
			b.log.Debug().Err(err).Msg("reload a restored tab")
		}
	}
}

// Done is closed once the browser has exited.
func (b *Browser) Done() <-chan struct{} { return b.ctx.Done() }

// State is the browser process's state.
func (b *Browser) State() shared.ProcessState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Pid is the browser's main process id (0 once gone).
func (b *Browser) Pid() int { return b.proc.Pid() }

// Close stops the browser gracefully with Browser.close, so it saves its
// tabs, and falls back to SIGTERM then SIGKILL. Safe to call twice.
func (b *Browser) Close(ctx context.Context) error {
	select {
	case <-b.proc.Done():
		return nil
	default:
	}
	b.waitSessionSaved(ctx)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := cdpapi.Call(cctx, b.conn.Browser(), browser.Close, cdpapi.Empty{})
	cancel()
	if err == nil {
		select {
		case <-b.proc.Done():
			return nil
		case <-time.After(8 * time.Second):
			b.log.Warn().Msg("browser did not exit after Browser.close")
		case <-ctx.Done():
		}
	}
	return b.proc.Stop(ctx)
}

// kill ends the browser without ceremony (a failed start).
func (b *Browser) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.proc.Stop(ctx)
	_ = b.conn.Close()
}

// prepareProfile creates the profile directory for the desktop user and
// makes sure no other Chromium holds it: a browser a person started from the
// screen's menu is closed with SIGINT (it saves its tabs, which come back
// in ours), and stale locks are removed.
func (b *Browser) prepareProfile(ctx context.Context) error {
	dir := b.o.ProfileDir
	if u := b.o.User; u != nil {
		// The screen's directory is desktop's: the profile directory in it
		// is made and chowned without following a link planted there.
		parent := filepath.Dir(dir)
		if err := os.MkdirAll(filepath.Dir(parent), 0o755); err != nil {
			return fmt.Errorf("browser: profile: %w", err)
		}
		if err := safefs.EnsureDir(filepath.Dir(parent), filepath.Join(filepath.Base(parent), filepath.Base(dir)), 0o700, int(u.UID), int(u.GID)); err != nil {
			return fmt.Errorf("browser: profile: %w", err)
		}
		if err := safefs.EnsureDir(filepath.Dir(parent), filepath.Base(parent), 0o700, int(u.UID), int(u.GID)); err != nil {
			return fmt.Errorf("browser: profile: %w", err)
		}
		return b.readyProfile(ctx, profile{dir: dir, base: filepath.Dir(parent), rel: filepath.Join(filepath.Base(parent), filepath.Base(dir)), uid: int(u.UID)})
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("browser: profile: %w", err)
	}
	return b.readyProfile(ctx, profile{dir: dir, base: dir, rel: ".", uid: -1})
}

// readyProfile releases p (releaseProfile), then marks its last exit clean
// (markCleanExit) so that its tabs come back.
func (b *Browser) readyProfile(ctx context.Context, p profile) error {
	if err := releaseProfile(ctx, p, b.log); err != nil {
		return err
	}
	return markCleanExit(p, b.log)
}

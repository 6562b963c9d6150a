package browser

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/cookies"
	"github.com/open-bot/computer/apps/botd/internal/files"
	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// OpenSettle is how long /open waits for the screen to settle after a URL.
const OpenSettle = 500 * time.Millisecond

// Publisher receives events for /events (health.Hub satisfies it).
type Publisher interface {
	Publish(typ string, data any)
}

// ScreensOptions configures Screens.
type ScreensOptions struct {
	// SocksAddr is the egress proxy every browser uses.
	SocksAddr string
	// NoSandbox is the start-up probe's verdict.
	NoSandbox bool
	// ApplyGuardExtraDomains extends the apply guard.
	ApplyGuardExtraDomains []string
	// Desktop runs the browsers.
	Desktop osuser.User
	// Workspace is $BOTD_HOME/bot, the root of paths /open accepts.
	Workspace string
	// Cookies is CookieSync (nil: no shared sign-ins).
	Cookies CookieSync
	// Events receives apply_guard events (may be nil).
	Events Publisher
	// Changed is called when a browser's state changes (health).
	Changed func()
	Runner  runner.Runner
	// Bin and ExtraArgs are passed to every browser (tests).
	Bin       string
	ExtraArgs []string
	Log       zerolog.Logger
}

// CookieSync is what Screens needs from package cookies (*cookies.Sync).
type CookieSync interface {
	Add(ctx context.Context, st cookies.Store) error
	Remove(st cookies.Store)
}

// Screens runs one browser per screen, started on demand, stopped first
// when its screen stops, and serves the browser routes.
type Screens struct {
	o   ScreensOptions
	log zerolog.Logger

	// mu guards sm, browsers, starting, states, paused, pausedOne, inUse
	// and changed.
	mu       sync.Mutex
	sm       *screen.Manager
	browsers map[string]*Browser
	starting map[string]*startOp
	states   map[string]shared.ProcessState
	// paused counts Quiesce calls not yet resumed; no browser starts then.
	paused int
	// pausedOne counts QuiesceScreen calls per screen not yet resumed; that
	// screen's browser does not start then.
	pausedOne map[string]int
	// inUse counts the requests using each screen's browser (use): a
	// quiesce waits for them to finish before it closes the browser.
	inUse map[string]int
	// cdpOpen marks the screens with a CDP session (one at a time).
	cdpOpen map[string]bool
	// changed is closed (and replaced) whenever a pause ends or a use
	// ends: waiters look again.
	changed chan struct{}
}

// PauseWait bounds how long a browser request waits for its quiesced
// browser to come back (a workspace export copying its profile) before it
// answers 503.
const PauseWait = 60 * time.Second

// DrainWait bounds how long a quiesce waits for the requests already
// using a browser to finish before it closes the browser anyway.
const DrainWait = 30 * time.Second

// wakeLocked tells every waiter to look again; bs.mu is held.
func (bs *Screens) wakeLocked() {
	close(bs.changed)
	bs.changed = make(chan struct{})
}

// pausedLocked reports whether screen id's browser may not run now.
func (bs *Screens) pausedLocked(id string) bool {
	return bs.paused > 0 || bs.pausedOne[id] > 0
}

type startOp struct {
	done chan struct{}
	b    *Browser
	err  error
}

// NewScreens returns Screens; call Attach once the screen manager exists
// (its Options take Screens' Blocked and State).
func NewScreens(o ScreensOptions) *Screens {
	if o.Runner == nil {
		o.Runner = runner.Exec{}
	}
	return &Screens{o: o, log: o.Log.With().Str("component", "browser").Logger(), browsers: map[string]*Browser{}, starting: map[string]*startOp{}, states: map[string]shared.ProcessState{},
		pausedOne: map[string]int{}, inUse: map[string]int{}, cdpOpen: map[string]bool{}, changed: make(chan struct{})}
}

// Attach connects Screens to the screen manager: the browser stops first
// when a screen stops (BeforeStop), "browser" becomes a launchable app, and
// the browser routes are mounted on mux.
func (bs *Screens) Attach(sm *screen.Manager, mux *http.ServeMux) {
	bs.mu.Lock()
	bs.sm = sm
	bs.mu.Unlock()
	sm.BeforeStop(func(ctx context.Context, s *screen.Screen) { bs.stop(ctx, s.ID) })
	sm.SetElements(bs)
	sm.OnStart(func(ctx context.Context, s *screen.Screen) error {
		// The session's environment (its runtime directory) is known inside
		// start hooks; should it not be, write the file as soon as it is.
		if _, ok := sm.Env(s.ID); ok {
			return bs.writeArgsFile(sm, s.ID)
		}
		go func() {
			deadline := time.Now().Add(screen.StartTimeout)
			for time.Now().Before(deadline) {
				if _, ok := sm.Env(s.ID); ok {
					if err := bs.writeArgsFile(sm, s.ID); err != nil {
						bs.log.Warn().Str("screen", s.ID).Err(err).Msg("chromium args file")
					}
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		return nil
	})
	sm.SetLauncher("browser", func(ctx context.Context, s *screen.Screen) (int, error) {
		b, err := bs.Browser(ctx, s.ID)
		if err != nil {
			return 0, err
		}
		return b.Pid(), nil
	})
	if mux != nil {
		mux.HandleFunc("POST /screens/{id}/open", bs.handleOpen)
		mux.HandleFunc("GET /screens/{id}/browser/page", bs.handlePage)
		mux.HandleFunc("GET /screens/{id}/browser/pages", bs.handlePages)
		mux.HandleFunc("POST /screens/{id}/type-secret", bs.handleTypeSecret)
		mux.HandleFunc("GET /screens/{id}/cdp", bs.handleCDP)
	}
}

// Blocked returns (and forgets) what the apply guard blocked on screen id
// since the last call; screen.Options.Blocked.
func (bs *Screens) Blocked(id string) []any {
	bs.mu.Lock()
	b := bs.browsers[id]
	bs.mu.Unlock()
	if b == nil {
		return nil
	}
	bl := b.TakeBlocked()
	if len(bl) == 0 {
		return nil
	}
	out := make([]any, len(bl))
	for i, x := range bl {
		out[i] = x
	}
	return out
}

// State is screen id's browser state for health; screen.Options.BrowserState.
func (bs *Screens) State(id string) shared.ProcessState {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if st, ok := bs.states[id]; ok {
		return st
	}
	return shared.StateStopped
}

func (bs *Screens) setState(id string, st shared.ProcessState) {
	bs.mu.Lock()
	bs.states[id] = st
	bs.mu.Unlock()
	if st == shared.StateCrashed && bs.o.Events != nil {
		// A crashed browser is news for the run on this screen (the
		// worker follows /events).
		bs.o.Events.Publish(shared.EventProcess, map[string]string{"name": "chromium:" + id, "screen": id, "state": string(st)})
	}
	if bs.o.Changed != nil {
		bs.o.Changed()
	}
}

var errNotAttached = errors.New("browser: screens not attached")

// Browser returns screen id's browser, starting it when it is not running
// (concurrent callers share one start). The screen must be running. While
// the browser is quiesced (a workspace export copies its profile) it waits
// for it to come back, up to PauseWait, then answers 503.
func (bs *Screens) Browser(ctx context.Context, id string) (*Browser, error) {
	var waitUntil time.Time
	for {
		bs.mu.Lock()
		sm := bs.sm
		if sm == nil {
			bs.mu.Unlock()
			return nil, errNotAttached
		}
		if b := bs.browsers[id]; b != nil {
			select {
			case <-b.Done():
				delete(bs.browsers, id) // closed from the desktop: start another
			default:
				bs.mu.Unlock()
				return b, nil
			}
		}
		if bs.pausedLocked(id) {
			ch := bs.changed
			bs.mu.Unlock()
			if waitUntil.IsZero() {
				waitUntil = time.Now().Add(PauseWait)
			}
			t := time.NewTimer(time.Until(waitUntil))
			select {
			case <-ch:
				t.Stop()
				continue
			case <-t.C:
				return nil, errPaused
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		if op := bs.starting[id]; op != nil {
			bs.mu.Unlock()
			select {
			case <-op.done:
				if op.err != nil {
					return nil, op.err
				}
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		op := &startOp{done: make(chan struct{})}
		bs.starting[id] = op
		bs.mu.Unlock()
		// The start belongs to botd, not to this request.
		go bs.start(sm, id, op)
		select {
		case <-op.done:
			if op.err != nil {
				return nil, op.err
			}
			return op.b, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (bs *Screens) start(sm *screen.Manager, id string, op *startOp) {
	defer close(op.done)
	fail := func(err error) {
		op.err = err
		bs.mu.Lock()
		delete(bs.starting, id)
		bs.mu.Unlock()
	}
	t, ok := sm.Target(id)
	if !ok {
		fail(shared.Errorf(http.StatusServiceUnavailable, shared.CodeScreenUnavailable, "screen %s is not running", id))
		return
	}
	env, _ := sm.Env(id)
	// Keep only what the browser needs from the session's environment.
	var keep []string
	for _, e := range env {
		// Not XDG_RUNTIME_DIR: the wrapper would then add the screen's flags
		// from the args file a second time.
		for _, p := range []string{"DBUS_SESSION_BUS_ADDRESS=", "XDG_CURRENT_DESKTOP=", "XDG_SESSION_TYPE=", "NO_AT_BRIDGE="} {
			if strings.HasPrefix(e, p) {
				keep = append(keep, e)
			}
		}
	}
	// No AT-SPI bridge in Chromium: its elements come over DevTools, and
	// its accessibility tree on the screen's bus would only cost.
	keep = append(keep, "NO_AT_BRIDGE=1")
	u := bs.o.Desktop
	log := bs.o.Log
	// One bound for the whole start, Chromium's readiness included: on a
	// loaded machine a slow start is a browser, not an error.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bs.setState(id, shared.StateStarting)
	b, err := Start(ctx, Options{
		ID: id, Display: t.Display, XAuthority: t.XAuthority,
		ProfileDir: filepath.Join(sm.ProfileDir(id), "chromium"),
		SocksAddr:  bs.o.SocksAddr, Width: t.Width, Height: t.Height, NoSandbox: bs.o.NoSandbox,
		User: &u, Runner: bs.o.Runner, Bin: bs.o.Bin, ExtraArgs: bs.o.ExtraArgs, Env: keep,
		ApplyGuardExtraDomains: bs.o.ApplyGuardExtraDomains,
		UserHolds: func() bool {
			l := sm.Leases().Current(id)
			return l != nil && l.Kind == lease.User
		},
		OnBlocked: func(bl Blocked) {
			if bs.o.Events != nil {
				bs.o.Events.Publish(shared.EventApplyGuard, bl)
			}
		},
		OnState: func(st shared.ProcessState) { bs.setState(id, st) },
		Log:     &log,
	})
	if err != nil {
		bs.log.Warn().Str("screen", id).Err(err).Msg("browser did not start")
		bs.setState(id, shared.StateCrashed)
		fail(shared.Errorf(http.StatusServiceUnavailable, shared.CodeBrowserError, "the browser did not start"))
		return
	}
	op.b = b
	bs.mu.Lock()
	delete(bs.starting, id)
	bs.browsers[id] = b
	bs.mu.Unlock()
	if bs.o.Cookies != nil {
		if err := bs.o.Cookies.Add(ctx, b); err != nil {
			bs.log.Warn().Str("screen", id).Err(err).Msg("first cookie sync")
		}
	}
	go func() {
		<-b.Done()
		bs.mu.Lock()
		if bs.browsers[id] == b {
			delete(bs.browsers, id)
		}
		bs.mu.Unlock()
		if bs.o.Cookies != nil {
			bs.o.Cookies.Remove(b)
		}
	}()
}

// ArgsFile is the name, in a screen session's XDG_RUNTIME_DIR, of the file
// holding the value of OPEN_BOT_CHROMIUM_ARGS, which
// /etc/chromium.d/open-bot reads when the variable is not set: a Chromium
// started from the screen's menu gets the screen's flags.
const ArgsFile = "open-bot-chromium-args"

// flagsFor are screen id's Chromium flags.
func (bs *Screens) flagsFor(sm *screen.Manager, id string) FlagOptions {
	return FlagOptions{SocksAddr: bs.o.SocksAddr, ProfileDir: filepath.Join(sm.ProfileDir(id), "chromium"), Width: screen.Width, Height: screen.Height, NoSandbox: bs.o.NoSandbox}
}

// writeArgsFile writes the screen's shell-quoted flags into its session's
// runtime directory (desktop-owned, 0700) as the desktop user's file.
func (bs *Screens) writeArgsFile(sm *screen.Manager, id string) error {
	env, ok := sm.Env(id)
	if !ok {
		return nil
	}
	dir := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "XDG_RUNTIME_DIR="); ok {
			dir = v
		}
	}
	if dir == "" {
		return nil
	}
	// The directory is desktop's: the file is created O_EXCL|O_NOFOLLOW
	// relative to its fd and chowned on the fd, so a link planted there is
	// replaced, never followed (THREAT-MODEL rule 1).
	data := []byte(ChromiumArgsEnv(bs.flagsFor(sm, id)) + "\n")
	if err := safefs.WriteFile(dir, ArgsFile, data, 0o644, int(bs.o.Desktop.UID), int(bs.o.Desktop.GID)); err != nil {
		return fmt.Errorf("chromium args file: %w", err)
	}
	return nil
}

// stop closes screen id's browser gracefully (it saves its tabs); a start
// in flight is waited for first.
func (bs *Screens) stop(ctx context.Context, id string) {
	bs.mu.Lock()
	op := bs.starting[id]
	bs.mu.Unlock()
	if op != nil {
		select {
		case <-op.done:
		case <-ctx.Done():
		}
	}
	bs.mu.Lock()
	b := bs.browsers[id]
	delete(bs.browsers, id)
	bs.mu.Unlock()
	if b == nil {
		return
	}
	if err := b.Close(ctx); err != nil {
		bs.log.Warn().Str("screen", id).Err(err).Msg("browser close")
	}
}

// errPaused is returned while the workspace is exported or imported.
var errPaused = shared.Errorf(http.StatusServiceUnavailable, shared.CodeUnavailable,
	"browsers are paused while the workspace is exported or imported; try again shortly")

// Quiesce closes every browser gracefully (each saves its tabs and flushes
// its profile databases) and keeps browsers from starting until resume is
// called, so a workspace export or import copies consistent profiles.
// Browsers start again on demand afterwards; their tabs come back.
func (bs *Screens) Quiesce(ctx context.Context) (resume func(), err error) {
	bs.mu.Lock()
	bs.paused++
	bs.mu.Unlock()
	bs.drain(ctx, "")
	bs.Close(ctx)
	var once sync.Once
	resume = func() {
		once.Do(func() {
			bs.mu.Lock()
			bs.paused--
			bs.wakeLocked()
			bs.mu.Unlock()
		})
	}
	if err := ctx.Err(); err != nil {
		resume()
		return nil, err
	}
	return resume, nil
}

// QuiesceScreen is Quiesce for screen id's browser alone: the requests
// using it finish first (up to DrainWait), it is closed gracefully (tabs
// saved, profile databases flushed) and kept from starting until resume;
// requests that meet it meanwhile wait for it (Browser). The other
// screens' browsers are untouched. A browser that was running is started
// again on resume, its tabs back.
func (bs *Screens) QuiesceScreen(ctx context.Context, id string) (resume func(), err error) {
	bs.mu.Lock()
	bs.pausedOne[id]++
	bs.mu.Unlock()
	start := time.Now()
	bs.drain(ctx, id)
	bs.mu.Lock()
	wasRunning := bs.browsers[id] != nil || bs.starting[id] != nil
	sm := bs.sm
	bs.mu.Unlock()
	bs.stop(ctx, id)
	bs.log.Info().Str("screen", id).Bool("was_running", wasRunning).
		Int64("elapsed_ms", time.Since(start).Milliseconds()).Msg("browser quiesced")
	var once sync.Once
	resume = func() {
		once.Do(func() {
			bs.mu.Lock()
			bs.pausedOne[id]--
			if bs.pausedOne[id] <= 0 {
				delete(bs.pausedOne, id)
			}
			bs.wakeLocked()
			bs.mu.Unlock()
			bs.log.Info().Str("screen", id).Int64("paused_ms", time.Since(start).Milliseconds()).Msg("browser resumed")
			if wasRunning && sm != nil {
				if _, ok := sm.Target(id); ok {
					// Back on the bot's screen without waiting for its next
					// request; the start belongs to botd.
					go func() {
						if _, err := bs.Browser(context.Background(), id); err != nil {
							bs.log.Warn().Str("screen", id).Err(err).Msg("browser restart after quiesce")
						}
					}()
				}
			}
		})
	}
	if err := ctx.Err(); err != nil {
		resume()
		return nil, err
	}
	return resume, nil
}

// drain waits, up to DrainWait or ctx, until no request uses screen id's
// browser ("": any browser).
func (bs *Screens) drain(ctx context.Context, id string) {
	t := time.NewTimer(DrainWait)
	defer t.Stop()
	for {
		bs.mu.Lock()
		busy := 0
		if id == "" {
			for _, n := range bs.inUse {
				busy += n
			}
		} else {
			busy = bs.inUse[id]
		}
		ch := bs.changed
		bs.mu.Unlock()
		if busy == 0 {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			bs.log.Warn().Str("screen", id).Int("requests", busy).Msg("quiesce: requests still using the browser; closing it anyway")
			return
		case <-ctx.Done():
			return
		}
	}
}

// use returns screen id's browser for one request, waiting while it is
// quiesced (Browser); release must be called when the request is done
// with it, and a quiesce waits for that.
func (bs *Screens) use(ctx context.Context, id string) (*Browser, func(), error) {
	for {
		b, err := bs.Browser(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		bs.mu.Lock()
		if !bs.pausedLocked(id) && bs.browsers[id] == b {
			bs.inUse[id]++
			bs.mu.Unlock()
			var once sync.Once
			return b, func() {
				once.Do(func() {
					bs.mu.Lock()
					bs.inUse[id]--
					if bs.inUse[id] <= 0 {
						delete(bs.inUse, id)
					}
					bs.wakeLocked()
					bs.mu.Unlock()
				})
			}, nil
		}
		bs.mu.Unlock()
		// Quiesced or replaced between Browser and here: look again.
	}
}

// Close stops every browser, including one still starting (botd's
// shutdown and Quiesce; the screens' BeforeStop hooks normally do it first).
func (bs *Screens) Close(ctx context.Context) {
	bs.mu.Lock()
	ids := make([]string, 0, len(bs.browsers)+len(bs.starting))
	for id := range bs.browsers {
		ids = append(ids, id)
	}
	for id := range bs.starting {
		if bs.browsers[id] == nil {
			ids = append(ids, id)
		}
	}
	bs.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); bs.stop(ctx, id) }()
	}
	wg.Wait()
}

// browserErr maps the package's errors to API errors.
func browserErr(err error) error {
	var ae *shared.APIError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	case errors.Is(err, ErrBadURL):
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "target must be an http(s) URL or a workspace path")
	case errors.Is(err, ErrNotRunning):
		return shared.Errorf(http.StatusServiceUnavailable, shared.CodeBrowserError, "the browser is not running (it was closed); try again to start it")
	case errors.Is(err, ErrNoPage), errors.Is(err, ErrPageCrashed), errors.Is(err, ErrPageLoading), errors.Is(err, ErrPageUnresponsive):
		return shared.Errorf(http.StatusConflict, shared.CodeBrowserError, "%s", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return shared.Errorf(http.StatusGatewayTimeout, shared.CodeTimeout, "the browser did not answer in time")
	}
	return shared.Errorf(http.StatusBadGateway, shared.CodeBrowserError, "browser error")
}

func (bs *Screens) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		err = shared.Errorf(http.StatusServiceUnavailable, shared.CodeTimeout, "the request ended before the browser answered")
	}
	mapped := browserErr(err)
	var ae *shared.APIError
	if errors.As(mapped, &ae) && ae.Status >= 500 {
		bs.log.Warn().Str("method", r.Method).Str("path", r.URL.Path).Err(err).Msg("browser request failed")
	}
	httpx.WriteErr(w, mapped)
}

// attached is the screen manager Attach gave (errNotAttached before).
func (bs *Screens) attached() (*screen.Manager, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.sm == nil {
		return nil, errNotAttached
	}
	return bs.sm, nil
}

// running returns the running browser of a running screen for a read,
// starting the browser if the screen runs without one.
// The caller releases it (use).
func (bs *Screens) running(ctx context.Context, id string) (*Browser, func(), error) {
	if err := screen.ValidID(id); err != nil {
		return nil, nil, err
	}
	bs.mu.Lock()
	sm := bs.sm
	bs.mu.Unlock()
	if sm == nil {
		return nil, nil, errNotAttached
	}
	if sm.Get(id) == nil {
		return nil, nil, shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no screen %s", id)
	}
	if _, ok := sm.Target(id); !ok {
		return nil, nil, shared.Errorf(http.StatusConflict, shared.CodeScreenUnavailable, "screen %s is not running", id)
	}
	return bs.use(ctx, id)
}

func (bs *Screens) handlePage(w http.ResponseWriter, r *http.Request) {
	b, release, err := bs.running(r.Context(), r.PathValue("id"))
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	defer release()
	p, err := b.ReadPage(r.Context())
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, p)
}

func (bs *Screens) handlePages(w http.ResponseWriter, r *http.Request) {
	b, release, err := bs.running(r.Context(), r.PathValue("id"))
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	defer release()
	urls, err := b.Pages(r.Context())
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"pages": urls})
}

type openRequest struct {
	LeaseID string `json:"leaseId"`
	Target  string `json:"target"`
	// NewTab opens the URL in a new tab instead of the one in front.
	NewTab bool `json:"newTab,omitempty"`
}

func (bs *Screens) handleOpen(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req openRequest
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		bs.fail(w, r, err)
		return
	}
	req.Target = strings.TrimSpace(req.Target)
	if req.Target == "" {
		bs.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "target is required"))
		return
	}
	sm, err := bs.attached()
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	var out any
	err = sm.WithLease(r.Context(), id, req.LeaseID, func(ctx context.Context, s *screen.Screen) error {
		if rel, ok, err := bs.workspacePath(req.Target); err != nil {
			return err
		} else if ok {
			if err := bs.openPath(ctx, sm, id, rel); err != nil {
				return err
			}
			out = map[string]any{"opened": rel, "kind": "path"}
			return s.Sleep(ctx, OpenSettle)
		}
		if _, err := NormalizeURL(req.Target); err != nil {
			return err
		}
		b, release, err := bs.use(ctx, id)
		if err != nil {
			return err
		}
		defer release()
		res, err := b.Open(ctx, req.Target, req.NewTab)
		if err != nil {
			return err
		}
		out = map[string]any{"opened": res.URL, "kind": "url", "loading": res.Loading, "error": res.Error}
		return s.Sleep(ctx, OpenSettle)
	})
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// workspacePath decides whether target names a file in the workspace (a
// relative path that exists there); URLs and host names are not paths.
func (bs *Screens) workspacePath(target string) (string, bool, error) {
	if bs.o.Workspace == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "about:") {
		return "", false, nil
	}
	if strings.HasPrefix(target, "/") || strings.Contains(target, "..") {
		// Looks like a path: let the sandbox rules explain why not.
		_, err := files.CheckPath(target, false)
		if err == nil {
			err = shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied, "paths are relative to the workspace")
		}
		return "", false, err
	}
	rel, err := files.CheckPath(target, false)
	if err != nil {
		return "", false, nil // not a usable path; maybe a host name
	}
	root, err := os.OpenRoot(bs.o.Workspace)
	if err != nil {
		return "", false, err
	}
	defer root.Close()
	if _, err := root.Stat(rel); err != nil {
		if files.IsEscape(err) {
			return "", false, shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied, "the path leads outside the workspace")
		}
		return "", false, nil
	}
	return rel, true, nil
}

// openPath opens a workspace file or folder on the screen with xdg-open,
// as the desktop user, in the screen's session.
func (bs *Screens) openPath(ctx context.Context, sm *screen.Manager, id, rel string) error {
	env, ok := sm.Env(id)
	if !ok {
		return shared.Errorf(http.StatusServiceUnavailable, shared.CodeScreenUnavailable, "screen %s is not running", id)
	}
	u := bs.o.Desktop
	p, err := bs.o.Runner.Start(runner.Spec{Argv: []string{"xdg-open", filepath.Join(bs.o.Workspace, rel)}, User: &u, Env: env})
	if err != nil {
		return fmt.Errorf("xdg-open: %w", err)
	}
	// xdg-open hands over to the application and exits; reap it, and do not
	// let a stuck one live on.
	go func() {
		done := make(chan struct{})
		go func() { _, _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = p.SignalGroup(syscall.SIGKILL)
			<-done
		}
	}()
	return nil
}

type typeSecretRequest struct {
	LeaseID string `json:"leaseId"`
	// Secret is typed, never logged or echoed.
	Secret string `json:"secret"`
	Origin string `json:"origin"`
	// Visible: the secret may go into a field that shows it (stored with
	// visible: true); otherwise only a masked password field takes it.
	Visible bool `json:"visible,omitempty"`
}

func (bs *Screens) handleTypeSecret(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req typeSecretRequest
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		bs.fail(w, r, err)
		return
	}
	want := Origin(strings.TrimSpace(req.Origin))
	if want == "" {
		bs.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "origin must be a URL origin such as https://example.com"))
		return
	}
	if req.Secret == "" {
		bs.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "secret is required"))
		return
	}
	sm, err := bs.attached()
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	err = sm.WithLease(r.Context(), id, req.LeaseID, func(ctx context.Context, s *screen.Screen) error {
		b, release, err := bs.use(ctx, id)
		if err != nil {
			return err
		}
		defer release()
		// The origin check and the typing are one step in the page: a
		// navigation or a focus moving into a frame of another origin in
		// between types nothing (InsertSecret).
		var refused *FieldRefusedError
		switch err := b.InsertSecret(ctx, want, req.Secret, req.Visible); {
		case errors.As(err, &refused):
			return shared.Errorf(http.StatusConflict, shared.CodeSecretFieldRefused, "%s; the secret was not typed", refused.Error())
		case errors.Is(err, ErrSecretOrigin):
			return shared.Errorf(http.StatusConflict, shared.CodeConflict, "the page in front is not on %s; the secret was not typed", want)
		case errors.Is(err, ErrSecretTouched):
			return shared.Errorf(http.StatusConflict, shared.CodeSecretFieldRefused, "%s; the secret was not typed", err.Error())
		case errors.Is(err, ErrSecretFrame), errors.Is(err, ErrSecretNoField), errors.Is(err, ErrSecretNoFocus), errors.Is(err, ErrSecretChanged):
			return shared.Errorf(http.StatusConflict, shared.CodeConflict, "%s; the secret was not typed", err.Error())
		default:
			return err
		}
	})
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"typed": true, "origin": want})
}

// Package dashboard is the worker's small web page (CONTROL-PLANE.md,
// issue 15): computers and their state, each bot's screen as a live
// view-only noVNC thumbnail, runs with their events, take/release control
// (the server's answer shown as is, e.g. "Stop the bot first"), and each
// computer's last checkpoint.
//
// It knows the control plane only through small interfaces (Lister,
// Controller, Screens), so the worker's API mounts Handler wherever it
// likes.
//
// Sign-in: LoginLink mints a one-time link (the CLI prints it). Opening it
// consumes the code and sets an HttpOnly, SameSite=Strict cookie carrying a
// random session id — never the worker token. Sessions, codes and viewer
// ids live only in memory, as SHA-256 hashes where they are secrets; a
// worker restart signs everyone out. State-changing calls also need the
// X-Dashboard header (no cross-site form can send it).
//
// Viewer: the page asks for a view of one screen and gets an opaque,
// session-bound, expiring id; its websocket /vnc/{id} is relayed by the
// worker to botd's RFB websocket with a botd view link minted server-side.
// botd's address, token and links never reach the browser.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/wsrelay"
	"github.com/open-bot/computer/pkg/shared"
)

// Computer is one computer as the page lists it.
type Computer struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Provider string `json:"provider"`
	State    string `json:"state"`
	// LastCheckpoint is nil before the first checkpoint.
	LastCheckpoint *Checkpoint `json:"lastCheckpoint,omitempty"`
	// Capabilities are the provider's (nil when unknown).
	Capabilities *Capabilities `json:"capabilities,omitempty"`
}

// Capabilities is what a computer's provider can do (its description):
// distinct screens for distinct bots, stop and start, a home that
// survives a stop.
type Capabilities struct {
	MultiScreen bool `json:"multiScreen"`
	Stop        bool `json:"stop"`
	Persistent  bool `json:"persistent"`
}

// Checkpoint is a computer's latest stored home.
type Checkpoint struct {
	Revision int64     `json:"revision"`
	Size     int64     `json:"size"`
	At       time.Time `json:"at"`
}

// Bot is one bot of a computer and its screen.
type Bot struct {
	ID string `json:"id"`
	// Screen is the bot's screen id (its bot id on a Team computer).
	Screen string `json:"screen"`
	// ScreenState is botd's screen state ("running", "stopped", …); a
	// thumbnail is shown while it is "running".
	ScreenState string `json:"screenState"`
	// InControl is true while a person holds the screen.
	InControl bool `json:"inControl"`
}

// Run is one run with its events.
type Run struct {
	ID     string  `json:"id"`
	BotID  string  `json:"botId"`
	State  string  `json:"state"`
	Events []Event `json:"events"`
}

// Event is one run event.
type Event struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	Text string    `json:"text"`
}

// ControlLink is a granted takeover.
type ControlLink struct {
	URL       string    `json:"controlUrl"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Lister reads what the page shows.
type Lister interface {
	Computers(ctx context.Context) ([]Computer, error)
	Bots(ctx context.Context, computerID string) ([]Bot, error)
	Runs(ctx context.Context, computerID string) ([]Run, error)
}

// Controller applies the takeover policy. A refusal is a *shared.APIError
// whose status and message the page shows (409 "Stop the bot first").
type Controller interface {
	TakeControl(ctx context.Context, computerID, botID string) (ControlLink, error)
	ReleaseControl(ctx context.Context, computerID, botID string) error
}

// Screens gives a computer's machine, for view links.
type Screens interface {
	Machine(ctx context.Context, computerID string) (machines.Machine, error)
}

// ScreenChecker, when Screens implements it, is the backend's screen
// limit: a view of a screen the machine cannot show (any but the primary
// on a single-screen backend) is refused with its error
// (MULTI_SCREEN_UNAVAILABLE).
type ScreenChecker interface {
	CheckScreen(ctx context.Context, computerID, screen string) error
}

// Options configures the dashboard.
type Options struct {
	// Prefix is where Handler is mounted (default "/dashboard").
	Prefix     string
	Lister     Lister
	Controller Controller
	Screens    Screens
	// NoVNCDir is Debian's novnc package (default /usr/share/novnc).
	NoVNCDir string
	// LoginTTL bounds an unused login link (default 10 minutes);
	// SessionTTL a session (default 12 hours); ViewTTL a viewer id and the
	// botd view link behind it (default 2 minutes; an open view stays open).
	LoginTTL, SessionTTL, ViewTTL time.Duration
	// StateTimeout bounds one computer's part of the state call (its bots,
	// screens and runs; default 5 s): the parts are read at once, and a
	// part not read in time is marked unavailable rather than waited for.
	StateTimeout time.Duration
	// Secure marks the session cookie Secure (serve over TLS).
	Secure bool
	Now    func() time.Time
	Log    zerolog.Logger
}

// Dashboard serves the page.
type Dashboard struct {
	o   Options
	mux *http.ServeMux

	mu       sync.Mutex
	logins   map[string]time.Time // sha256(code) → expiry
	sessions map[string]time.Time // sha256(session) → expiry
	views    map[string]view      // sha256(view id) → view
	// onShared, when set, hears each sign-in code and session made or
	// dropped (a worker group passes them to its peers, in memory only).
	onShared func(key string, exp time.Time)
}

// Keys of Shared: a sign-in code's or a session's hash, by kind.
const (
	sharedLogin   = "login:"
	sharedSession = "session:"
)

// OnShared sets fn to hear each sign-in code and session made (their
// hash as a Shared key, and expiry) or dropped (a zero expiry).
func (d *Dashboard) OnShared(fn func(key string, exp time.Time)) {
	d.mu.Lock()
	d.onShared = fn
	d.mu.Unlock()
}

func (d *Dashboard) shared(key string, exp time.Time) {
	d.mu.Lock()
	fn := d.onShared
	d.mu.Unlock()
	if fn != nil {
		fn(key, exp)
	}
}

// Shared copies every live sign-in code and session (their hashes, never
// the codes or cookies) for a peer that joins.
func (d *Dashboard) Shared() map[string]time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gcLocked()
	out := map[string]time.Time{}
	for h, exp := range d.logins {
		out[sharedLogin+h] = exp
	}
	for h, exp := range d.sessions {
		out[sharedSession+h] = exp
	}
	return out
}

// PutShared sets a sign-in code or session a peer announced (a zero
// expiry drops it), without telling OnShared.
func (d *Dashboard) PutShared(key string, exp time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var m map[string]time.Time
	h, ok := strings.CutPrefix(key, sharedLogin)
	if ok {
		m = d.logins
	} else if h, ok = strings.CutPrefix(key, sharedSession); ok {
		m = d.sessions
	}
	if m == nil || len(h) != 64 {
		return
	}
	if exp.IsZero() {
		delete(m, h)
		return
	}
	m[h] = exp
}

// ViewComputer is the computer a screen view's id names (its first part),
// read only to route the view to the computer's owner in a worker group,
// which holds the view ("" for none).
func ViewComputer(view string) string {
	cid, _, ok := strings.Cut(view, ".")
	if !ok {
		return ""
	}
	return cid
}

type view struct {
	session          string // sha256 of the owning session
	computer, screen string
	expires          time.Time
}

const cookieName = "obc_dashboard"

//go:embed assets
var assets embed.FS

// New returns the dashboard; Lister, Controller and Screens are required.
func New(o Options) (*Dashboard, error) {
	if o.Lister == nil || o.Controller == nil || o.Screens == nil {
		return nil, errors.New("dashboard: Lister, Controller and Screens are required")
	}
	if o.Prefix == "" {
		o.Prefix = "/dashboard"
	}
	o.Prefix = "/" + strings.Trim(o.Prefix, "/")
	if o.NoVNCDir == "" {
		o.NoVNCDir = "/usr/share/novnc"
	}
	if o.LoginTTL <= 0 {
		o.LoginTTL = 10 * time.Minute
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.ViewTTL <= 0 {
		o.ViewTTL = 2 * time.Minute
	}
	if o.StateTimeout <= 0 {
		o.StateTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	d := &Dashboard{o: o, logins: map[string]time.Time{}, sessions: map[string]time.Time{}, views: map[string]view{}}
	static, _ := fs.Sub(assets, "assets")
	p := o.Prefix
	m := http.NewServeMux()
	m.HandleFunc("GET "+p+"/login", d.handleLogin)
	m.HandleFunc("POST "+p+"/logout", d.handleLogout)
	m.Handle("GET "+p+"/{$}", d.page(http.StripPrefix(p, http.FileServerFS(static))))
	m.Handle("GET "+p+"/app.js", d.page(http.StripPrefix(p, http.FileServerFS(static))))
	m.Handle("GET "+p+"/app.css", d.page(http.StripPrefix(p, http.FileServerFS(static))))
	m.Handle("GET "+p+"/novnc/core/", d.page(http.StripPrefix(p+"/novnc", http.FileServer(http.Dir(o.NoVNCDir)))))
	m.Handle("GET "+p+"/novnc/vendor/", d.page(http.StripPrefix(p+"/novnc", http.FileServer(http.Dir(o.NoVNCDir)))))
	m.HandleFunc("GET "+p+"/api/state", d.api(d.handleState))
	m.HandleFunc("POST "+p+"/api/computers/{id}/screens/{screen}/view", d.api(d.handleView))
	m.HandleFunc("POST "+p+"/api/computers/{id}/bots/{bot}/takeover", d.api(d.handleTake))
	m.HandleFunc("DELETE "+p+"/api/computers/{id}/bots/{bot}/takeover", d.api(d.handleRelease))
	m.HandleFunc("GET "+p+"/vnc/{view}", d.handleVNC)
	d.replayRoutes(m, p, http.StripPrefix(p, http.FileServerFS(static)))
	d.mux = m
	return d, nil
}

// Handler serves everything under Options.Prefix.
func (d *Dashboard) Handler() http.Handler { return d.mux }

// LoginLink mints a one-time sign-in link (a path under Prefix; the caller
// prepends the worker's address). It works once, within LoginTTL.
func (d *Dashboard) LoginLink() (string, error) {
	code, err := randomID()
	if err != nil {
		return "", err
	}
	exp := d.o.Now().Add(d.o.LoginTTL)
	d.mu.Lock()
	d.gcLocked()
	d.logins[hashOf(code)] = exp
	d.mu.Unlock()
	d.shared(sharedLogin+hashOf(code), exp)
	return d.o.Prefix + "/login?code=" + url.QueryEscape(code), nil
}

func randomID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

func hashOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// gcLocked drops expired codes, sessions and views.
func (d *Dashboard) gcLocked() {
	now := d.o.Now()
	for k, exp := range d.logins {
		if now.After(exp) {
			delete(d.logins, k)
		}
	}
	for k, exp := range d.sessions {
		if now.After(exp) {
			delete(d.sessions, k)
		}
	}
	for k, v := range d.views {
		if now.After(v.expires) {
			delete(d.views, k)
		}
	}
}

func (d *Dashboard) handleLogin(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	d.mu.Lock()
	d.gcLocked()
	h := hashOf(code)
	_, ok := d.logins[h]
	delete(d.logins, h)
	var session string
	var exp time.Time
	if ok {
		var err error
		if session, err = randomID(); err != nil {
			ok = false
		} else {
			exp = d.o.Now().Add(d.o.SessionTTL)
			d.sessions[hashOf(session)] = exp
		}
	}
	d.mu.Unlock()
	if ok {
		// The code is spent on every peer, and the session good on each.
		d.shared(sharedLogin+h, time.Time{})
		d.shared(sharedSession+hashOf(session), exp)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if !ok {
		d.signedOut(w, "This sign-in link is invalid, used or expired. Ask the worker for a new one.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: session, Path: d.o.Prefix + "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: d.o.Secure,
		MaxAge: int(d.o.SessionTTL.Seconds()),
	})
	d.o.Log.Info().Msg("dashboard sign-in")
	http.Redirect(w, r, d.o.Prefix+"/", http.StatusSeeOther)
}

func (d *Dashboard) handleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		d.mu.Lock()
		delete(d.sessions, hashOf(c.Value))
		d.mu.Unlock()
		d.shared(sharedSession+hashOf(c.Value), time.Time{})
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: d.o.Prefix + "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: d.o.Secure})
	http.Redirect(w, r, d.o.Prefix+"/", http.StatusSeeOther)
}

// session returns the hash of the request's valid session, or "".
func (d *Dashboard) session(r *http.Request) string {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return ""
	}
	h := hashOf(c.Value)
	d.mu.Lock()
	defer d.mu.Unlock()
	exp, ok := d.sessions[h]
	if !ok || d.o.Now().After(exp) {
		return ""
	}
	return h
}

func (d *Dashboard) signedOut(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`<!doctype html><meta charset="utf-8"><title>Sign in · open-bot computer</title>` +
		`<body style="font:15px system-ui;margin:3em"><h1>open-bot computer</h1><p id="signin">` + htmlEscape(msg) + `</p>`))
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;").Replace(s)
}

// page guards the page and its static files.
func (d *Dashboard) page(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.session(r) == "" {
			d.signedOut(w, "Sign in with the one-time link the worker prints.")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}

type apiFunc func(w http.ResponseWriter, r *http.Request, session string) error

// api guards the JSON routes: a session, and on writes the X-Dashboard
// header; errors become the shared envelope.
func (d *Dashboard) api(f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s := d.session(r)
		if s == "" {
			writeErr(w, shared.Errorf(http.StatusUnauthorized, shared.CodeUnauthorized, "sign in again with a link from the worker"))
			return
		}
		if r.Method != http.MethodGet && r.Header.Get("X-Dashboard") != "1" {
			writeErr(w, shared.Errorf(http.StatusForbidden, shared.CodeForbidden, "missing X-Dashboard header"))
			return
		}
		if err := f(w, r, s); err != nil {
			var ae *shared.APIError
			if !errors.As(err, &ae) {
				d.o.Log.Error().Err(err).Str("path", r.URL.Path).Msg("dashboard request failed")
				ae = shared.Errorf(http.StatusInternalServerError, shared.CodeInternal, "the worker could not do that; see its log")
			}
			writeErr(w, ae)
		}
	}
}

func writeErr(w http.ResponseWriter, e *shared.APIError) {
	writeJSON(w, e.Status, shared.ErrorEnvelope{Error: shared.ErrorBody{Code: e.Code, Message: e.Message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type computerState struct {
	Computer
	Bots  []Bot  `json:"bots"`
	Runs  []Run  `json:"runs"`
	Error string `json:"error,omitempty"`
}

// stateWorkers bounds the computers whose parts are read at once.
const stateWorkers = 16

// handleState answers every computer with its bots and runs. The parts are
// read concurrently, each within StateTimeout: a computer whose machine is
// slow or hostile is marked unavailable and delays no other.
func (d *Dashboard) handleState(w http.ResponseWriter, r *http.Request, _ string) error {
	cs, err := d.o.Lister.Computers(r.Context())
	if err != nil {
		return err
	}
	out := make([]computerState, len(cs))
	slots := make(chan struct{}, stateWorkers)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			out[i] = d.computerPart(r.Context(), c)
		}()
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, map[string]any{"computers": out})
	return nil
}

// computerPart is computer c's part of the state, read within
// StateTimeout; one not read in time is answered without waiting for it.
func (d *Dashboard) computerPart(parent context.Context, c Computer) computerState {
	ctx, cancel := context.WithTimeout(parent, d.o.StateTimeout)
	defer cancel()
	type part struct {
		bots []Bot
		runs []Run
		err  error
	}
	done := make(chan part, 1)
	go func() {
		var p part
		if p.bots, p.err = d.o.Lister.Bots(ctx, c.ID); p.err == nil {
			p.runs, p.err = d.o.Lister.Runs(ctx, c.ID)
		}
		done <- p
	}()
	st := computerState{Computer: c, Bots: []Bot{}, Runs: []Run{}}
	var p part
	select {
	case p = <-done:
	case <-ctx.Done():
		p.err = ctx.Err()
	}
	switch {
	case p.err != nil && ctx.Err() != nil && parent.Err() == nil:
		d.o.Log.Warn().Str("computer", c.ID).Dur("timeout", d.o.StateTimeout).Msg("dashboard: computer details timed out")
		st.Error = "details unavailable: the computer did not answer in time"
	case p.err != nil:
		d.o.Log.Warn().Err(p.err).Str("computer", c.ID).Msg("dashboard: computer details")
		st.Error = "details unavailable"
	default:
		if p.bots != nil {
			st.Bots = p.bots
		}
		if p.runs != nil {
			st.Runs = p.runs
		}
	}
	return st
}

// findBot checks that computer id has a bot with that id (or screen).
func (d *Dashboard) findBot(ctx context.Context, computerID string, match func(Bot) bool) (Bot, error) {
	bots, err := d.o.Lister.Bots(ctx, computerID)
	if err != nil {
		var ae *shared.APIError
		if errors.As(err, &ae) {
			return Bot{}, err
		}
		return Bot{}, shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such computer")
	}
	for _, b := range bots {
		if match(b) {
			return b, nil
		}
	}
	return Bot{}, shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such bot or screen")
}

func (d *Dashboard) handleView(w http.ResponseWriter, r *http.Request, session string) error {
	cid, sid := r.PathValue("id"), r.PathValue("screen")
	if _, err := d.findBot(r.Context(), cid, func(b Bot) bool { return b.Screen == sid }); err != nil {
		return err
	}
	if sc, ok := d.o.Screens.(ScreenChecker); ok {
		if err := sc.CheckScreen(r.Context(), cid, sid); err != nil {
			return err
		}
	}
	rid, err := randomID()
	if err != nil {
		return err
	}
	// The computer first: a worker group routes the view to its owner.
	id := cid + "." + rid
	exp := d.o.Now().Add(d.o.ViewTTL)
	d.mu.Lock()
	d.gcLocked()
	d.views[hashOf(id)] = view{session: session, computer: cid, screen: sid, expires: exp}
	d.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ws": d.o.Prefix + "/vnc/" + id, "expiresAt": exp})
	return nil
}

func (d *Dashboard) handleTake(w http.ResponseWriter, r *http.Request, _ string) error {
	cid, bid := r.PathValue("id"), r.PathValue("bot")
	if _, err := d.findBot(r.Context(), cid, func(b Bot) bool { return b.ID == bid }); err != nil {
		return err
	}
	link, err := d.o.Controller.TakeControl(r.Context(), cid, bid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, link)
	return nil
}

func (d *Dashboard) handleRelease(w http.ResponseWriter, r *http.Request, _ string) error {
	cid, bid := r.PathValue("id"), r.PathValue("bot")
	if _, err := d.findBot(r.Context(), cid, func(b Bot) bool { return b.ID == bid }); err != nil {
		return err
	}
	if err := d.o.Controller.ReleaseControl(r.Context(), cid, bid); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"released": true})
	return nil
}

// handleVNC relays a view-only RFB websocket to botd. The browser's
// Origin must match the host (coder/websocket's default), the session
// cookie must own the view id, and the id must not have expired.
func (d *Dashboard) handleVNC(w http.ResponseWriter, r *http.Request) {
	s := d.session(r)
	if s == "" {
		http.Error(w, "sign in again", http.StatusUnauthorized)
		return
	}
	d.mu.Lock()
	v, ok := d.views[hashOf(r.PathValue("view"))]
	d.mu.Unlock()
	if !ok || v.session != s || d.o.Now().After(v.expires) {
		http.Error(w, "this view expired; reload the page", http.StatusUnauthorized)
		return
	}
	ctx := r.Context()
	if sc, ok := d.o.Screens.(ScreenChecker); ok {
		if err := sc.CheckScreen(ctx, v.computer, v.screen); err != nil {
			http.Error(w, "this screen cannot be shown on this computer", http.StatusServiceUnavailable)
			return
		}
	}
	c, err := d.o.Screens.Machine(ctx, v.computer)
	if err != nil {
		d.o.Log.Warn().Err(err).Str("computer", v.computer).Msg("dashboard view: no machine")
		http.Error(w, "the computer is not reachable", http.StatusBadGateway)
		return
	}
	link, err := c.ViewerToken(ctx, v.screen, "view", "", d.o.ViewTTL)
	if err != nil {
		d.o.Log.Warn().Err(err).Str("screen", v.screen).Msg("dashboard view: viewer link")
		http.Error(w, "the screen cannot be viewed now", http.StatusBadGateway)
		return
	}
	up, err := c.DialVNC(ctx, v.screen, link)
	if err != nil {
		d.o.Log.Warn().Str("screen", v.screen).Msg("dashboard view: botd refused the viewer")
		http.Error(w, "the screen is not running", http.StatusBadGateway)
		return
	}
	defer up.CloseNow()
	down, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return
	}
	defer down.CloseNow()
	up.SetReadLimit(-1)
	down.SetReadLimit(1 << 20)
	wsrelay.Pipe(ctx, down, up)
	_ = down.Close(websocket.StatusNormalClosure, "")
	_ = up.Close(websocket.StatusNormalClosure, "")
}

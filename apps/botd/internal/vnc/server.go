// Package vnc is human takeover: every screen's x11vnc relayed over a
// websocket (ws /screens/{id}/vnc and the screen's own view and control
// ports), signed viewer links that open one screen in one mode for at most
// ten minutes, a viewer page built on noVNC, and the rule that input
// reaches a screen only from the holder of its user lease.
//
// A control link binds to a lease holder, not to a lease: the link names a
// holder (default "user"), and its connections deliver input exactly while
// the screen's current lease is a user lease of that holder. Taking control
// (POST /screens/{id}/viewer-lease with the link, or POST
// /screens/{id}/lease with the bearer) acquires that lease and preempts an
// agent; when the lease is released or expires, input stops at the next
// message and the connections that had control are closed.
//
// botd speaks the RFB handshake on both sides (its own client handshake
// with x11vnc, a server handshake with the viewer) and then parses every
// viewer message before forwarding it, so x11vnc only ever sees a correct
// client: garbage closes that viewer's connection and nothing else.
package vnc

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
)

// Close codes a viewer sees (4000–4999 are the application's own).
const (
	// CodeNotRunning: the screen is not running; watching never starts it.
	CodeNotRunning websocket.StatusCode = 4001
	// CodeScreenStopped: the screen stopped while it was watched.
	CodeScreenStopped websocket.StatusCode = 4002
	// CodeControlEnded: the user lease this connection acted under was
	// released, expired or taken by someone else.
	CodeControlEnded websocket.StatusCode = 4003
	// CodeVNCClosed: the screen's x11vnc closed the connection.
	CodeVNCClosed websocket.StatusCode = 4004
	// CodeLinkExpired: the viewer link this connection was opened with
	// expired.
	CodeLinkExpired websocket.StatusCode = 4005
)

// DefaultHolder is the user-lease holder of a control link or bearer
// control connection that names none.
const DefaultHolder = "user"

// leasePoll is how often a control connection looks at the lease table to
// notice that its control ended (input itself is checked per message).
const leasePoll = 50 * time.Millisecond

// Options configures a Server.
type Options struct {
	// Screens is the screen manager whose x11vnc servers are relayed.
	Screens *screen.Manager
	// Token is BOTD_TOKEN at start; the link key is derived from it (and
	// from the new token on each Rekey).
	Token string
	// Authorized reports whether a request carries the bearer token
	// (api.Server.Authorized); the bearer also opens /vnc.
	Authorized func(*http.Request) bool
	// ListenHost is the host the per-screen view and control ports bind
	// (the API's host; "" is every interface).
	ListenHost string
	// MaxConns caps each view and control port's open connections
	// (httpx.DefaultMaxConns when 0).
	MaxConns int
	// NoVNCDir holds noVNC's core/ and vendor/ (default /usr/share/novnc).
	NoVNCDir string
	Log      zerolog.Logger
	// Now is the clock of link expiry (time.Now when nil).
	Now func() time.Time
}

// Server relays viewers to x11vnc and serves the viewer routes.
type Server struct {
	o       Options
	log     zerolog.Logger
	signer  *Signer
	screens *screen.Manager

	preloadOnce sync.Once
	preloadList []string

	// mu guards conns, ports and closed.
	mu     sync.Mutex
	conns  map[string]map[*relay]struct{}
	ports  map[string]*screenPorts
	closed bool
}

// New returns a Server and hooks it into the screen manager: a screen's
// view and control ports open when it starts and close (with every viewer)
// when it stops.
func New(o Options) *Server {
	if o.NoVNCDir == "" {
		o.NoVNCDir = "/usr/share/novnc"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{
		o: o, log: o.Log.With().Str("component", "vnc").Logger(), signer: NewSigner(o.Token, o.Now), screens: o.Screens,
		conns: map[string]map[*relay]struct{}{}, ports: map[string]*screenPorts{},
	}
	// A screen's view and control ports are bound before it counts as
	// started (someone else's port is replaced by one the kernel picks);
	// when they cannot be bound at all the start fails.
	o.Screens.OnStartRequired(func(ctx context.Context, sc *screen.Screen) error { return s.openPorts(sc.ID) })
	o.Screens.BeforeStop(func(ctx context.Context, sc *screen.Screen) { s.screenStopped(sc.ID) })
	// Screens already running (the server was made late) get their ports now.
	for _, in := range o.Screens.List() {
		if in.State == shared.StateRunning {
			if err := s.openPorts(in.ID); err != nil {
				s.log.Warn().Str("screen", in.ID).Err(err).Msg("view ports")
			}
		}
	}
	return s
}

// Signer mints and verifies the server's viewer links.
func (s *Server) Signer() *Signer { return s.signer }

// Rekey follows a rotation of the bearer token (api.Server.OnTokenRotate):
// every link signed under the old token stops opening anything new.
// Viewer connections already open stay open until their link expires, like
// any request in flight.
func (s *Server) Rekey(botdToken string) { s.signer.Rekey(botdToken) }

// Routes registers the viewer routes on mux. Only viewer-token needs the
// bearer; the others check their own link (see SelfAuth).
func (s *Server) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /screens/{id}/viewer-token", s.handleMint)
	mux.HandleFunc("GET /screens/{id}/vnc", s.handleVNC)
	mux.HandleFunc("GET /screens/{id}/view", s.handleView)
	mux.HandleFunc("GET /screens/{id}/viewer-state", s.handleState)
	mux.HandleFunc("POST /screens/{id}/viewer-lease", s.handleTake)
	mux.HandleFunc("DELETE /screens/{id}/viewer-lease", s.handleGive)
	mux.HandleFunc("GET /viewer/{file...}", s.handleStatic)
}

// SelfAuth matches exactly the routes that check a viewer link themselves
// (for api.Server.AllowSelfAuth): GET /screens/{id}/vnc (link or bearer),
// GET /screens/{id}/view, GET /screens/{id}/viewer-state, POST and DELETE
// /screens/{id}/viewer-lease, and the page's static files under GET
// /viewer/ (noVNC's public code; no secrets).
func (s *Server) SelfAuth(r *http.Request) bool {
	p := r.URL.Path
	if r.Method == http.MethodGet && strings.HasPrefix(p, "/viewer/") {
		return true
	}
	parts := strings.Split(p, "/")
	if len(parts) != 4 || parts[0] != "" || parts[1] != "screens" || screen.ValidID(parts[2]) != nil {
		return false
	}
	switch parts[3] {
	case "vnc", "view", "viewer-state":
		return r.Method == http.MethodGet
	case "viewer-lease":
		return r.Method == http.MethodPost || r.Method == http.MethodDelete
	}
	return false
}

// Close closes every port and viewer. Safe to call twice.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	var ports []*screenPorts
	for id, p := range s.ports {
		ports = append(ports, p)
		delete(s.ports, id)
	}
	var rs []*relay
	for _, set := range s.conns {
		for r := range set {
			rs = append(rs, r)
		}
	}
	s.mu.Unlock()
	for _, p := range ports {
		p.close()
	}
	for _, r := range rs {
		r.close(websocket.StatusGoingAway, "botd is stopping")
	}
}

// screenStopped closes the screen's ports and tells its viewers.
func (s *Server) screenStopped(id string) {
	s.mu.Lock()
	p := s.ports[id]
	delete(s.ports, id)
	var rs []*relay
	for r := range s.conns[id] {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	if p != nil {
		p.close()
	}
	for _, r := range rs {
		r.close(CodeScreenStopped, "the screen stopped")
	}
}

// Viewers counts open relays on screen id (for tests and health).
func (s *Server) Viewers(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns[id])
}

func (s *Server) track(r *relay) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	set := s.conns[r.screen]
	if set == nil {
		set = map[*relay]struct{}{}
		s.conns[r.screen] = set
	}
	set[r] = struct{}{}
	return true
}

func (s *Server) untrack(r *relay) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns[r.screen], r)
	if len(s.conns[r.screen]) == 0 {
		delete(s.conns, r.screen)
	}
}

var errUnauthorized = shared.Errorf(http.StatusUnauthorized, shared.CodeUnauthorized, "missing, invalid or expired viewer link")

// linkFrom is the viewer link a request carries: ?token=, the
// X-Viewer-Token header, or a Bearer header holding a link.
func linkFrom(r *http.Request) string {
	if t := r.Header.Get("X-Viewer-Token"); t != "" {
		return t
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && LooksLikeToken(t) {
		return t
	}
	return r.URL.Query().Get("token")
}

// admission is who a viewer connection is: the holder a control
// connection acts as, and when its link expires (zero for the bearer).
type admission struct {
	holder  string
	expires time.Time
}

// admit authenticates a viewer of screen id in mode, before anything else
// is looked at: a link for exactly that screen and mode, or (when
// bearerOK) the bearer token with an optional ?holder=.
func (s *Server) admit(r *http.Request, id string, mode Mode, bearerOK bool) (admission, error) {
	if tok := linkFrom(r); LooksLikeToken(tok) {
		c, err := s.signer.Verify(tok, id, mode)
		if err != nil {
			return admission{}, errUnauthorized
		}
		return admission{holder: c.Holder, expires: c.Expires}, nil
	}
	if bearerOK && s.o.Authorized != nil && s.o.Authorized(r) {
		h := r.URL.Query().Get("holder")
		if h == "" {
			h = DefaultHolder
		}
		return admission{holder: h}, nil
	}
	return admission{}, errUnauthorized
}

func (s *Server) handleVNC(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	mode := Mode(r.URL.Query().Get("mode"))
	if mode == "" {
		// Without ?mode= a link opens its own mode; the bearer views.
		mode = ModeView
		if c, err := s.signer.Parse(linkFrom(r)); err == nil {
			mode = c.Mode
		}
	}
	adm, err := s.admit(r, id, mode, true)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="botd"`)
		httpx.WriteErr(w, err)
		return
	}
	if !mode.Valid() {
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "mode must be view or control")
		return
	}
	if !isUpgrade(r) {
		httpx.WriteError(w, http.StatusUpgradeRequired, shared.CodeBadRequest, "this route speaks RFB over websocket only")
		return
	}
	s.serveViewer(w, r, id, mode, adm)
}

// errNotRunning is what a viewer of a stopped screen is told.
func errNotRunning(id string) error {
	return shared.Errorf(http.StatusConflict, shared.CodeScreenUnavailable, "screen %s is not running (watching never starts a screen)", id)
}

// serveViewer relays an admitted viewer: 400 for a bad id, 409 when the
// screen is not running, 503 when its x11vnc does not answer; then the
// upgrade (subprotocol "binary" when offered) and the relay.
func (s *Server) serveViewer(w http.ResponseWriter, r *http.Request, id string, mode Mode, adm admission) {
	if err := screen.ValidID(id); err != nil {
		httpx.WriteErr(w, err)
		return
	}
	in, ok := s.screens.Info(id)
	if !ok || in.State != shared.StateRunning || in.Ports == nil {
		httpx.WriteErr(w, errNotRunning(id))
		return
	}
	release, err := s.screens.Watch(id)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	defer release()
	var up net.Conn
	sock, ok := s.screens.VNCSocket(id)
	if !ok {
		err = errNotRunning(id)
	} else {
		d := net.Dialer{Timeout: 5 * time.Second}
		up, err = d.DialContext(r.Context(), "unix", sock)
	}
	var serverInit []byte
	if err == nil {
		if serverInit, err = vncHandshake(up); err != nil {
			up.Close()
		}
	}
	if err != nil {
		s.log.Warn().Str("screen", id).Err(err).Msg("x11vnc")
		httpx.WriteError(w, http.StatusServiceUnavailable, shared.CodeScreenUnavailable, "the screen's VNC server does not answer")
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{"binary"},
		// Links are capabilities carried in the URL, not cookies, so a
		// cross-origin page gains nothing; the view ports are other
		// origins than the page by nature.
		InsecureSkipVerify: true,
	})
	if err != nil {
		up.Close()
		return
	}
	rl := newRelay(s, id, mode, adm, ws, up, serverInit)
	if !s.track(rl) {
		up.Close()
		ws.Close(websocket.StatusGoingAway, "botd is stopping")
		return
	}
	defer s.untrack(rl)
	s.log.Debug().Str("screen", id).Str("mode", string(mode)).Msg("viewer connected")
	rl.run()
	s.log.Debug().Str("screen", id).Str("mode", string(mode)).Msg("viewer left")
}

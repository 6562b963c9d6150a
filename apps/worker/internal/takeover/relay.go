package takeover

import (
	"context"
	_ "embed"
	"errors"
	"html/template"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/apps/worker/internal/wsrelay"
)

//go:embed control.html
var controlPage string

//go:embed control.js
var controlJS string

var pageTmpl = template.Must(template.New("control").Parse(controlPage))

// Handler serves the control links under Prefix: GET with a websocket
// upgrade is the RFB relay (subprotocol "binary"); a plain GET is a small
// noVNC page that opens that relay. The link is the only credential (a
// person's browser has no worker token); an invalid link is 401, an
// expired or released one 410. NoVNCDir is Debian's novnc package.
func (s *Service) Handler(noVNCDir string) http.Handler {
	if noVNCDir == "" {
		noVNCDir = "/usr/share/novnc"
	}
	mux := http.NewServeMux()
	files := http.StripPrefix(Prefix+"novnc", http.FileServer(http.Dir(noVNCDir)))
	mux.Handle("GET "+Prefix+"novnc/core/", files)
	mux.Handle("GET "+Prefix+"novnc/vendor/", files)
	mux.HandleFunc("GET "+Prefix+"control.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write([]byte(controlJS))
	})
	mux.HandleFunc("GET "+Prefix+"{link}", s.serveLink)
	return mux
}

func (s *Service) serveLink(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	c, err := s.verify(r.PathValue("link"))
	switch {
	case errors.Is(err, errExpired):
		http.Error(w, "this control link expired; ask for a new one", http.StatusGone)
		return
	case err != nil:
		http.Error(w, "invalid control link", http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	g := s.grants[grantKey(c.Computer, c.Bot)]
	s.mu.Unlock()
	if g == nil || g.holder != c.Holder || g.screen != c.Screen {
		http.Error(w, "this control was released; ask for a new link", http.StatusGone)
		return
	}
	if !isUpgrade(r) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		_ = pageTmpl.Execute(w, map[string]any{"Screen": c.Screen, "Expires": time.Unix(c.Exp, 0).UTC().Format(time.RFC3339)})
		return
	}
	s.relay(w, r, c, g)
}

// quietErr is err's text fit for the log: the given secrets replaced and
// every URL's query dropped (a vendor's port URL may carry its own token
// there).
func quietErr(err error, secrets ...string) string {
	t := err.Error()
	for _, s := range secrets {
		if s != "" {
			t = strings.ReplaceAll(t, s, "[redacted]")
		}
	}
	return urlQuery.ReplaceAllString(t, "?[query]")
}

var urlQuery = regexp.MustCompile(`\?[^\s"']+`)

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// relay connects a person's control connection to botd until the link
// expires, the grant is released, or either side ends.
func (s *Service) relay(w http.ResponseWriter, r *http.Request, c claims, g *grant) {
	exp := time.Unix(c.Exp, 0)
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), exp)
	defer cancel()
	m, err := s.o.Computers.Machine(ctx, c.Computer)
	if err != nil {
		s.o.Log.Warn().Str("error", quietErr(err)).Str("computer", c.Computer).Msg("control relay: the computer is not reachable")
		http.Error(w, "the computer is not reachable", http.StatusBadGateway)
		return
	}
	// botd's own link for the rest of this one's life (at least a second),
	// sent in a header, never in a URL.
	left := (time.Until(exp) + time.Second - 1).Truncate(time.Second)
	if left < time.Second {
		left = time.Second
	}
	link, err := m.ViewerToken(ctx, c.Screen, "control", c.Holder, left)
	if err != nil {
		s.o.Log.Warn().Str("screen", c.Screen).Msg("control relay: botd refused a control link")
		http.Error(w, "the screen cannot be controlled now", http.StatusBadGateway)
		return
	}
	up, err := m.DialVNC(ctx, c.Screen, link)
	if err != nil {
		s.o.Log.Warn().Str("error", quietErr(err, link.Token)).Str("screen", c.Screen).Msg("control relay: the screen's VNC did not answer")
		http.Error(w, "the screen is not running", http.StatusBadGateway)
		return
	}
	defer up.CloseNow()
	down, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return
	}
	defer down.CloseNow()
	id := &struct{}{}
	s.mu.Lock()
	if s.grants[grantKey(c.Computer, c.Bot)] != g {
		s.mu.Unlock()
		_ = down.Close(websocket.StatusPolicyViolation, "control was released")
		return
	}
	g.conns[id] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(g.conns, id)
		s.mu.Unlock()
	}()
	up.SetReadLimit(-1)
	down.SetReadLimit(1 << 20)
	wsrelay.Pipe(ctx, down, up)
	reason := "control ended"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		reason = "the control link expired"
	}
	_ = down.Close(websocket.StatusPolicyViolation, reason)
}

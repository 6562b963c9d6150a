package vnc

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
)

// screenPorts are one running screen's own noVNC-compatible websocket
// ports: view (ViewPortBase+2*slot) and control (+1). Any path upgrades
// (noVNC asks for /websockify); the mode is the port's.
type screenPorts struct {
	servers []*http.Server
}

func (p *screenPorts) close() {
	for _, hs := range p.servers {
		_ = hs.Close()
	}
}

// openPorts starts screen id's view and control ports (idempotent). It is
// the screen manager's OnStartRequired hook: when either cannot be bound
// (someone else holds the port) nothing stays open and the start fails.
func (s *Server) openPorts(id string) error {
	in, ok := s.screens.Info(id)
	if !ok || in.Ports == nil {
		return fmt.Errorf("view ports of %s: the screen holds no slot", id)
	}
	s.mu.Lock()
	if s.closed || s.ports[id] != nil {
		s.mu.Unlock()
		return nil
	}
	p := &screenPorts{}
	s.ports[id] = p
	s.mu.Unlock()
	var errs []error
	for _, l := range []struct {
		port int
		mode Mode
	}{{in.Ports.View, ModeView}, {in.Ports.Control, ModeControl}} {
		addr := net.JoinHostPort(s.o.ListenHost, strconv.Itoa(l.port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s port: %w", l.mode, err))
			break
		}
		ln = httpx.LimitListener(ln, s.o.MaxConns, true)
		hs := &http.Server{Handler: s.portHandler(id, l.mode), ReadHeaderTimeout: httpx.ReadHeaderTimeout, IdleTimeout: httpx.IdleTimeout, MaxHeaderBytes: httpx.MaxHeaderBytes}
		p.servers = append(p.servers, hs)
		go func() { _ = hs.Serve(ln) }()
		s.log.Debug().Str("screen", id).Str("mode", string(l.mode)).Str("listen", ln.Addr().String()).Msg("viewer port open")
	}
	// A stop may have raced the start: then close what was just opened.
	s.mu.Lock()
	stale := s.ports[id] != p
	if !stale && len(errs) > 0 {
		delete(s.ports, id)
	}
	s.mu.Unlock()
	if stale || len(errs) > 0 {
		p.close()
	}
	return errors.Join(errs...)
}

// portHandler serves one screen port: websocket upgrades with a link for
// that screen and the port's mode (or the bearer), nothing else.
func (s *Server) portHandler(id string, mode Mode) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adm, err := s.admit(r, id, mode, true)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="botd"`)
			httpx.WriteErr(w, err)
			return
		}
		if r.Method != http.MethodGet || !isUpgrade(r) {
			httpx.WriteError(w, http.StatusUpgradeRequired, shared.CodeBadRequest, "this port speaks RFB over websocket only")
			return
		}
		s.serveViewer(w, r, id, mode, adm)
	})
}

func isUpgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		if strings.EqualFold(v, "websocket") {
			return true
		}
	}
	return false
}

package vnc

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
)

// screenPorts are one running screen's own noVNC-compatible websocket
// ports: view (ViewPortBase+2*slot) and control (+1) for a slot below
// MAX_SCREENS, else, and when someone else holds either, ports the kernel
// picks (issue 36 row 6: a bot that binds them first blocks no screen).
// Any path upgrades (noVNC asks for /websockify); the mode is the port's.
type screenPorts struct {
	servers []*http.Server
	// bound are the view and control ports, once both listen (guarded
	// by Server.mu).
	bound *screen.Ports
}

func (p *screenPorts) close() {
	for _, hs := range p.servers {
		_ = hs.Close()
	}
}

// openPorts starts screen id's view and control ports (idempotent) and
// reports them to the screen manager (SetPorts). It is the screen
// manager's OnStartRequired hook: a port someone else holds is replaced by
// one the kernel picks; when even that cannot be bound nothing stays open
// and the start fails.
func (s *Server) openPorts(id string) error {
	in, ok := s.screens.Info(id)
	if !ok || in.Ports == nil {
		return fmt.Errorf("view ports of %s: the screen holds no slot", id)
	}
	s.mu.Lock()
	if s.closed || s.ports[id] != nil {
		var bound *screen.Ports
		if p := s.ports[id]; p != nil {
			bound = p.bound
		}
		s.mu.Unlock()
		if bound != nil {
			s.screens.SetPorts(id, *bound)
		}
		return nil
	}
	p := &screenPorts{}
	s.ports[id] = p
	s.mu.Unlock()
	var errs []error
	var bound []int
	for _, l := range []struct {
		port int
		mode Mode
	}{{in.Ports.View, ModeView}, {in.Ports.Control, ModeControl}} {
		ln, err := s.listenPort(id, l.mode, l.port)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s port: %w", l.mode, err))
			break
		}
		bound = append(bound, ln.Addr().(*net.TCPAddr).Port)
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
	if !stale && len(errs) == 0 {
		p.bound = &screen.Ports{View: bound[0], Control: bound[1]}
	}
	s.mu.Unlock()
	if stale || len(errs) > 0 {
		p.close()
	}
	if !stale && len(errs) == 0 {
		s.screens.SetPorts(id, *p.bound)
	}
	return errors.Join(errs...)
}

// listenPort listens on port (0: one the kernel picks) on the view ports'
// host; when someone else holds port, on one the kernel picks.
func (s *Server) listenPort(id string, mode Mode, port int) (net.Listener, error) {
	if port != 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(s.o.ListenHost, strconv.Itoa(port)))
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return ln, err
		}
		s.log.Warn().Str("screen", id).Str("mode", string(mode)).Int("port", port).Msg("someone else holds the screen's port; taking one the kernel picks")
	}
	return net.Listen("tcp", net.JoinHostPort(s.o.ListenHost, "0"))
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

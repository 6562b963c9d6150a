package desktop

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Viewer link bounds (botd's).
const (
	DefaultLinkTTL = 5 * time.Minute
	MaxLinkTTL     = 10 * time.Minute
	// DefaultHolder is a control link's holder when none is named.
	DefaultHolder = "user"
)

type linkClaims struct {
	screen, mode, holder string
	expires              time.Time
}

// linkTable holds the viewer links this machine minted (the worker is
// their only verifier, so they are random tokens, not signed claims) and
// the open control streams, which end when their person's lease does.
type linkTable struct {
	now func() time.Time

	mu       sync.Mutex
	links    map[string]linkClaims
	controls map[*websocket.Conn]linkClaims
}

func newLinkTable(now func() time.Time) *linkTable {
	return &linkTable{now: now, links: map[string]linkClaims{}, controls: map[*websocket.Conn]linkClaims{}}
}

func (t *linkTable) mint(c linkClaims) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := "vt1." + hex.EncodeToString(b)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range t.links {
		if !now.Before(v.expires) {
			delete(t.links, k)
		}
	}
	t.links[tok] = c
	return tok
}

func (t *linkTable) verify(screen, tok string) (linkClaims, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.links {
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			return c, c.screen == screen && t.now().Before(c.expires)
		}
	}
	return linkClaims{}, false
}

func (t *linkTable) addControl(c *websocket.Conn, cl linkClaims) {
	t.mu.Lock()
	t.controls[c] = cl
	t.mu.Unlock()
}

func (t *linkTable) dropControl(c *websocket.Conn) {
	t.mu.Lock()
	delete(t.controls, c)
	t.mu.Unlock()
}

// endControl closes every control stream of holder on screen: its lease
// ended, so its input must stop reaching X.
func (t *linkTable) endControl(screen, holder string) {
	t.mu.Lock()
	var end []*websocket.Conn
	for c, cl := range t.controls {
		if cl.screen == screen && cl.holder == holder {
			end = append(end, c)
			delete(t.controls, c)
		}
	}
	t.mu.Unlock()
	for _, c := range end {
		_ = c.Close(websocket.StatusPolicyViolation, "control of the screen ended")
	}
}

// forget drops a forgotten screen's links and streams.
func (t *linkTable) forget(screen string) {
	t.mu.Lock()
	var end []*websocket.Conn
	for k, c := range t.links {
		if c.screen == screen {
			delete(t.links, k)
		}
	}
	for c, cl := range t.controls {
		if cl.screen == screen {
			end = append(end, c)
			delete(t.controls, c)
		}
	}
	t.mu.Unlock()
	for _, c := range end {
		_ = c.Close(websocket.StatusGoingAway, "the screen was forgotten")
	}
}

// ViewerToken mints a link to watch (mode "view") or control (mode
// "control", as holder) screen id, by botd's rules.
func (m *Machine) ViewerToken(ctx context.Context, id, mode, holder string, ttl time.Duration) (client.ViewerLink, error) {
	if err := validID(id); err != nil {
		return client.ViewerLink{}, err
	}
	if mode != "view" && mode != "control" {
		return client.ViewerLink{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "mode must be view or control")
	}
	switch {
	case ttl == 0:
		ttl = DefaultLinkTTL
	case ttl < 0 || ttl > MaxLinkTTL:
		return client.ViewerLink{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "ttlSeconds must be 1..600")
	}
	if mode == "control" {
		if holder == "" {
			holder = DefaultHolder
		}
		if len(holder) > MaxHolderLen {
			return client.ViewerLink{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "holder is too long")
		}
	} else if holder != "" {
		return client.ViewerLink{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "holder is for control links only")
	}
	m.register(id)
	exp := m.o.Now().Add(ttl)
	tok := m.links.mint(linkClaims{screen: id, mode: mode, holder: holder, expires: exp})
	q := url.Values{"token": {tok}}.Encode()
	return client.ViewerLink{Token: tok, ExpiresAt: exp.UTC(),
		ViewPath: "/screens/" + id + "/view?" + q,
		VNCPath:  "/screens/" + id + "/vnc?mode=" + mode + "&" + q}, nil
}

// DialVNC opens the screen's RFB stream over websocket: served from the
// screen's held stream when it has one (mux.go), else websockify in the
// sandbox, through the backend's port URL. A view link, or a control link
// whose holder does not hold the screen's user lease, gets the view-only
// x11vnc; a control link whose holder holds it gets the control x11vnc,
// and that stream is closed the moment the lease ends (released, expired,
// or taken over), so input reaches X only while the lease is held.
func (m *Machine) DialVNC(ctx context.Context, id string, link client.ViewerLink) (*websocket.Conn, error) {
	c, ok := m.links.verify(id, link.Token)
	if !ok {
		return nil, apiErr(http.StatusUnauthorized, shared.CodeUnauthorized, "invalid or expired viewer link")
	}
	s, err := m.ensure(ctx, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	slot, st := s.slot, s.stream
	m.mu.Unlock()
	control := false
	if c.mode == "control" {
		if cur := m.leases.current(id); cur != nil && cur.Kind == lease.User && cur.Holder == c.holder {
			control = true
		}
	}
	if st != nil {
		ws, err := m.serveHeld(ctx, id, st, c, control)
		if err != nil {
			return nil, err
		}
		if control {
			m.watchControl(id, ws, c)
		}
		return ws, nil
	}
	port := m.viewPort(slot)
	if control {
		port = m.ctlPort(slot)
	}
	base, hc, err := m.b.PortURL(ctx, port)
	if err != nil {
		return nil, fmt.Errorf("desktop machine: vnc port %d: %w", port, err)
	}
	var ws *websocket.Conn
	for i := 0; ; i++ {
		ws, err = dialWebsockify(ctx, base, hc)
		if err == nil || i >= 40 || ctx.Err() != nil {
			break
		}
		if serr := sleepCtx(ctx, 250*time.Millisecond); serr != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("desktop machine: dial the vnc stream of screen %s: %w", id, err)
	}
	ws.SetReadLimit(64 << 20)
	if control {
		m.watchControl(id, ws, c)
	}
	return ws, nil
}

// watchControl closes ws when a control link's holder no longer holds the
// screen's user lease (now, or when the lease ends). A caller's own Close
// leaves the entry until the lease ends (endControl closes it again,
// harmlessly) or the screen is forgotten.
func (m *Machine) watchControl(id string, ws *websocket.Conn, c linkClaims) {
	m.links.addControl(ws, c)
	// The lease may have ended between the check and the stream.
	if cur := m.leases.current(id); cur == nil || cur.Kind != lease.User || cur.Holder != c.holder {
		m.links.endControl(id, c.holder)
	}
}

// dialWebsockify opens the RFB websocket of the websockify at base (a port
// URL of the backend, reached with hc).
func dialWebsockify(ctx context.Context, base string, hc *http.Client) (*websocket.Conn, error) {
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/websockify",
		&websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPClient: hc})
	return ws, err
}

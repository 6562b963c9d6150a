package desktop

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/pkg/shared"
)

// hub is the machine's own event stream: botd's /events messages
// ({type, at, data}: lease, preempted, screen) for what the worker does
// here, served on a loopback websocket only this process knows the secret
// of. The sandbox itself publishes nothing.
type hub struct {
	mu     sync.Mutex
	subs   map[chan []byte]struct{}
	srv    *http.Server
	addr   string
	secret string
	closed bool
}

func newHub() *hub { return &hub{subs: map[chan []byte]struct{}{}} }

func (h *hub) publish(typ string, data any) {
	b, err := json.Marshal(shared.Event{Type: typ, At: time.Now().UTC(), Data: data})
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- b:
		default: // a subscriber that does not keep up loses events, never blocks the machine
		}
	}
}

func (h *hub) start() (string, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return "", "", errors.New("desktop machine: closed")
	}
	if h.srv != nil {
		return h.addr, h.secret, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", fmt.Errorf("desktop machine: events: %w", err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	h.secret = hex.EncodeToString(b)
	h.addr = ln.Addr().String()
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h.addr, h.secret, nil
}

func (h *hub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	secret := h.secret
	h.mu.Unlock()
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+secret)) != 1 {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	// Subscribed before the handshake completes: an event published once
	// DialEvents has returned reaches this stream.
	ch := make(chan []byte, 256)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ctx := c.CloseRead(r.Context())
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-ch:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				return
			}
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	srv := h.srv
	h.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// DialEvents opens the machine's event stream: lease, preemption and
// screen events of this machine, fed by the machine itself (the sandbox
// runs no botd to publish process or health events).
func (m *Machine) DialEvents(ctx context.Context) (*websocket.Conn, error) {
	addr, secret, err := m.events.start()
	if err != nil {
		return nil, err
	}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/events", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + secret}}})
	if err != nil {
		return nil, fmt.Errorf("desktop machine: events: %w", err)
	}
	return c, nil
}

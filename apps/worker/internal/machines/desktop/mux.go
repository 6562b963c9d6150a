package desktop

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/apps/worker/internal/rfb"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// MaxHeldViewers bounds the viewers one screen's held stream serves at
// once (each holds two frames of the screen: 8 MB at 1280x800).
const MaxHeldViewers = 16

// viewerReadLimit bounds one websocket message from a viewer (RFB
// messages are small; cut text is bounded by rfb.DefaultMaxCutText).
const viewerReadLimit = rfb.DefaultMaxCutText + 64

// serveHeld answers a viewer from screen id's held stream st (the
// multiplexer: one upstream session, any number of viewers up to
// MaxHeldViewers) instead of a connection of its own to the sandbox. The
// returned websocket is the viewer's end of an in-process pair, for the
// caller to relay like a dialled one; the RFB server runs on the other end
// until either side closes or the stream ends. A view link's input is
// dropped, and so is a control link's whose holder did not hold the
// screen's user lease at the dial (control false: it is served as a
// view, as websockify's view-only x11vnc would); a control link's input
// reaches the screen only while its holder holds that lease (asked for
// each event), and DialVNC closes the websocket when the lease ends.
func (m *Machine) serveHeld(ctx context.Context, id string, st *rfb.Stream, c linkClaims, control bool) (*websocket.Conn, error) {
	if m.viewers.Add(1) > MaxHeldViewers {
		m.viewers.Add(-1)
		return nil, apiErr(http.StatusTooManyRequests, shared.CodeBadRequest, "this screen has as many viewers as it serves; close one and retry")
	}
	near, far, err := wsPair(ctx)
	if err != nil {
		m.viewers.Add(-1)
		return nil, err
	}
	o := rfb.ServeOptions{Name: "open-bot screen " + id}
	if control {
		o.Control = func() bool {
			cur := m.leases.current(id)
			return cur != nil && cur.Kind == lease.User && cur.Holder == c.holder
		}
	}
	far.SetReadLimit(viewerReadLimit)
	bg := context.WithoutCancel(ctx)
	go func() {
		defer m.viewers.Add(-1)
		defer far.CloseNow()
		if err := rfb.Serve(bg, websocket.NetConn(bg, far, websocket.MessageBinary), st, o); err != nil {
			m.o.Log.Info().Str("screen", id).Str("mode", c.mode).Err(err).Msg("held stream viewer ended")
		}
	}()
	return near, nil
}

// wsPair is two ends of one websocket in the process: near is the
// client's end, far the server's. (The relays take a *websocket.Conn; a
// pipe spares the viewer a network hop.)
func wsPair(ctx context.Context) (near, far *websocket.Conn, err error) {
	a, b := net.Pipe()
	l := &oneConn{conn: b, closed: make(chan struct{})}
	accepted := make(chan *websocket.Conn, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
		if err != nil {
			return
		}
		accepted <- ws
	})}
	go srv.Serve(l)
	defer l.Close()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return a, nil }}}
	near, _, err = websocket.Dial(ctx, "ws://held-stream/", &websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPClient: hc})
	if err != nil {
		a.Close()
		b.Close()
		return nil, nil, errors.New("desktop machine: open the viewer's in-process websocket failed")
	}
	select {
	case far = <-accepted:
		return near, far, nil
	case <-ctx.Done():
		near.CloseNow()
		return nil, nil, ctx.Err()
	}
}

// oneConn is a listener that hands out one connection, then waits for
// Close.
type oneConn struct {
	mu     sync.Mutex
	conn   net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "held-stream" }

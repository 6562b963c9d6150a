package vnc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/pkg/shared/lease"
)

// maxClientMessage is the websocket read limit: the largest client message
// (a 1 MiB clipboard) with room to spare. The default 32 KiB is too small.
const maxClientMessage = 2 << 20

// renewEvery is how often input renews the user lease it acts under (use
// renews a lease; a human typing keeps control without a heartbeat).
const renewEvery = time.Second

// relay is one viewer: websocket ↔ the screen's x11vnc. Server-to-client
// bytes pass untouched; client-to-server bytes go through clientStream so
// view connections never deliver input.
type relay struct {
	s      *Server
	screen string
	mode   Mode
	holder string
	// expires is the link's expiry (zero for the bearer): the connection
	// closes then, and input never renews a lease past it.
	expires time.Time
	ws      *websocket.Conn
	up      net.Conn
	// serverInit is x11vnc's ServerInit, from botd's own handshake.
	serverInit []byte

	closeOnce sync.Once
	// closed is closed when close is first called.
	closed chan struct{}

	// mu guards hadControl and lastRenew.
	mu         sync.Mutex
	hadControl bool
	lastRenew  time.Time
}

func newRelay(s *Server, id string, mode Mode, adm admission, ws *websocket.Conn, up net.Conn, serverInit []byte) *relay {
	ws.SetReadLimit(maxClientMessage)
	return &relay{s: s, screen: id, mode: mode, holder: adm.holder, expires: adm.expires, ws: ws, up: up, serverInit: serverInit, closed: make(chan struct{})}
}

// close ends the relay with a close code and reason the viewer sees. The
// first call wins.
func (r *relay) close(code websocket.StatusCode, reason string) {
	r.closeOnce.Do(func() {
		close(r.closed)
		_ = r.up.Close()
		// Close waits for the viewer's close frame; never block the caller.
		go func() { _ = r.ws.Close(code, reason) }()
	})
}

// run relays until either side ends or close is called: first the
// viewer's handshake (with botd, see greet), then both directions.
func (r *relay) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !r.expires.IsZero() {
		t := time.AfterFunc(time.Until(r.expires), func() {
			r.close(CodeLinkExpired, "the viewer link expired")
		})
		defer t.Stop()
	}
	nc := websocket.NetConn(ctx, r.ws, websocket.MessageBinary)
	cs := newClientStream(nc)
	_ = nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if err := greet(nc, cs, r.serverInit); err != nil {
		r.clientFailed(err)
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if _, err := io.Copy(nc, r.up); err == nil {
			r.close(CodeVNCClosed, "the screen's VNC server closed the connection")
			return
		}
		r.close(CodeVNCClosed, "the screen's VNC connection failed")
	}()
	go func() {
		defer wg.Done()
		r.clientFailed(r.fromClient(cs))
	}()
	if r.mode == ModeControl {
		go r.watchLease()
	}
	// Both directions ended; close (already called) finishes the close
	// handshake on its own and then drops the connection.
	wg.Wait()
}

// clientFailed closes the relay after the viewer's side ended with err.
func (r *relay) clientFailed(err error) {
	if errors.Is(err, errProtocol) {
		r.s.log.Info().Str("screen", r.screen).Str("mode", string(r.mode)).Err(err).Msg("viewer closed: bad RFB")
		r.close(websocket.StatusPolicyViolation, "invalid RFB from the viewer")
		return
	}
	r.close(websocket.StatusNormalClosure, "")
}

// fromClient forwards what the viewer sends after the handshake, message
// by message: pixel format, encodings and framebuffer requests always; input only while control is held;
// reconfiguration never. A protocol error ends it before the bad unit is
// forwarded.
func (r *relay) fromClient(cs *clientStream) error {
	w := bufio.NewWriterSize(r.up, 16<<10)
	for {
		unit, cl, err := cs.next()
		if err != nil {
			return err
		}
		forward := cl == pass || (cl == input && r.mode == ModeControl && r.inControl(true))
		if forward {
			if _, err := w.Write(unit); err != nil {
				return err
			}
		}
		// Batch what already arrived; flush as soon as the viewer pauses
		// (also after a dropped unit, or what came before it would wait).
		if cs.buffered() == 0 && w.Buffered() > 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// inControl reports whether the screen's current lease is a user lease of
// this connection's holder. With use, it renews that lease (at most once
// per renewEvery).
func (r *relay) inControl(use bool) bool {
	leases := r.s.screens.Leases()
	cur := leases.Current(r.screen)
	ok := cur != nil && cur.Kind == lease.User && cur.Holder == r.holder
	if !ok {
		return false
	}
	r.mu.Lock()
	r.hadControl = true
	renew := use && time.Since(r.lastRenew) >= renewEvery
	if renew {
		r.lastRenew = time.Now()
	}
	r.mu.Unlock()
	if !r.expires.IsZero() && !time.Now().Before(r.expires) {
		return false // the link expired: its input acts no more
	}
	if renew {
		if r.expires.IsZero() {
			_, _ = leases.Check(r.screen, cur.ID)
		} else {
			leases.RenewUntil(r.screen, cur.ID, r.expires)
		}
	}
	return true
}

// watchLease closes a control connection as soon as the control it had
// ends (released, expired or taken by another holder). A connection that
// never had control stays open: it is watching, and may get control later.
func (r *relay) watchLease() {
	t := time.NewTicker(leasePoll)
	defer t.Stop()
	for {
		select {
		case <-r.closed:
			return
		case <-t.C:
		}
		had := func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.hadControl }()
		if !r.inControl(false) && had {
			r.close(CodeControlEnded, "control ended: the user lease was released or expired")
			return
		}
	}
}

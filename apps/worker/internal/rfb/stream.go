package rfb

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Stream states.
const (
	StateConnecting = "connecting"
	StateLive       = "live"
	StateDown       = "down"
)

// Backoff between redials: it doubles from backoffMin to backoffMax and
// starts again from backoffMin after a session that stayed up backoffReset.
const (
	backoffMin       = 250 * time.Millisecond
	backoffMax       = 10 * time.Second
	backoffReset     = 30 * time.Second
	handshakeTimeout = 30 * time.Second
)

// Stream holds one session to a screen and redials it whenever it ends.
type Stream struct {
	dial   func(ctx context.Context) (net.Conn, error)
	o      Options
	log    zerolog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards state, lastErr and client.
	mu      sync.Mutex
	state   string
	lastErr string
	client  *Client
}

// Hold starts holding a session: it dials, handshakes and, when the session
// ends, redials after 0.25 s, doubling to 10 s (back to 0.25 s after a
// session that lasted 30 s), until Close. dial's errors become State's
// lastErr and the "down" log line, so dial must return errors that carry
// no secret: net/http's and websocket.Dial's errors quote the URL, query
// and all, so wrap them into a message of your own. Besides that error the
// Stream logs state changes only.
func Hold(dial func(ctx context.Context) (net.Conn, error), o Options, log zerolog.Logger) *Stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stream{dial: dial, o: o, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{}), state: StateConnecting}
	go s.run()
	return s
}

// State is the stream's state ("connecting", "live" or "down") and why the
// last session ended or the last dial failed.
func (s *Stream) State() (state, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.lastErr
}

// Done is closed when the stream has ended for good (after Close).
func (s *Stream) Done() <-chan struct{} { return s.done }

// Client is the live session, or nil unless the state is live.
func (s *Stream) Client() *Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client
}

// Close ends the stream and its session and waits for both. Safe to call
// twice.
func (s *Stream) Close() {
	s.cancel()
	<-s.done
}

func (s *Stream) run() {
	defer close(s.done)
	wait := backoffMin
	for {
		s.set(StateConnecting, nil, nil)
		up, err := s.session()
		if s.ctx.Err() != nil {
			s.set(StateDown, ErrClosed, nil)
			return
		}
		if up >= backoffReset {
			wait = backoffMin
		}
		s.set(StateDown, err, nil)
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			return
		}
		wait = min(2*wait, backoffMax)
	}
}

// session dials and holds one session until it ends; it returns how long
// the session was live.
func (s *Stream) session() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(s.ctx, handshakeTimeout)
	defer cancel()
	conn, err := s.dial(ctx)
	if err != nil {
		return 0, err
	}
	c, err := Handshake(ctx, conn, s.o)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	s.set(StateLive, nil, c)
	select {
	case <-c.Done():
	case <-s.ctx.Done():
		c.Close()
	}
	return time.Since(start), c.Err()
}

func (s *Stream) set(state string, err error, c *Client) {
	s.mu.Lock()
	changed := s.state != state
	s.state, s.client = state, c
	if err != nil {
		s.lastErr = err.Error()
	}
	lastErr := s.lastErr
	s.mu.Unlock()
	if changed {
		ev := s.log.Info().Str("state", state)
		if state == StateDown {
			ev = ev.Str("error", lastErr)
		}
		ev.Msg("rfb stream")
	}
}

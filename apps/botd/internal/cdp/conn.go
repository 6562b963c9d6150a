// Package cdp is botd's Chrome DevTools Protocol transport over the
// --remote-debugging-pipe: NUL-terminated JSON messages, the browser reading
// fd 3 and writing fd 4. It implements the small Session cdproto's typed API
// needs (cdp.Call, cdp.Events), with flat sessions for pages, per-call
// timeouts, and a reader loop that never blocks: every event subscription
// buffers on its own, and results are decoded by the caller, so a result that
// does not decode still resolves its call (with an error).
package cdp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto"
	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/target"
	"github.com/rs/zerolog"
)

// DefaultCallTimeout bounds a call whose context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// ErrClosed is returned by calls on a closed connection (the browser exited
// or Close was called).
var ErrClosed = errors.New("cdp: connection closed")

// ErrDetached is returned by calls on a session whose target went away.
var ErrDetached = errors.New("cdp: session detached")

// Options configures a Conn; zero fields get defaults.
type Options struct {
	// CallTimeout bounds calls whose context has no deadline.
	CallTimeout time.Duration
	Log         *zerolog.Logger
}

// decodeOpts are the JSON options for everything read from Chromium: JSON v2
// semantics, but lone UTF-16 surrogates and invalid UTF-8 (which pages
// produce freely) become U+FFFD instead of failing the whole message.
var decodeOpts = jsonv2.JoinOptions(jsonv2.DefaultOptionsV2(), jsonv2.AllowInvalidUTF8(true))

// DecodeOptions returns the JSON options the transport decodes with, for
// callers that decode raw values themselves.
func DecodeOptions() jsonv2.Options { return decodeOpts }

type response struct {
	result jsonv2.Value
	err    error
}

type pendingCall struct {
	session target.SessionID
	ch      chan response // buffered 1: the reader never blocks on it

	// A tap's command (tap.go): its reply goes to the tap under the
	// client's id and session name.
	tap           *Tap
	clientID      int64
	clientSession target.SessionID
	method        string
}

type subKey struct {
	session target.SessionID
	method  string
}

// Conn is one DevTools pipe to one browser.
type Conn struct {
	w       io.WriteCloser
	r       io.ReadCloser
	timeout time.Duration
	log     zerolog.Logger
	nextID  atomic.Int64

	// wmu guards writes to w, so messages never interleave.
	wmu sync.Mutex

	// mu guards pending, subs, detached and err.
	mu       sync.Mutex
	pending  map[int64]pendingCall
	subs     map[subKey]map[*subscription]struct{}
	detached map[target.SessionID]struct{}
	// taps maps every session an outside client owns to its tap (tap.go).
	taps map[target.SessionID]*Tap
	err  error

	done      chan struct{}
	closeOnce sync.Once
}

// New starts a Conn that writes commands to w and reads replies and events
// from r (our ends of the browser's fd 3 and fd 4). It owns both and closes
// them on Close; closing w makes Chromium exit.
func New(w io.WriteCloser, r io.ReadCloser, o Options) *Conn {
	c := &Conn{
		w:        w,
		r:        r,
		timeout:  o.CallTimeout,
		pending:  map[int64]pendingCall{},
		subs:     map[subKey]map[*subscription]struct{}{},
		detached: map[target.SessionID]struct{}{},
		done:     make(chan struct{}),
	}
	if c.timeout <= 0 {
		c.timeout = DefaultCallTimeout
	}
	if o.Log != nil {
		c.log = *o.Log
	} else {
		c.log = zerolog.Nop()
	}
	go c.readLoop()
	return c
}

// Browser is the session of the browser target itself (no session id).
func (c *Conn) Browser() *Session { return &Session{conn: c} }

// Session returns the flat session with id (from Target.attachToTarget).
func (c *Conn) Session(id target.SessionID) *Session { return &Session{conn: c, id: id} }

// Attach attaches to a target with flatten:true and returns its session.
func (c *Conn) Attach(ctx context.Context, id target.ID) (*Session, error) {
	flatten := true
	res, err := cdpapi.Call(ctx, c.Browser(), target.AttachToTarget, target.AttachToTargetParams{TargetID: id, Flatten: &flatten})
	if err != nil {
		return nil, fmt.Errorf("attach to target: %w", err)
	}
	return c.Session(res.SessionID), nil
}

// Done is closed once the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection closed (nil while open).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes both pipe ends; pending calls fail with ErrClosed. Safe to
// call more than once.
func (c *Conn) Close() error {
	c.shutdown(ErrClosed)
	return nil
}

func (c *Conn) shutdown(err error) {
	c.closeOnce.Do(func() {
		_ = c.w.Close()
		_ = c.r.Close()
		c.mu.Lock()
		c.err = err
		pend := c.pending
		c.pending = map[int64]pendingCall{}
		subs := c.subs
		c.subs = map[subKey]map[*subscription]struct{}{}
		taps := map[*Tap]bool{}
		for _, t := range c.taps {
			taps[t] = true
		}
		c.taps = nil
		c.mu.Unlock()
		for _, p := range pend {
			if p.tap == nil {
				p.ch <- response{err: err}
			}
		}
		for t := range taps {
			t.end(err)
		}
		for _, set := range subs {
			for s := range set {
				s.finish()
			}
		}
		close(c.done)
	})
}

// message is the envelope of everything Chromium sends.
type message = cdproto.Message

func (c *Conn) readLoop() {
	br := bufio.NewReaderSize(c.r, 64<<10)
	for {
		data, err := br.ReadBytes(0)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
				c.shutdown(ErrClosed)
			} else {
				c.shutdown(fmt.Errorf("%w: read: %v", ErrClosed, err))
			}
			return
		}
		c.dispatch(data[:len(data)-1])
	}
}

// dispatch routes one message. It never blocks: replies go to a buffered
// channel, events to subscriptions that queue without bound.
func (c *Conn) dispatch(data []byte) {
	var msg message
	if err := jsonv2.Unmarshal(data, &msg, decodeOpts); err != nil {
		// Resolve the call it answers, if the id can still be found.
		if id, ok := peekID(data); ok {
			c.resolve(id, response{err: fmt.Errorf("cdp: decode reply: %w", err)})
			return
		}
		c.log.Warn().Err(err).Int("bytes", len(data)).Msg("undecodable devtools message dropped")
		return
	}
	if msg.ID != 0 {
		c.mu.Lock()
		p, ok := c.pending[msg.ID]
		if ok && p.tap != nil {
			delete(c.pending, msg.ID)
			c.mu.Unlock()
			c.tapReply(p, &msg)
			return
		}
		c.mu.Unlock()
		var r response
		if msg.Error != nil {
			r.err = msg.Error
		} else {
			r.result = msg.Result
		}
		c.resolve(msg.ID, r)
		return
	}
	if msg.Method == "" {
		return
	}
	if msg.Method == "Target.detachedFromTarget" {
		c.onDetached(msg.Params)
	}
	if msg.SessionID != "" && c.tapEvent(&msg, data) {
		return
	}
	c.mu.Lock()
	set := c.subs[subKey{msg.SessionID, string(msg.Method)}]
	subs := make([]*subscription, 0, len(set))
	for s := range set {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.push(msg.Params)
	}
}

func (c *Conn) resolve(id int64, r response) {
	c.mu.Lock()
	p, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	switch {
	case ok && p.tap != nil:
		p.tap.donePending()
		p.tap.ReplyError(p.clientID, p.clientSession, p.method, codeServerError, "the browser's answer did not decode")
	case ok:
		p.ch <- r
	}
}

// onDetached fails the detached session's calls and ends its subscriptions.
func (c *Conn) onDetached(params jsonv2.Value) {
	var ev target.EventDetachedFromTarget
	if err := jsonv2.Unmarshal(params, &ev, decodeOpts); err != nil || ev.SessionID == "" {
		return
	}
	c.mu.Lock()
	c.detached[ev.SessionID] = struct{}{}
	var fail []pendingCall
	for id, p := range c.pending {
		if p.session == ev.SessionID {
			fail = append(fail, p)
			delete(c.pending, id)
		}
	}
	var ended []*subscription
	for k, set := range c.subs {
		if k.session == ev.SessionID {
			for s := range set {
				ended = append(ended, s)
			}
			delete(c.subs, k)
		}
	}
	c.mu.Unlock()
	for _, p := range fail {
		if p.tap != nil {
			p.tap.donePending()
			p.tap.ReplyError(p.clientID, p.clientSession, p.method, codeSessionNotFound, "Session with given id not found.")
			continue
		}
		p.ch <- response{err: ErrDetached}
	}
	for _, s := range ended {
		s.finish()
	}
}

// peekID finds the "id" of a message that failed to decode as a whole.
// Chromium writes it first ({"id":N,...}), so the rest may be anything.
func peekID(data []byte) (int64, bool) {
	var probe struct {
		ID int64 `json:"id"`
	}
	if err := jsonv2.Unmarshal(data, &probe, decodeOpts); err == nil && probe.ID != 0 {
		return probe.ID, true
	}
	b := bytes.TrimLeft(data, " \t\r\n")
	for _, lit := range []string{"{", `"id"`, ":"} {
		if !bytes.HasPrefix(b, []byte(lit)) {
			return 0, false
		}
		b = bytes.TrimLeft(b[len(lit):], " \t\r\n")
	}
	var id int64
	n := 0
	for n < len(b) && n < 18 && b[n] >= '0' && b[n] <= '9' {
		id = id*10 + int64(b[n]-'0')
		n++
	}
	return id, n > 0 && id != 0
}

// call sends one command and waits for its reply.
func (c *Conn) call(ctx context.Context, session target.SessionID, method string, params, result any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var raw jsonv2.Value
	if params != nil {
		b, err := jsonv2.Marshal(params, jsonv2.AllowInvalidUTF8(true))
		if err != nil {
			return fmt.Errorf("cdp: encode %s: %w", method, err)
		}
		raw = b
	}
	id := c.nextID.Add(1)
	out, err := jsonv2.Marshal(&message{ID: id, SessionID: session, Method: cdproto.MethodType(method), Params: raw})
	if err != nil {
		return fmt.Errorf("cdp: encode %s: %w", method, err)
	}
	out = append(out, 0)

	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	if _, gone := c.detached[session]; gone && session != "" {
		c.mu.Unlock()
		return ErrDetached
	}
	c.pending[id] = pendingCall{session: session, ch: ch}
	c.mu.Unlock()

	if err := c.write(ctx, out); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("cdp: %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("cdp: %s: %w", method, r.err)
		}
		if result == nil || len(r.result) == 0 {
			return nil
		}
		if err := jsonv2.Unmarshal(r.result, result, decodeOpts); err != nil {
			return fmt.Errorf("cdp: decode %s result: %w", method, err)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("cdp: %s: %w", method, ctx.Err())
	}
}

// write sends one framed message. The write itself runs in its own goroutine
// so a browser that stops reading cannot hold a caller past its context.
func (c *Conn) write(ctx context.Context, b []byte) error {
	errc := make(chan error, 1)
	go func() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		select {
		case <-c.done:
			errc <- ErrClosed
			return
		default:
		}
		_, err := c.w.Write(b)
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			c.shutdown(fmt.Errorf("%w: write: %v", ErrClosed, err))
			return ErrClosed
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}

// Session is one CDP session: the browser target or a flat page session. It
// implements cdproto's cdp.Session, so cdp.Call and cdp.Events work on it.
type Session struct {
	conn *Conn
	id   target.SessionID
}

var _ cdpapi.Session = (*Session)(nil)

// ID is the session id ("" for the browser target).
func (s *Session) ID() target.SessionID { return s.id }

// Conn is the connection the session runs on.
func (s *Session) Conn() *Conn { return s.conn }

// Call implements cdp.Session.
func (s *Session) Call(ctx context.Context, method string, params, result any) error {
	return s.conn.call(ctx, s.id, method, params, result)
}

// Subscribe implements cdp.Session: events of method on this session queue
// from now on until cancel, the session detaching, or the connection closing.
func (s *Session) Subscribe(method string) (<-chan jsonv2.Value, func()) {
	sub := newSubscription()
	k := subKey{s.id, method}
	c := s.conn
	c.mu.Lock()
	_, gone := c.detached[s.id]
	if c.err != nil || (gone && s.id != "") {
		c.mu.Unlock()
		sub.finish()
		return sub.out, func() {}
	}
	set := c.subs[k]
	if set == nil {
		set = map[*subscription]struct{}{}
		c.subs[k] = set
	}
	set[sub] = struct{}{}
	c.mu.Unlock()
	return sub.out, func() {
		c.mu.Lock()
		if set := c.subs[k]; set != nil {
			delete(set, sub)
			if len(set) == 0 {
				delete(c.subs, k)
			}
		}
		c.mu.Unlock()
		sub.cancel()
	}
}

package cdp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/chromedp/cdproto"
	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/target"
)

// A Tap is one outside DevTools client's share of the pipe (the CDP relay,
// issue 34): a browser session of its own, made with
// Target.attachToBrowserTarget, so its Target domain state (auto-attach,
// discovery) is its own and never changes botd's. The client's commands go
// out with ids from the connection's own sequence and come back with the
// client's; the client's root session is the tap's browser session, which
// the client never sees by name. Events reach a tap only for the sessions it
// owns: its browser session and every session attached from one it owns
// (followed synchronously on the reader loop, so no event of a new child is
// misrouted). Nothing botd itself does is ever seen by a tap.
//
// The reader loop never waits on a tap: messages queue up to the tap's
// bounds, and a client that falls behind them ends its tap with
// ErrTapOverflow.
type Tap struct {
	c    *Conn
	root target.SessionID
	max  TapLimits

	// mu guards everything below.
	mu      sync.Mutex
	queue   []TapMessage
	bytes   int
	pending int
	err     error
	wake    chan struct{}
	done    chan struct{}
}

// TapLimits bound one tap; zero fields get the defaults.
type TapLimits struct {
	// QueueBytes and QueueMessages bound what waits for the client
	// (default 64 MiB, 8192 messages).
	QueueBytes    int
	QueueMessages int
	// Pending bounds the client's commands in flight (default 256).
	Pending int
}

// Tap errors.
var (
	// ErrTapOverflow ends a tap whose client did not keep up.
	ErrTapOverflow = errors.New("the client did not read its messages fast enough")
	// ErrTapClosed ends a tap closed by its owner.
	ErrTapClosed = errors.New("cdp: tap closed")
)

// Chromium's own error codes, which clients match on.
const (
	codeServerError     = -32000
	codeSessionNotFound = -32001
)

// TapMessage is one message for the client: a reply (ID != 0) or an event.
// Session is the session as the client names it ("" for its root).
type TapMessage struct {
	ID      int64
	Session target.SessionID
	// Method is an event's method, or the method of the command a reply
	// answers.
	Method string
	// Params is an event's params, Result a reply's result.
	Params jsonv2.Value
	Result jsonv2.Value
	Error  *cdproto.Error
	// raw is the message as Chromium sent it, when it needs no rewriting
	// (an event of a child session); Changed drops it.
	raw []byte
}

// IsReply reports whether m answers a command.
func (m *TapMessage) IsReply() bool { return m.ID != 0 }

// Changed marks m as rewritten: Encode builds it from its fields.
func (m *TapMessage) Changed() { m.raw = nil }

// Size is the message's size as Chromium sent it (or its fields').
func (m *TapMessage) Size() int {
	if m.raw != nil {
		return len(m.raw)
	}
	return len(m.Params) + len(m.Result) + len(m.Method) + 64
}

// Encode is the message's JSON for the client.
func (m *TapMessage) Encode() ([]byte, error) {
	if m.raw != nil {
		return m.raw, nil
	}
	out := message{ID: m.ID, SessionID: m.Session}
	if m.ID != 0 {
		out.Error = m.Error
		if m.Error == nil {
			out.Result = m.Result
			if len(out.Result) == 0 {
				out.Result = jsonv2.Value("{}")
			}
		}
	} else {
		out.Method = cdproto.MethodType(m.Method)
		out.Params = m.Params
	}
	return jsonv2.Marshal(&out, jsonv2.AllowInvalidUTF8(true))
}

// OpenTap attaches a new browser session for an outside client.
func (c *Conn) OpenTap(ctx context.Context, lim TapLimits) (*Tap, error) {
	if lim.QueueBytes <= 0 {
		lim.QueueBytes = 64 << 20
	}
	if lim.QueueMessages <= 0 {
		lim.QueueMessages = 8192
	}
	if lim.Pending <= 0 {
		lim.Pending = 256
	}
	res, err := cdpapi.Call(ctx, c.Browser(), target.AttachToBrowserTarget, cdpapi.Empty{})
	if err != nil {
		return nil, fmt.Errorf("attach a browser session: %w", err)
	}
	t := &Tap{c: c, root: res.SessionID, max: lim, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	if c.taps == nil {
		c.taps = map[target.SessionID]*Tap{}
	}
	c.taps[t.root] = t
	c.mu.Unlock()
	return t, nil
}

// Done is closed when the tap ends; Err then says why.
func (t *Tap) Done() <-chan struct{} { return t.done }

// Limits are the tap's bounds, defaults filled in.
func (t *Tap) Limits() TapLimits { return t.max }

// Err is why the tap ended (nil while open).
func (t *Tap) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Owns reports whether the client's session id is one of the tap's ("" is
// its root).
func (t *Tap) Owns(session target.SessionID) bool {
	if session == "" {
		return true
	}
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.c.taps[session] == t
}

// Send forwards one client command. id is the client's; session is the
// client's name for the session ("" its root). A session the tap does not
// own, or too many commands in flight, is answered with an error reply.
// It returns an error only when the tap or the connection has ended.
func (t *Tap) Send(ctx context.Context, id int64, session target.SessionID, method string, params jsonv2.Value) error {
	if err := t.Err(); err != nil {
		return err
	}
	wire := session
	if wire == "" {
		wire = t.root
	} else if wire == t.root {
		// The root's real id is not the client's to use.
		t.ReplyError(id, session, method, codeSessionNotFound, "Session with given id not found.")
		return nil
	}
	c := t.c
	t.mu.Lock()
	if t.pending >= t.max.Pending {
		t.mu.Unlock()
		t.ReplyError(id, session, method, codeServerError, fmt.Sprintf("too many commands in flight (at most %d)", t.max.Pending))
		return nil
	}
	t.pending++
	t.mu.Unlock()

	nid := c.nextID.Add(1)
	out, err := jsonv2.Marshal(&message{ID: nid, SessionID: wire, Method: cdproto.MethodType(method), Params: params}, jsonv2.AllowInvalidUTF8(true))
	if err != nil {
		t.donePending()
		t.ReplyError(id, session, method, codeServerError, "the command's params do not encode")
		return nil
	}
	out = append(out, 0)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		t.donePending()
		return err
	}
	if c.taps[wire] != t {
		c.mu.Unlock()
		t.donePending()
		t.ReplyError(id, session, method, codeSessionNotFound, "Session with given id not found.")
		return nil
	}
	c.pending[nid] = pendingCall{session: wire, tap: t, clientID: id, clientSession: session, method: method}
	c.mu.Unlock()
	if err := c.write(ctx, out); err != nil {
		c.mu.Lock()
		_, still := c.pending[nid]
		delete(c.pending, nid)
		c.mu.Unlock()
		if still {
			t.donePending()
		}
		return err
	}
	return nil
}

// Call is a command of the relay itself on one of the tap's sessions ("" its
// root); its reply goes to the caller, never to the client.
func (t *Tap) Call(ctx context.Context, session target.SessionID, method string, params, result any) error {
	if session == "" {
		session = t.root
	}
	return t.c.call(ctx, session, method, params, result)
}

// ReplyError queues an error reply to the client's command id.
func (t *Tap) ReplyError(id int64, session target.SessionID, method string, code int64, msg string) {
	t.push(TapMessage{ID: id, Session: session, Method: method, Error: &cdproto.Error{Code: code, Message: msg}})
}

// Next returns the next message for the client, waiting for one; it fails
// once the tap has ended (after what was queued, unless the tap overflowed)
// or ctx is done.
func (t *Tap) Next(ctx context.Context) (TapMessage, error) {
	for {
		t.mu.Lock()
		if len(t.queue) > 0 && !errors.Is(t.err, ErrTapOverflow) {
			m := t.queue[0]
			t.queue[0] = TapMessage{}
			t.queue = t.queue[1:]
			t.bytes -= m.Size()
			t.mu.Unlock()
			return m, nil
		}
		if t.err != nil {
			err := t.err
			t.mu.Unlock()
			return TapMessage{}, err
		}
		t.mu.Unlock()
		select {
		case <-t.wake:
		case <-t.done:
		case <-ctx.Done():
			return TapMessage{}, ctx.Err()
		}
	}
}

// Close detaches the tap's sessions (children first, then its browser
// session) and ends it. Safe to call more than once.
func (t *Tap) Close(ctx context.Context) {
	c := t.c
	c.mu.Lock()
	var owned []target.SessionID
	for s, o := range c.taps {
		if o == t {
			owned = append(owned, s)
			delete(c.taps, s)
		}
	}
	for id, p := range c.pending {
		if p.tap == t {
			delete(c.pending, id)
		}
	}
	c.mu.Unlock()
	t.end(ErrTapClosed)
	for _, s := range owned {
		if s == t.root {
			continue
		}
		_, _ = cdpapi.Call(ctx, c.Browser(), target.DetachFromTarget, target.DetachFromTargetParams{SessionID: s})
	}
	if len(owned) > 0 {
		_, _ = cdpapi.Call(ctx, c.Browser(), target.DetachFromTarget, target.DetachFromTargetParams{SessionID: t.root})
	}
}

func (t *Tap) donePending() {
	t.mu.Lock()
	if t.pending > 0 {
		t.pending--
	}
	t.mu.Unlock()
}

// push queues m for the client; it never blocks. Past the bounds the tap
// ends with ErrTapOverflow.
func (t *Tap) push(m TapMessage) {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	n := m.Size()
	if len(t.queue) >= t.max.QueueMessages || t.bytes+n > t.max.QueueBytes {
		t.mu.Unlock()
		t.end(ErrTapOverflow)
		return
	}
	t.queue = append(t.queue, m)
	t.bytes += n
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *Tap) end(err error) {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	t.err = err
	if errors.Is(err, ErrTapOverflow) {
		t.queue, t.bytes = nil, 0
	}
	t.mu.Unlock()
	close(t.done)
}

// tapReply delivers the reply to a tap's command (called on the reader loop
// with the pending entry already removed). A successful
// Target.attachToTarget makes its new session the tap's before any of its
// events can arrive.
func (c *Conn) tapReply(p pendingCall, msg *message) {
	p.tap.donePending()
	if msg.Error == nil && p.method == target.CommandAttachToTarget {
		var res target.AttachToTargetResult
		if err := jsonv2.Unmarshal(msg.Result, &res, decodeOpts); err == nil && res.SessionID != "" {
			c.mu.Lock()
			if c.taps[p.session] == p.tap {
				c.taps[res.SessionID] = p.tap
			}
			c.mu.Unlock()
		}
	}
	p.tap.push(TapMessage{ID: p.clientID, Session: p.clientSession, Method: p.method, Result: msg.Result, Error: msg.Error})
}

// tapEvent delivers an event of a session some tap owns, following
// attach/detach so the tap's set of sessions is current for the next
// message. It reports whether a tap took it.
func (c *Conn) tapEvent(msg *message, data []byte) bool {
	c.mu.Lock()
	t := c.taps[msg.SessionID]
	if t == nil {
		c.mu.Unlock()
		return false
	}
	switch msg.Method {
	case cdproto.EventTargetAttachedToTarget:
		var ev target.EventAttachedToTarget
		if err := jsonv2.Unmarshal(msg.Params, &ev, decodeOpts); err == nil && ev.SessionID != "" {
			c.taps[ev.SessionID] = t
		}
	case cdproto.EventTargetDetachedFromTarget:
		var ev target.EventDetachedFromTarget
		if err := jsonv2.Unmarshal(msg.Params, &ev, decodeOpts); err == nil && ev.SessionID != "" && c.taps[ev.SessionID] == t {
			delete(c.taps, ev.SessionID)
		}
	}
	c.mu.Unlock()
	m := TapMessage{Session: msg.SessionID, Method: string(msg.Method), Params: msg.Params}
	if msg.SessionID == t.root {
		m.Session = ""
	} else {
		m.raw = data
	}
	t.push(m)
	return true
}

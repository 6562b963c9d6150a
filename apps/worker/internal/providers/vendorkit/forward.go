package vendorkit

// The forwarder: botd inside a vendor's sandbox, and any other port a
// vendor desktop's machine reaches (its VNC/websockify stream), is reached
// through the vendor's own routing (E2B's port hosts or E2B_SANDBOX_URL
// headers and traffic token, Daytona's preview URL and token, Box's desktop
// URL), which the round tripper a provider hands NewForwarder adds.
//
// The forwarder is an in-process http.RoundTripper, not a listener: the
// worker's parts that talk to a botd (its typed client, the events and
// agent websockets, workspace export) and the desktop machine's VNC dial
// use URL with Client (or the Forwarder as their transport). No TCP port
// (nor any socket) is opened, so no other local user or process can borrow
// the vendor's routing credential: a person reaches a desktop only through
// the worker's capability-checked takeover relay. URL's host is in the
// reserved .invalid domain, so a request sent there by any other client
// resolves nowhere. The forwarder is also where use is seen (for the
// provider's timeout or activity refresher) and where a sandbox that
// stopped answering is explained (the provider's explain says why: paused,
// stopped, gone). Close ends every request and upgraded connection through
// it, and refuses later ones.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is what a request through a closed forwarder fails with.
var ErrClosed = errors.New("vendor forwarder closed (the session ended)")

// Forwarder is one sandbox port's in-process entry (botd's, or a desktop
// stream's): an http.RoundTripper that sends each request to the target
// through the vendor's round tripper.
type Forwarder struct {
	target  *url.URL
	rt      http.RoundTripper
	explain func(ctx context.Context) (status int, msg string, known bool)
	base    string
	client  *http.Client

	// closed is cancelled by Close: every request's context derives from
	// it too.
	closed context.Context
	close  context.CancelFunc

	// lastUse is the unix nanos of the last request that counts as use;
	// upgraded counts open upgraded connections that do.
	lastUse  atomic.Int64
	upgraded atomic.Int64

	mu    sync.Mutex
	conns map[*upgradedConn]struct{} // open upgraded connections, closed by Close
}

// uses says whether a request to botd is use of the computer: the
// worker's own health probes and its events follower are not.
func uses(r *http.Request) bool {
	switch r.URL.Path {
	case "/health", "/healthz", "/events":
		return false
	}
	return true
}

// NewForwarder returns the forwarder to target through rt (nil:
// http.DefaultTransport). explain, when the target does not answer, says
// why in botd's error envelope (known: the sandbox is not running, which
// explains it).
func NewForwarder(target *url.URL, rt http.RoundTripper, explain func(ctx context.Context) (status int, msg string, known bool)) *Forwarder {
	if rt == nil {
		rt = http.DefaultTransport
	}
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	f := &Forwarder{target: target, rt: rt, explain: explain,
		base: "http://fwd-" + hex.EncodeToString(nb[:]) + ".invalid", conns: map[*upgradedConn]struct{}{}}
	f.closed, f.close = context.WithCancel(context.Background())
	f.client = &http.Client{Transport: f}
	f.lastUse.Store(time.Now().UnixNano())
	return f
}

// URL is the base URL of the target for Client (its host is a name in
// .invalid: only this forwarder's transport reaches the target with it).
func (f *Forwarder) URL() string { return f.base }

// Client is an HTTP client (no timeout) whose transport is the forwarder:
// the client of URL, and the HTTPClient of a websocket dial to it.
func (f *Forwarder) Client() *http.Client { return f.client }

// RoundTrip implements http.RoundTripper: req's path and query go to the
// target (its host and path prefix), through the vendor's round tripper.
func (f *Forwarder) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.closed.Err() != nil {
		closeBody(req)
		return nil, ErrClosed
	}
	if uses(req) {
		f.Touch()
	}
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(f.closed, cancel)
	done := func() { stop(); cancel() }
	pr := &httputil.ProxyRequest{In: req, Out: req.Clone(ctx)}
	pr.SetURL(f.target)
	pr.Out.Host = f.target.Host
	resp, err := f.rt.RoundTrip(pr.Out)
	if err != nil {
		done()
		if req.Context().Err() != nil {
			return nil, err
		}
		if f.closed.Err() != nil {
			return nil, ErrClosed
		}
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(req.Context()), 10*time.Second)
		defer ecancel()
		status, msg, _ := f.explain(ectx)
		return envelope(req, status, msg), nil
	}
	if resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout {
		// The vendor's proxy could not reach the port (botd never answers
		// these): say why when the sandbox is not running.
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(req.Context()), 10*time.Second)
		defer ecancel()
		if status, msg, known := f.explain(ectx); known {
			_ = resp.Body.Close()
			done()
			return envelope(req, status, msg), nil
		}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		if !ok {
			_ = resp.Body.Close()
			done()
			return nil, errors.New("vendor forwarder: an upgraded response without a writable body")
		}
		c := &upgradedConn{rwc: rwc}
		counted := uses(req)
		if counted {
			f.upgraded.Add(1)
		}
		c.done = func() {
			f.mu.Lock()
			delete(f.conns, c)
			f.mu.Unlock()
			if counted {
				f.upgraded.Add(-1)
				f.Touch()
			}
			done()
		}
		f.mu.Lock()
		if f.closed.Err() != nil {
			f.mu.Unlock()
			_ = c.Close()
			return nil, ErrClosed
		}
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		resp.Body = c
		resp.Request = req
		return resp, nil
	}
	body := done
	if uses(req) {
		// A request is use until its answer was read: touched again at
		// its end, so a slow answer does not leave the machine idle.
		body = func() { f.Touch(); done() }
	}
	resp.Body = &doneBody{ReadCloser: resp.Body, done: body}
	resp.Request = req
	return resp, nil
}

// envelope is botd's error envelope ("unavailable") with status and msg,
// as the answer to req.
func envelope(req *http.Request, status int, msg string) *http.Response {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "unavailable", "message": msg}})
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)), Request: req}
}

// closeBody closes a request's body as a RoundTripper must, even on error.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// Touch records use now; TouchAt records it at t (tests age a forwarder).
func (f *Forwarder) Touch() { f.TouchAt(time.Now()) }

// TouchAt records use at t.
func (f *Forwarder) TouchAt(t time.Time) { f.lastUse.Store(t.UnixNano()) }

// InUse: a connection that counts is open, or one was made within idle.
func (f *Forwarder) InUse(now time.Time, idle time.Duration) bool {
	return f.upgraded.Load() > 0 || now.Sub(time.Unix(0, f.lastUse.Load())) < idle
}

// Close ends every request and upgraded connection through the forwarder
// and refuses later ones (a stopped machine answers nothing).
func (f *Forwarder) Close() {
	f.mu.Lock()
	f.close()
	conns := make([]*upgradedConn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// upgradedConn is an upgraded connection's body whose end is seen once.
type upgradedConn struct {
	rwc  io.ReadWriteCloser
	once sync.Once
	done func()
}

func (c *upgradedConn) Read(p []byte) (int, error)  { return c.rwc.Read(p) }
func (c *upgradedConn) Write(p []byte) (int, error) { return c.rwc.Write(p) }
func (c *upgradedConn) Close() error {
	err := c.rwc.Close()
	c.once.Do(c.done)
	return err
}

// doneBody is a response body that ends its request's context on Close.
type doneBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *doneBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

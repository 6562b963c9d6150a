package openapitest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Checker is an http.RoundTripper that holds every exchange with the
// worker's /v1 routes to the document; other paths (/healthz, /mcp, the
// dashboard) and requests Check declines pass through unchecked.
//
//   - A request the document describes must be valid (path, method,
//     parameters, credentials, body), and its answer must be one the
//     operation documents (status, headers, body).
//   - A request that does not match the document (a test's deliberately bad
//     input: no token, a malformed body, an unknown field) must be refused
//     with a 4xx answer, which must itself be a documented one; a 2xx or a
//     5xx to it is a violation (the document is stricter than the worker,
//     or the worker looser than the document).
//   - A path or method the document lacks must be answered 404 or 405 with
//     the error envelope.
//   - A server-sent event stream (text/event-stream) is checked as it is
//     read: each event's data must be a RunEvent, the end event's a Run.
//
// Every violation goes to Report; the exchange itself proceeds unchanged.
type Checker struct {
	Base   http.RoundTripper
	V      *Validator
	Report func(error)
	// Check, when set, says which requests to check (e.g. those to one
	// worker's address).
	Check func(*http.Request) bool

	// mu guards seen.
	mu   sync.Mutex
	seen []string
}

var (
	loadOnce sync.Once
	loaded   *Validator
	loadErr  error
)

// Shared is the embedded document, loaded once.
func Shared() (*Validator, error) {
	loadOnce.Do(func() { loaded, loadErr = Load() })
	return loaded, loadErr
}

// NewChecker is a Checker over http.DefaultTransport that reports to t.
func NewChecker(t testing.TB) *Checker {
	t.Helper()
	v, err := Shared()
	if err != nil {
		t.Fatalf("openapi: %v", err)
	}
	return &Checker{Base: http.DefaultTransport, V: v, Report: func(err error) {
		t.Errorf("openapi: %v", err)
	}}
}

// Client is an http.Client whose requests go through a new Checker
// reporting to t.
func Client(t testing.TB) (*http.Client, *Checker) {
	c := NewChecker(t)
	return &http.Client{Transport: c}, c
}

// Seen lists the exchanges checked, as "METHOD path status".
func (c *Checker) Seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

func (c *Checker) note(req *http.Request, status int) {
	c.mu.Lock()
	c.seen = append(c.seen, fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, status))
	c.mu.Unlock()
}

func (c *Checker) report(err error) {
	if err != nil && c.Report != nil {
		c.Report(err)
	}
}

func (c *Checker) base() http.RoundTripper {
	if c.Base == nil {
		return http.DefaultTransport
	}
	return c.Base
}

// API reports whether a path is one of the document's (/v1 and below).
func API(path string) bool { return path == "/v1" || strings.HasPrefix(path, "/v1/") }

// RoundTrip checks one exchange.
func (c *Checker) RoundTrip(req *http.Request) (*http.Response, error) {
	if !API(req.URL.Path) || (c.Check != nil && !c.Check(req)) {
		return c.base().RoundTrip(req)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	send := req.Clone(req.Context())
	if body != nil {
		send.Body = io.NopCloser(bytes.NewReader(body))
		send.ContentLength = int64(len(body))
		send.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	checked := req
	if len(body) > 0 && req.Header.Get("Content-Type") == "" {
		// The worker reads every body as JSON whatever its Content-Type
		// says (and without one), as the document's description says.
		checked = req.Clone(req.Context())
		checked.Header.Set("Content-Type", "application/json")
	}
	reqErr := c.V.ValidateRequest(checked, body)
	resp, err := c.base().RoundTrip(send)
	if err != nil {
		return resp, err
	}
	c.note(req, resp.StatusCode)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (the CDP websocket): its body is the
		// connection itself, never read here; status and headers are
		// checked.
		c.checkAnswer(checked, body, reqErr, resp, nil, true)
		return resp, nil
	}
	if sse(resp) {
		c.checkAnswer(checked, body, reqErr, resp, nil, true)
		resp.Body = &eventChecker{rc: resp.Body, c: c, req: req}
		return resp, nil
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return resp, nil // the caller sees the body it could read
	}
	c.checkAnswer(checked, body, reqErr, resp, b, false)
	return resp, nil
}

func sse(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

func (c *Checker) checkAnswer(req *http.Request, reqBody []byte, reqErr error, resp *http.Response, body []byte, stream bool) {
	status := resp.StatusCode
	if errors.Is(reqErr, ErrNoRoute) {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			c.report(fmt.Errorf("%v, yet the worker answered %d", reqErr, status))
			return
		}
		c.report(c.V.ValidateSchema("Error", body))
		return
	}
	var respErr error
	if stream {
		respErr = c.V.validateResponse(req, reqBody, status, resp.Header, nil, true)
	} else {
		respErr = c.V.ValidateResponse(req, reqBody, status, resp.Header, body)
	}
	c.report(respErr)
	if reqErr != nil && (status < 400 || status >= 500) {
		c.report(fmt.Errorf("%v; the worker answered %d (a request the document refuses must be answered 4xx)", reqErr, status))
	}
}

// eventChecker validates a server-sent event stream as the caller reads it.
type eventChecker struct {
	rc    io.ReadCloser
	c     *Checker
	req   *http.Request
	buf   bytes.Buffer
	event string
	data  []string
}

func (e *eventChecker) Read(p []byte) (int, error) {
	n, err := e.rc.Read(p)
	e.buf.Write(p[:n])
	for {
		line, rerr := e.buf.ReadBytes('\n')
		if rerr != nil { // an incomplete line: keep it for the next read
			rest := append([]byte(nil), line...)
			e.buf.Reset()
			e.buf.Write(rest)
			break
		}
		e.line(strings.TrimRight(string(line), "\r\n"))
	}
	return n, err
}

func (e *eventChecker) line(l string) {
	switch {
	case l == "":
		if len(e.data) > 0 {
			schema := "RunEvent"
			if e.event == "end" {
				schema = "Run"
			}
			if err := e.c.V.ValidateSchema(schema, []byte(strings.Join(e.data, "\n"))); err != nil {
				e.c.report(fmt.Errorf("event %q of %s %s: %w", e.event, e.req.Method, e.req.URL.Path, err))
			}
		}
		e.event, e.data = "", nil
	case strings.HasPrefix(l, ":"): // a comment (keepalive)
	case strings.HasPrefix(l, "event:"):
		e.event = strings.TrimSpace(strings.TrimPrefix(l, "event:"))
	case strings.HasPrefix(l, "data:"):
		e.data = append(e.data, strings.TrimPrefix(strings.TrimPrefix(l, "data:"), " "))
	case strings.HasPrefix(l, "id:"), strings.HasPrefix(l, "retry:"):
	default:
		e.c.report(fmt.Errorf("%s %s: a line that is not server-sent events: %.80q", e.req.Method, e.req.URL.Path, l))
	}
}

func (e *eventChecker) Close() error { return e.rc.Close() }

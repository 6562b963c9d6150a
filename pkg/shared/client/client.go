// Package client is a typed client of botd's HTTP API, used by the worker
// (and tests). It never logs, and its errors never carry the token. Every
// answer is read under a cap and every call has a deadline (limits.go).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// Client talks to one botd.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the botd at baseURL (e.g. http://127.0.0.1:7000).
// With hc nil it uses an http.Client with no overall timeout: each call
// sets its own deadline (limits.go), a stream's is its idleness.
func New(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: hc}
}

// BaseURL is the botd address.
func (c *Client) BaseURL() string { return c.base }

// HTTPClient is the HTTP client the client sends with (a vendor sandbox's
// botd is reached only through its forwarder's; websocket dials to
// BaseURL use it too).
func (c *Client) HTTPClient() *http.Client { return c.http }

// Token is the bearer token (for websocket dials by the caller).
func (c *Client) Token() string { return c.token }

// Error is botd's error envelope with the HTTP status.
type Error struct {
	Status  int
	Code    shared.Code
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("botd %d %s: %s", e.Status, e.Code, e.Message) }

// CodeOf returns the botd error code of err ("" if it is not a botd error).
func CodeOf(err error) shared.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Do sends method path with a JSON body (nil for none) and decodes a JSON
// reply into out (nil to discard), as a small call: the answer is read
// under MaxReply within CallTimeout.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	return c.do(ctx, small, method, path, body, out)
}

// do is Do for a kind of call k: its deadline bounds the call (unless ctx
// ends sooner) and its cap the answer read; an answer over the cap is a
// CodeReplyTooLarge *Error and its connection is closed, not drained.
func (c *Client) do(parent context.Context, k call, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(parent, k.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	resp, err := c.raw(ctx, method, path, rd, "application/json")
	if err != nil {
		return late(parent, ctx, method, path, k.timeout, err)
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		return nil
	}
	cr := &capReader{r: resp.Body, max: k.max}
	if err := json.NewDecoder(cr).Decode(out); err != nil {
		if cr.n > k.max {
			return tooLarge(method, path, k)
		}
		return late(parent, ctx, method, path, k.timeout, fmt.Errorf("botd %s %s: decode reply: %w", method, pathOnly(path), err))
	}
	return nil
}

// raw sends a request and returns a 2xx response, or the envelope as *Error.
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := hooked(ctx, req, path, func() (*http.Response, error) { return c.http.Do(req) })
	if err != nil {
		return nil, fmt.Errorf("botd %s %s: %w", method, path, scrub(err, c.token))
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorReply))
	var env shared.ErrorEnvelope
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		return nil, &Error{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message}
	}
	return nil, &Error{Status: resp.StatusCode, Code: shared.CodeInternal, Message: strings.TrimSpace(string(b))}
}

// scrub removes the token from an error's text, should a URL carry it.
func scrub(err error, token string) error {
	if token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), token, "[redacted]"))
}

func esc(s string) string { return url.PathEscape(s) }

// Health is GET /health.
func (c *Client) Health(ctx context.Context) (shared.ComputerHealth, error) {
	var h shared.ComputerHealth
	return h, c.Do(ctx, http.MethodGet, "/health", nil, &h)
}

// Screen is one entry of GET /screens (the fields the worker needs).
type Screen struct {
	ID      string `json:"id"`
	Slot    int    `json:"slot"`
	Display string `json:"display"`
	State   string `json:"state"`
	// Lease is who holds the screen now (nil: nobody).
	Lease *shared.LeaseInfo `json:"lease,omitempty"`
}

// StartScreen is POST /screens/{id}/start.
func (c *Client) StartScreen(ctx context.Context, id string) (Screen, error) {
	var s Screen
	return s, c.do(ctx, screenCall, http.MethodPost, "/screens/"+esc(id)+"/start", struct{}{}, &s)
}

// Lease is a granted lease.
type Lease struct {
	LeaseID   string    `json:"leaseId"`
	Kind      string    `json:"kind"`
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// AcquireLease is POST /screens/{id}/lease.
func (c *Client) AcquireLease(ctx context.Context, id, kind, holder string, ttl time.Duration) (Lease, error) {
	var l Lease
	body := map[string]any{"kind": kind, "holder": holder, "ttlSeconds": int(ttl.Seconds())}
	return l, c.Do(ctx, http.MethodPost, "/screens/"+esc(id)+"/lease", body, &l)
}

// ReleaseLease is DELETE /screens/{id}/lease/{leaseId}.
func (c *Client) ReleaseLease(ctx context.Context, id, leaseID string) error {
	return c.Do(ctx, http.MethodDelete, "/screens/"+esc(id)+"/lease/"+esc(leaseID), nil, nil)
}

// Observation is a screenshot result.
type Observation struct {
	Image     string          `json:"image"`
	Width     int             `json:"width"`
	Height    int             `json:"height"`
	Pointer   shared.Point    `json:"pointer"`
	FrameHash string          `json:"frameHash"`
	Unchanged bool            `json:"unchanged"`
	Blocked   json.RawMessage `json:"blocked,omitempty"`
	// Elements is the screen's element list ([]shared.Element), present
	// when asked for (ObserveElements, ActElements).
	Elements json.RawMessage `json:"elements,omitempty"`
	// ElementsError says why Elements is empty when they could not be read.
	ElementsError *shared.ErrorBody `json:"elementsError,omitempty"`
}

// Observe is POST /screens/{id}/observe.
func (c *Client) Observe(ctx context.Context, id, leaseID string) (Observation, error) {
	var o Observation
	return o, c.do(ctx, shotCall, http.MethodPost, "/screens/"+esc(id)+"/observe", map[string]string{"leaseId": leaseID}, &o)
}

// ObserveElements is POST /screens/{id}/observe with elements: the
// screenshot and the screen's elements in screen pixels.
func (c *Client) ObserveElements(ctx context.Context, id, leaseID string) (Observation, error) {
	var o Observation
	return o, c.do(ctx, shotCall, http.MethodPost, "/screens/"+esc(id)+"/observe", map[string]any{"leaseId": leaseID, "elements": true}, &o)
}

// ActElements is Act whose final observation carries the elements; its
// actions may target elements.
func (c *Client) ActElements(ctx context.Context, id, leaseID string, actions []shared.Action) (ActResult, error) {
	var r ActResult
	return r, c.do(ctx, actCall(actions), http.MethodPost, "/screens/"+esc(id)+"/act", map[string]any{"leaseId": leaseID, "actions": actions, "elements": true}, &r)
}

// ActResult is POST /screens/{id}/act's reply.
type ActResult struct {
	Results     json.RawMessage `json:"results"`
	Observation Observation     `json:"observation"`
}

// Act is POST /screens/{id}/act.
func (c *Client) Act(ctx context.Context, id, leaseID string, actions []shared.Action) (ActResult, error) {
	var r ActResult
	return r, c.do(ctx, actCall(actions), http.MethodPost, "/screens/"+esc(id)+"/act", map[string]any{"leaseId": leaseID, "actions": actions}, &r)
}

// Open is POST /screens/{id}/open; the reply is returned as raw JSON.
func (c *Client) Open(ctx context.Context, id, leaseID, target string) (json.RawMessage, error) {
	var r json.RawMessage
	return r, c.do(ctx, screenCall, http.MethodPost, "/screens/"+esc(id)+"/open", map[string]string{"leaseId": leaseID, "target": target}, &r)
}

// Launch is POST /screens/{id}/launch.
func (c *Client) Launch(ctx context.Context, id, leaseID, app string) (json.RawMessage, error) {
	var r json.RawMessage
	return r, c.do(ctx, screenCall, http.MethodPost, "/screens/"+esc(id)+"/launch", map[string]string{"leaseId": leaseID, "app": app}, &r)
}

// Windows is POST /screens/{id}/windows: the screen's application windows,
// bottom to top.
func (c *Client) Windows(ctx context.Context, id, leaseID string) ([]shared.Window, error) {
	var r shared.Windows
	if err := c.Do(ctx, http.MethodPost, "/screens/"+esc(id)+"/windows", map[string]string{"leaseId": leaseID}, &r); err != nil {
		return nil, err
	}
	return r.Windows, nil
}

// Clipboard is POST /screens/{id}/clipboard/read: the screen's clipboard
// text.
func (c *Client) Clipboard(ctx context.Context, id, leaseID string) (string, error) {
	var r shared.Clipboard
	if err := c.Do(ctx, http.MethodPost, "/screens/"+esc(id)+"/clipboard/read", map[string]string{"leaseId": leaseID}, &r); err != nil {
		return "", err
	}
	return r.Text, nil
}

// SetClipboard is POST /screens/{id}/clipboard/write.
func (c *Client) SetClipboard(ctx context.Context, id, leaseID, text string) error {
	return c.Do(ctx, http.MethodPost, "/screens/"+esc(id)+"/clipboard/write", map[string]string{"leaseId": leaseID, "text": text}, nil)
}

// TypeSecret is POST /screens/{id}/type-secret: botd types secret into the
// focused field of the screen's front page only when that page (and every
// frame down to the field) is on origin, and, unless visible, only into a
// masked password field (else a CodeSecretFieldRefused error). The secret
// is in the body only.
func (c *Client) TypeSecret(ctx context.Context, id, leaseID, origin, secret string, visible bool) error {
	return c.do(ctx, screenCall, http.MethodPost, "/screens/"+esc(id)+"/type-secret", map[string]any{"leaseId": leaseID, "origin": origin, "secret": secret, "visible": visible}, nil)
}

// Page is the front page as botd reads it.
type Page struct {
	URL   string          `json:"url"`
	Title string          `json:"title"`
	Text  string          `json:"text"`
	Links json.RawMessage `json:"links"`
}

// ReadPage is GET /screens/{id}/browser/page.
func (c *Client) ReadPage(ctx context.Context, id string) (Page, error) {
	var p Page
	return p, c.do(ctx, pageCall, http.MethodGet, "/screens/"+esc(id)+"/browser/page", nil, &p)
}

// ExecRequest is POST /exec's body.
type ExecRequest struct {
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	TimeoutMs int               `json:"timeoutMs,omitempty"`
	// ActScreen gives the command an act channel to that screen under
	// LeaseID (botd's actchan: an evaluation computer's OSWorld execute).
	ActScreen string `json:"actScreen,omitempty"`
	LeaseID   string `json:"leaseId,omitempty"`
}

// ExecResult is POST /exec's reply.
type ExecResult struct {
	ExitCode  int    `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timedOut,omitempty"`
}

// Exec is POST /exec.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var r ExecResult
	return r, c.do(ctx, execCall(req), http.MethodPost, "/exec", req, &r)
}

// ReadFile is GET /files?path=: at most max bytes of the file (the rest
// is not read: the connection is closed), within FileTimeout.
func (c *Client) ReadFile(parent context.Context, path string, max int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(parent, FileTimeout)
	defer cancel()
	resp, err := c.raw(ctx, http.MethodGet, "/files?path="+url.QueryEscape(path), nil, "")
	if err != nil {
		return nil, late(parent, ctx, http.MethodGet, "/files", FileTimeout, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, max))
	return b, late(parent, ctx, http.MethodGet, "/files", FileTimeout, err)
}

// WriteFile is PUT /files?path=, within FileTimeout.
func (c *Client) WriteFile(parent context.Context, path string, data []byte) error {
	ctx, cancel := context.WithTimeout(parent, FileTimeout)
	defer cancel()
	resp, err := c.raw(ctx, http.MethodPut, "/files?path="+url.QueryEscape(path), bytes.NewReader(data), "application/octet-stream")
	if err != nil {
		return late(parent, ctx, http.MethodPut, "/files", FileTimeout, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	return nil
}

// ListFiles is GET /files/list?path=; the listing is returned as raw JSON.
func (c *Client) ListFiles(ctx context.Context, path string) (json.RawMessage, error) {
	var r json.RawMessage
	return r, c.do(ctx, listCall, http.MethodGet, "/files/list?path="+url.QueryEscape(path), nil, &r)
}

// ForgetScreen is DELETE /screens/{id}: botd stops the screen and forgets
// its browser profile.
func (c *Client) ForgetScreen(ctx context.Context, id string) error {
	return c.do(ctx, screenCall, http.MethodDelete, "/screens/"+esc(id), nil, nil)
}

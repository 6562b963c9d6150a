package e2b

// The control plane: E2B's REST API (spec/openapi.yml), the few operations a
// provider needs, with the vendor's failure modes turned into errors the
// worker acts on. Auth is X-API-Key; the key is opened for each request and
// never logged, wrapped into an error or echoed.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
)

// Errors the control plane's answers map to.
var (
	// ErrNotFound: the sandbox does not exist (killed, timed out, or never
	// ours). The providers glue maps it to providers.ErrGone.
	ErrNotFound = errors.New("e2b: sandbox not found")
	// ErrUnauthorized: the API refused the key.
	ErrUnauthorized = errors.New("e2b: the API refused the API key (401): check E2B_API_KEY or E2B_API_KEY_FILE")
	// ErrUnknownTemplate: create named a template the API does not know.
	ErrUnknownTemplate = errors.New("e2b: unknown template")
	// ErrConflict: the sandbox is in a state that refuses the operation
	// (e.g. pausing one that is already paused).
	ErrConflict = errors.New("e2b: conflict")
)

// APIError is an answer of the control plane that is not a success.
type APIError struct {
	Op     string // "create sandbox", "connect sandbox", …
	Status int
	// Message is the API's own message (the spec's Error.message); it never
	// holds the key, which the API does not echo.
	Message string
	// Code is the machine-readable error_code, when the API gave one.
	Code string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("e2b: %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Status == http.StatusUnauthorized {
		s += " (the API refused the key: check E2B_API_KEY or E2B_API_KEY_FILE, and E2B_API_URL)"
	}
	return s
}

// Unwrap maps the status to the sentinel the caller acts on.
func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusNotFound:
		if strings.HasPrefix(e.Op, "create") {
			return ErrUnknownTemplate
		}
		return ErrNotFound
	case http.StatusBadRequest:
		if strings.HasPrefix(e.Op, "create") && strings.Contains(strings.ToLower(e.Message), "template") {
			return ErrUnknownTemplate
		}
	case http.StatusConflict:
		return ErrConflict
	}
	return nil
}

// Sandbox is the spec's Sandbox (create and connect answers).
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain,omitempty"`
}

// ListedSandbox is the spec's ListedSandbox (list answers), the fields used.
type ListedSandbox struct {
	TemplateID string            `json:"templateID"`
	SandboxID  string            `json:"sandboxID"`
	State      string            `json:"state"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	EndAt      time.Time         `json:"endAt"`
}

// SandboxDetail is the spec's SandboxDetail (GET /sandboxes/{id}), the
// fields used.
type SandboxDetail struct {
	SandboxID string            `json:"sandboxID"`
	State     string            `json:"state"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	EndAt     time.Time         `json:"endAt"`
}

// newSandbox is the spec's NewSandbox, the fields sent.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    int               `json:"timeout"`
	AutoPause  bool              `json:"autoPause"`
	Secure     bool              `json:"secure"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Network    *networkConfig    `json:"network,omitempty"`
}

type networkConfig struct {
	AllowPublicTraffic bool `json:"allowPublicTraffic"`
}

// api is the control-plane client.
type api struct {
	base string // E2B_API_URL, no trailing slash
	key  *Key
	hc   *http.Client
	// retry: after a 429/5xx or a refused connection (vendorkit.Retry).
	retry vendorkit.Retry
}

// do sends one request (retried per the policy) and decodes a success
// answer into out (nil: no body wanted). It returns the status.
// idempotent says whether any 5xx may be retried: a create that answered
// 500/502/504 may have made a sandbox, so only a 429 or a 503 (refused
// before any work) is retried for it.
func (a *api) do(ctx context.Context, op, method, path string, query url.Values, body, out any, idempotent bool) (int, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, fmt.Errorf("e2b: %s: %w", op, err)
		}
	}
	u := a.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return a.retry.Do(ctx, "e2b: "+op, idempotent, apiStatus, func() (int, time.Duration, error) {
		return a.once(ctx, op, method, u, payload, out)
	})
}

// apiStatus: the status of an answer of the API (not of no answer).
func apiStatus(err error) (int, bool) {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status, true
	}
	return 0, false
}

// once is one attempt. A transport error never carries the key: only the
// method and path are named.
func (a *api) once(ctx context.Context, op, method, u string, payload []byte, out any) (int, time.Duration, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, 0, fmt.Errorf("e2b: %s: %w", op, err)
	}
	key, err := a.key.Open()
	if err != nil {
		return 0, 0, fmt.Errorf("e2b: %s: the API key: %w", op, err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, 0, fmt.Errorf("e2b: %s: %s %s: %w", op, method, redactURL(u), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, 0, fmt.Errorf("e2b: %s: read the answer: %w", op, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return resp.StatusCode, 0, fmt.Errorf("e2b: %s: decode the answer: %w", op, err)
			}
		}
		return resp.StatusCode, 0, nil
	}
	ae := &APIError{Op: op, Status: resp.StatusCode}
	var e struct {
		Code      int    `json:"code"`
		ErrorCode string `json:"error_code"`
		Message   string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		ae.Message, ae.Code = e.Message, e.ErrorCode
	}
	if len(ae.Message) > 300 {
		ae.Message = ae.Message[:300] + "…"
	}
	var ra time.Duration
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s >= 0 {
		ra = time.Duration(s) * time.Second
	}
	return resp.StatusCode, ra, ae
}

// redactURL drops the query (metadata filters name computers, nothing
// secret, but an error message needs only the route).
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

func sandboxPath(id string, rest string) string {
	return "/sandboxes/" + url.PathEscape(id) + rest
}

// create makes a sandbox from template (POST /sandboxes, 201).
func (a *api) create(ctx context.Context, ns newSandbox) (Sandbox, error) {
	var s Sandbox
	_, err := a.do(ctx, "create sandbox", http.MethodPost, "/sandboxes", nil, ns, &s, false)
	if errors.Is(err, ErrUnknownTemplate) {
		return s, fmt.Errorf("%w %q (build it with the E2B CLI, see the README, or set E2B_TEMPLATE): %w", ErrUnknownTemplate, ns.TemplateID, err)
	}
	if err == nil && s.SandboxID == "" {
		err = errors.New("e2b: create sandbox: the answer names no sandbox")
	}
	return s, err
}

// connect returns a running sandbox, resuming a paused one (200: it was
// running; 201: it was resumed). timeout extends the sandbox's life only.
func (a *api) connect(ctx context.Context, id string, timeout time.Duration) (Sandbox, bool, error) {
	var s Sandbox
	status, err := a.do(ctx, "connect sandbox", http.MethodPost, sandboxPath(id, "/connect"), nil,
		map[string]int{"timeout": seconds(timeout)}, &s, true)
	return s, status == http.StatusCreated, err
}

// pause pauses a running sandbox (204); one already paused answers 409.
func (a *api) pause(ctx context.Context, id string) error {
	_, err := a.do(ctx, "pause sandbox", http.MethodPost, sandboxPath(id, "/pause"), nil, nil, nil, true)
	return err
}

// kill kills a sandbox (204).
func (a *api) kill(ctx context.Context, id string) error {
	_, err := a.do(ctx, "kill sandbox", http.MethodDelete, sandboxPath(id, ""), nil, nil, nil, true)
	return err
}

// setTimeout makes the sandbox expire timeout from now (204).
func (a *api) setTimeout(ctx context.Context, id string, timeout time.Duration) error {
	_, err := a.do(ctx, "set sandbox timeout", http.MethodPost, sandboxPath(id, "/timeout"), nil,
		map[string]int{"timeout": seconds(timeout)}, nil, true)
	return err
}

// get returns one sandbox's details (200).
func (a *api) get(ctx context.Context, id string) (SandboxDetail, error) {
	var d SandboxDetail
	_, err := a.do(ctx, "get sandbox", http.MethodGet, sandboxPath(id, ""), nil, nil, &d, true)
	return d, err
}

// list returns every sandbox, running or paused, whose metadata has all of
// match (GET /v2/sandboxes, every page).
func (a *api) list(ctx context.Context, match map[string]string) ([]ListedSandbox, error) {
	mq := url.Values{}
	for k, v := range match {
		mq.Set(k, v)
	}
	var all []ListedSandbox
	next := ""
	for page := 0; page < 1000; page++ {
		q := url.Values{"metadata": {mq.Encode()}, "state": {"running,paused"}, "limit": {"100"}}
		if next != "" {
			q.Set("nextToken", next)
		}
		var items []ListedSandbox
		hdr, err := a.doList(ctx, q, &items)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next = hdr; next == "" {
			return all, nil
		}
	}
	return nil, errors.New("e2b: list sandboxes: more than 1000 pages")
}

// doList is one page of GET /v2/sandboxes; it returns X-Next-Token.
func (a *api) doList(ctx context.Context, q url.Values, out *[]ListedSandbox) (string, error) {
	var next string
	hc := a.hc
	// The cursor is in a header, which do does not return: read it from a
	// client whose transport records it.
	rec := &headerRecorder{next: hc.Transport}
	if rec.next == nil {
		rec.next = http.DefaultTransport
	}
	a2 := *a
	c := *hc
	c.Transport = rec
	a2.hc = &c
	if _, err := a2.do(ctx, "list sandboxes", http.MethodGet, "/v2/sandboxes", q, nil, out, true); err != nil {
		return "", err
	}
	next = rec.last.Get("X-Next-Token")
	return next, nil
}

type headerRecorder struct {
	next http.RoundTripper
	last http.Header
}

func (h *headerRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	if err == nil {
		h.last = resp.Header
	}
	return resp, err
}

func seconds(d time.Duration) int {
	s := int(d / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

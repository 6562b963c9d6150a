package daytona

// The API: Daytona's REST API (spec/api-openapi.yaml), the few operations a
// provider needs, with the vendor's failure modes turned into errors the
// worker acts on; and the toolbox (spec/toolbox-openapi.yaml) at the
// sandbox's {toolboxProxyUrl}/{sandboxId}. Auth is "Authorization: Bearer
// <key>" on both; the key is opened for each request and never logged,
// wrapped into an error or echoed.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
)

// Errors the API's answers map to.
var (
	// ErrNotFound: the sandbox does not exist (deleted, or never ours).
	// The providers glue maps it to providers.ErrGone.
	ErrNotFound = errors.New("daytona: sandbox not found")
	// ErrUnauthorized: the API refused the key.
	ErrUnauthorized = errors.New("daytona: the API refused the API key (401): check DAYTONA_API_KEY or DAYTONA_API_KEY_FILE")
	// ErrUnknownSnapshot: create named a snapshot the API does not know.
	ErrUnknownSnapshot = errors.New("daytona: unknown snapshot")
	// ErrConflict: the sandbox is in a state that refuses the operation.
	ErrConflict = errors.New("daytona: conflict")
)

// APIError is an answer of the API or the toolbox that is not a success.
type APIError struct {
	Op     string // "create sandbox", "start sandbox", …
	Status int
	// Message is the API's own message; it never holds the key, which
	// the API does not echo.
	Message string
	Code    string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("daytona: %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Status == http.StatusUnauthorized {
		s += " (the API refused the key: check DAYTONA_API_KEY or DAYTONA_API_KEY_FILE, and DAYTONA_API_URL)"
	}
	return s
}

// Unwrap maps the status to the sentinel the caller acts on.
func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrUnauthorized
	case http.StatusNotFound:
		if strings.HasPrefix(e.Op, "create") {
			return ErrUnknownSnapshot
		}
		return ErrNotFound
	case http.StatusBadRequest:
		if strings.HasPrefix(e.Op, "create") && strings.Contains(strings.ToLower(e.Message), "snapshot") {
			return ErrUnknownSnapshot
		}
	case http.StatusConflict:
		return ErrConflict
	}
	return nil
}

// Sandbox is the spec's Sandbox (and SandboxListItem), the fields used.
type Sandbox struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	Snapshot         string            `json:"snapshot"`
	User             string            `json:"user"`
	Labels           map[string]string `json:"labels"`
	State            string            `json:"state"`
	ErrorReason      string            `json:"errorReason"`
	Recoverable      *bool             `json:"recoverable"`
	AutoStopInterval float64           `json:"autoStopInterval"`
	ToolboxProxyURL  string            `json:"toolboxProxyUrl"`
}

// createSandbox is the spec's CreateSandbox, the fields sent.
type createSandbox struct {
	Name                string            `json:"name,omitempty"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user,omitempty"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	Target              string            `json:"target,omitempty"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
}

// previewURL is the spec's PortPreviewUrl.
type previewURL struct {
	SandboxID string `json:"sandboxId"`
	URL       string `json:"url"`
	Token     string `json:"token"`
}

// api is the API's client.
type api struct {
	base string // DAYTONA_API_URL, no trailing slash
	key  *Key
	hc   *http.Client
	// retry: after a 429/5xx or no answer (vendorkit.Retry).
	retry vendorkit.Retry
}

// request is one call: JSON body (or a raw body with its content type).
type request struct {
	op, method, url string
	json            any
	raw             []byte
	contentType     string
	out             any     // JSON answer decoded into it (nil: none wanted)
	rawOut          *[]byte // the answer's body as is
	idempotent      bool
	// max caps what is read of the answer (0: maxAnswer); a raw answer
	// is cut at it, any other over it fails. The connection is closed,
	// not drained.
	max int64
}

// maxAnswer caps one answer of the API or the toolbox (a command's output,
// a screenshot, a session's logs) unless the request sets its own: the
// sandbox is a machine, and its answers are not trusted to be small.
const maxAnswer = 64 << 20

// do sends one request, retried per the policy. A create that answered
// 500/502/504, or no answer, may have made a sandbox: only a 429 or a 503
// is retried for it.
func (a *api) do(ctx context.Context, r request) (int, error) {
	payload := r.raw
	ct := r.contentType
	if r.json != nil {
		var err error
		if payload, err = json.Marshal(r.json); err != nil {
			return 0, fmt.Errorf("daytona: %s: %w", r.op, err)
		}
		ct = "application/json"
	}
	return a.retry.Do(ctx, "daytona: "+r.op, r.idempotent, apiStatus, func() (int, time.Duration, error) {
		return a.once(ctx, r, payload, ct)
	})
}

// apiStatus: the status of an answer of the API or the toolbox (not of no
// answer).
func apiStatus(err error) (int, bool) {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status, true
	}
	return 0, false
}

func (a *api) once(ctx context.Context, r request, payload []byte, ct string) (int, time.Duration, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, rd)
	if err != nil {
		return 0, 0, fmt.Errorf("daytona: %s: %w", r.op, err)
	}
	key, err := a.key.Open()
	if err != nil {
		return 0, 0, fmt.Errorf("daytona: %s: the API key: %w", r.op, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if r.rawOut == nil {
		req.Header.Set("Accept", "application/json")
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, 0, fmt.Errorf("daytona: %s: %s %s: %w", r.op, r.method, redactURL(r.url), err)
	}
	defer resp.Body.Close()
	limit := r.max
	if limit <= 0 {
		limit = maxAnswer
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return resp.StatusCode, 0, fmt.Errorf("daytona: %s: read the answer: %w", r.op, err)
	}
	if int64(len(b)) > limit {
		if r.rawOut == nil || resp.StatusCode < 200 || resp.StatusCode >= 300 {
			return resp.StatusCode, 0, fmt.Errorf("daytona: %s: the answer is larger than %d bytes, the cap; it was not read further", r.op, limit)
		}
		b = b[:limit]
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if r.rawOut != nil {
			*r.rawOut = b
		}
		if r.out != nil {
			if err := json.Unmarshal(b, r.out); err != nil {
				return resp.StatusCode, 0, fmt.Errorf("daytona: %s: decode the answer: %w", r.op, err)
			}
		}
		return resp.StatusCode, 0, nil
	}
	ae := &APIError{Op: r.op, Status: resp.StatusCode}
	var e struct {
		Message json.RawMessage `json:"message"`
		Code    string          `json:"code"`
		Error   string          `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		var s string
		if json.Unmarshal(e.Message, &s) == nil {
			ae.Message = s
		} else if len(e.Message) > 0 {
			ae.Message = string(e.Message)
		}
		ae.Code = e.Code
		if ae.Code == "" {
			ae.Code = e.Error
		}
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

// redactURL drops the query (label filters name computers, nothing secret,
// but an error message needs only the route).
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

func (a *api) sandboxURL(id, rest string) string {
	return a.base + "/sandbox/" + url.PathEscape(id) + rest
}

// create makes a sandbox from a snapshot (POST /sandbox).
func (a *api) create(ctx context.Context, cs createSandbox) (Sandbox, error) {
	var s Sandbox
	_, err := a.do(ctx, request{op: "create sandbox", method: http.MethodPost, url: a.base + "/sandbox", json: cs, out: &s})
	if errors.Is(err, ErrUnknownSnapshot) {
		return s, fmt.Errorf("%w %q (build it from the computer image, see the README, or set DAYTONA_SNAPSHOT): %w", ErrUnknownSnapshot, cs.Snapshot, err)
	}
	if err == nil && s.ID == "" {
		err = errors.New("daytona: create sandbox: the answer names no sandbox")
	}
	return s, err
}

func (a *api) get(ctx context.Context, id string) (Sandbox, error) {
	var s Sandbox
	_, err := a.do(ctx, request{op: "get sandbox", method: http.MethodGet, url: a.sandboxURL(id, ""), out: &s, idempotent: true})
	return s, err
}

// lifecycle is start, stop, recover, archive: POST /sandbox/{id}/{verb}.
func (a *api) lifecycle(ctx context.Context, id, verb string) (Sandbox, error) {
	var s Sandbox
	_, err := a.do(ctx, request{op: verb + " sandbox", method: http.MethodPost, url: a.sandboxURL(id, "/"+verb), out: &s, idempotent: true})
	return s, err
}

func (a *api) delete(ctx context.Context, id string) error {
	_, err := a.do(ctx, request{op: "delete sandbox", method: http.MethodDelete, url: a.sandboxURL(id, ""), idempotent: true})
	return err
}

// touch marks the sandbox active now (its auto-stop counts from here).
func (a *api) touch(ctx context.Context, id string) error {
	_, err := a.do(ctx, request{op: "update last activity", method: http.MethodPost, url: a.sandboxURL(id, "/last-activity"), idempotent: true})
	return err
}

func (a *api) setAutoStop(ctx context.Context, id string, minutes int) error {
	_, err := a.do(ctx, request{op: "set auto-stop interval", method: http.MethodPost, url: a.sandboxURL(id, "/autostop/"+strconv.Itoa(minutes)), idempotent: true})
	return err
}

func (a *api) preview(ctx context.Context, id string, port int) (previewURL, error) {
	var p previewURL
	_, err := a.do(ctx, request{op: "get preview url", method: http.MethodGet, url: a.sandboxURL(id, "/ports/"+strconv.Itoa(port)+"/preview-url"), out: &p, idempotent: true})
	if err == nil && p.URL == "" {
		err = errors.New("daytona: get preview url: the answer names no URL")
	}
	return p, err
}

// list returns every sandbox whose labels have all of match (GET /sandbox,
// every page).
func (a *api) list(ctx context.Context, match map[string]string) ([]Sandbox, error) {
	lb, err := json.Marshal(match)
	if err != nil {
		return nil, err
	}
	var all []Sandbox
	cursor := ""
	for page := 0; page < 1000; page++ {
		q := url.Values{"labels": {string(lb)}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var out struct {
			Items      []Sandbox `json:"items"`
			NextCursor *string   `json:"nextCursor"`
		}
		if _, err := a.do(ctx, request{op: "list sandboxes", method: http.MethodGet, url: a.base + "/sandbox?" + q.Encode(), out: &out, idempotent: true}); err != nil {
			return nil, err
		}
		all = append(all, out.Items...)
		if out.NextCursor == nil || *out.NextCursor == "" {
			return all, nil
		}
		cursor = *out.NextCursor
	}
	return nil, errors.New("daytona: list sandboxes: more than 1000 pages")
}

// ---- the toolbox ----

// toolbox is one sandbox's toolbox: {toolboxProxyUrl}/{sandboxId}.
type toolbox struct {
	a    *api // its key, retries; hc is the sandbox-traffic client
	base string
	// hold marks the computer in use for a call's whole length (toolbox
	// calls are use, for the activity refresher): a call in flight longer
	// than the idle window (a long command, or any call on a loaded host)
	// is use until it ends, not only at its start and end.
	hold func() (release func())
}

// ExecResult is process/execute's answer: stdout and stderr combined.
type ExecResult struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// execute runs command (split into words by the toolbox, no shell) with
// envs, waiting up to timeout.
func (t *toolbox) execute(ctx context.Context, command string, envs map[string]string, timeout time.Duration) (ExecResult, error) {
	defer t.hold()()
	body := map[string]any{"command": command, "timeout": int(max(timeout/time.Second, 1))}
	if len(envs) > 0 {
		body["envs"] = envs
	}
	var r ExecResult
	_, err := t.a.do(ctx, request{op: "execute", method: http.MethodPost, url: t.base + "/process/execute", json: body, out: &r})
	return r, err
}

// sh runs a shell script as process/execute's command (sh -c '…' quoted).
func (t *toolbox) sh(ctx context.Context, script string, envs map[string]string, timeout time.Duration) (ExecResult, error) {
	return t.execute(ctx, "sh -c "+shQuote(script), envs, timeout)
}

// upload writes data to path (POST /files/upload, multipart field file).
func (t *toolbox) upload(ctx context.Context, path string, data []byte) error {
	defer t.hold()()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", "file")
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	_, err = t.a.do(ctx, request{op: "upload file", method: http.MethodPost, url: t.base + "/files/upload?" + url.Values{"path": {path}}.Encode(),
		raw: buf.Bytes(), contentType: mw.FormDataContentType(), idempotent: true})
	return err
}

// download reads at most max bytes of path (GET /files/download); the
// rest is not read.
func (t *toolbox) download(ctx context.Context, path string, max int64) ([]byte, error) {
	defer t.hold()()
	var b []byte
	_, err := t.a.do(ctx, request{op: "download file", method: http.MethodGet, url: t.base + "/files/download?" + url.Values{"path": {path}}.Encode(),
		rawOut: &b, idempotent: true, max: max})
	return b, err
}

// shQuote quotes s for a POSIX shell (and for the toolbox's word split).
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Package box is the adapter for Box (by ASCII) on its public API as
// ../box/spec/box-openapi.yaml writes it down: a box per computer, made
// with a TTL that a refresher keeps extending while the computer is in use
// (resume of a running box), stop = archive, resume under the same id,
// delete, every create and resume with noEnv: true (none of the account's
// own secrets in the box); the machine is the command-driven desktop machine
// (machines/desktop) over Box's shell commands (backend.go), on the box's
// one display :0, and the box's desktop page (?vnc=1) is reached by the
// worker only, through a local forwarder, never shown to a browser.
package box

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
)

// Base is the API's documented base path.
const Base = "/api/box/v1"

// ErrNotFound: no such box (deleted, or never there).
var ErrNotFound = errors.New("box not found")

// ErrNotRunning: the box is archived (stopped, or its TTL ran out).
var ErrNotRunning = errors.New("box not running")

// ErrUnauthorized: Box refused the API key.
var ErrUnauthorized = errors.New("box refused the API key")

// Error is Box's error envelope.
type Error struct {
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId"`
	// Op is the call that failed ("POST /boxes/{id}/commands").
	Op string `json:"-"`
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("box: %s: %d %s: %s", e.Op, e.Status, e.Code, e.Message)
	if e.Code == "unauthorized" {
		msg += " (check BOX_API_KEY or BOX_API_KEY_FILE)"
	}
	if e.RequestID != "" {
		msg += " (request " + e.RequestID + ")"
	}
	return msg
}

// Is maps the codes to the package's errors.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == "box_not_found" || e.Status == http.StatusNotFound
	case ErrNotRunning:
		return e.Code == "box_not_running"
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	}
	return false
}

// Box is a box as the API answers it.
type Box struct {
	ID             string    `json:"id"`
	Status         string    `json:"status"`
	TTLSeconds     int       `json:"ttlSeconds"`
	ExpiresAt      time.Time `json:"expiresAt"`
	CreatedAt      time.Time `json:"createdAt"`
	ArchivedReason string    `json:"archivedReason"`
}

// CommandResult is a command's answer.
type CommandResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	TimedOut bool   `json:"timedOut"`
}

// api is the HTTP client of one Box account.
type api struct {
	base string // BOX_API_URL + Base
	key  *vendorkit.Key
	hc   *http.Client
	// attempts is how many times a retryable call is tried (≥ 1).
	attempts int
	// backoff is the first retry's wait (doubled each time).
	backoff time.Duration
}

// do calls method path with body (JSON, nil: none) and decodes a 2xx
// answer into out, under vendorkit.Retry: a 429 or 503 is tried again
// always, another 5xx (or no answer) only for a call that is safe to repeat
// (idem: not a create, not a command, which may have run), honouring
// Retry-After.
func (a *api) do(ctx context.Context, method, path string, idem bool, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return err
		}
	}
	op := method + " " + opPath(path)
	retry := vendorkit.Retry{Retries: max(0, a.attempts-1), Backoff: a.backoff, MaxBackoff: 5 * time.Second}
	statusOf := func(err error) (int, bool) {
		var e *Error
		if errors.As(err, &e) {
			return e.Status, true
		}
		return 0, false
	}
	_, err := retry.Do(ctx, "box: "+op, idem, statusOf, func() (int, time.Duration, error) {
		return a.once(ctx, method, path, op, payload, out)
	})
	return err
}

// opPath names a path by its route (ids as {id}), for messages.
func opPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, "bx_") {
			parts[i] = "{id}"
		}
	}
	return strings.Join(parts, "/")
}

func (a *api) once(ctx context.Context, method, path, op string, payload []byte, out any) (int, time.Duration, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, 0, err
	}
	key, err := a.key.Open()
	if err != nil {
		return 0, 0, fmt.Errorf("box: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) && ue.Unwrap() != nil {
			err = ue.Unwrap() // no URL in the message
		}
		return 0, 0, fmt.Errorf("box: %s: %w", op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, 0, fmt.Errorf("box: %s: read the answer: %w", op, err)
	}
	if resp.StatusCode >= 400 {
		e := &Error{Op: op}
		if json.Unmarshal(b, e) != nil || e.Code == "" {
			e.Status, e.Code, e.Message = resp.StatusCode, "http_"+strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(b[:min(len(b), 200)]))
		}
		e.Status = resp.StatusCode
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return resp.StatusCode, time.Duration(ra) * time.Second, e
	}
	var env struct {
		OK   bool   `json:"ok"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &env); err != nil || !env.OK {
		return resp.StatusCode, 0, fmt.Errorf("box: %s: not an ok answer (%d)", op, resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, 0, fmt.Errorf("box: %s: %w", op, err)
		}
	}
	return resp.StatusCode, 0, nil
}

func sleep(ctx context.Context, d time.Duration) error { return vendorkit.SleepCtx(ctx, d) }

type boxAnswer struct {
	Box Box `json:"box"`
}

// lifeRequest is the body of every create and every resume: the TTL, and
// noEnv, always true. Box applies the account's dashboard secrets (its env
// vars and secret files) to every box started or resumed without noEnv;
// the seed (000: "creates and resumes boxes with noEnv: true, as required
// when a third party supplies the API key") rules that out: the BOX_API_KEY
// the worker holds may be a customer's, whose own secrets must not land in
// a box the bots' shell can read.
type lifeRequest struct {
	TTLSeconds int  `json:"ttlSeconds"`
	NoEnv      bool `json:"noEnv"`
}

func (a *api) create(ctx context.Context, ttl int) (Box, error) {
	var out boxAnswer
	err := a.do(ctx, http.MethodPost, "/boxes", false, lifeRequest{TTLSeconds: ttl, NoEnv: true}, &out)
	return out.Box, err
}

func (a *api) get(ctx context.Context, id string) (Box, error) {
	var out boxAnswer
	err := a.do(ctx, http.MethodGet, "/boxes/"+id, true, nil, &out)
	return out.Box, err
}

func (a *api) list(ctx context.Context) ([]Box, error) {
	var out struct {
		Boxes []Box `json:"boxes"`
	}
	err := a.do(ctx, http.MethodGet, "/boxes", true, nil, &out)
	return out.Boxes, err
}

func (a *api) stop(ctx context.Context, id string) (Box, error) {
	var out boxAnswer
	err := a.do(ctx, http.MethodPost, "/boxes/"+id+"/stop", true, nil, &out)
	return out.Box, err
}

// resume runs an archived box again, or gives a running one a new TTL
// (noEnv again: Box applies the account's secrets at every resume too).
func (a *api) resume(ctx context.Context, id string, ttl int) (Box, error) {
	var out boxAnswer
	err := a.do(ctx, http.MethodPost, "/boxes/"+id+"/resume", true, lifeRequest{TTLSeconds: ttl, NoEnv: true}, &out)
	return out.Box, err
}

func (a *api) delete(ctx context.Context, id string) error {
	return a.do(ctx, http.MethodDelete, "/boxes/"+id, true, nil, nil)
}

// MaxCommandSeconds is the documented limit of one command.
const MaxCommandSeconds = 60

// command runs a shell command in the box (timeout ≤ 60 s). Commands are
// not repeated on a 5xx (they may have run); 429 and 503 are.
func (a *api) command(ctx context.Context, id, command, cwd string, timeout int) (CommandResult, error) {
	if timeout < 1 || timeout > MaxCommandSeconds {
		return CommandResult{}, fmt.Errorf("box: a command's timeout is 1..%d s, not %d", MaxCommandSeconds, timeout)
	}
	body := map[string]any{"command": command, "timeoutSeconds": timeout}
	if cwd != "" {
		body["cwd"] = cwd
	}
	var out CommandResult
	err := a.do(ctx, http.MethodPost, "/boxes/"+id+"/commands", false, body, &out)
	return out, err
}

// desktop asks for the box's desktop; url is "" while it provisions.
func (a *api) desktop(ctx context.Context, id string) (url string, provisioning bool, err error) {
	var out struct {
		DesktopURL   string `json:"desktopUrl"`
		Provisioning bool   `json:"provisioning"`
	}
	err = a.do(ctx, http.MethodPost, "/boxes/"+id+"/desktop?vnc=1", true, nil, &out)
	return out.DesktopURL, out.Provisioning, err
}

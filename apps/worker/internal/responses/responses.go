// Package responses is the worker's client of a model's OpenAI Responses
// API: POST {base}/responses with stream:true, read as server-sent events.
// The worker runtime (internal/runs) drives a teammate's run with it, so
// the model key stays in the worker.
//
// The model is not trusted more than a computer: its answer is bounded
// (MaxAnswer bytes in all, MaxEvent per event), a stream that is malformed
// or ends early is an error like a 429 or a 5xx, and those are retried a
// bounded number of times with backoff before the call fails with the
// upstream's status. The key is sent only as the bearer and never appears
// in an error: an upstream message quoting it is redacted.
package responses

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of a Client's bounds.
const (
	DefaultMaxAnswer   = 8 << 20
	DefaultMaxEvent    = 4 << 20
	DefaultAttempts    = 4
	DefaultBackoff     = 500 * time.Millisecond
	DefaultMaxBackoff  = 8 * time.Second
	DefaultIdleTimeout = 2 * time.Minute
)

// Client calls one Responses API endpoint.
type Client struct {
	// BaseURL is the API's base, e.g. https://api.openai.com/v1 (the
	// worker's MODEL_UPSTREAM_URL); requests go to BaseURL + "/responses".
	BaseURL string
	// Key is the bearer; empty sends none.
	Key string
	// HTTP is the client used (http.DefaultClient's transport when nil).
	HTTP *http.Client
	// MaxAnswer bounds the bytes of one answer's body; MaxEvent one event.
	MaxAnswer, MaxEvent int64
	// Attempts bounds the tries of one call (429, 5xx, a transport error,
	// a timeout, a malformed or cut stream); Backoff is the first wait,
	// doubled each retry up to MaxBackoff (a Retry-After within it wins).
	Attempts            int
	Backoff, MaxBackoff time.Duration
	// IdleTimeout bounds the wait for the answer's headers and then for
	// each next piece of the stream.
	IdleTimeout time.Duration
}

// Tool is a function tool offered to the model.
type Tool struct {
	Type        string          `json:"type"` // "function"
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

// Request is one POST /responses body. Input is the conversation so far
// (the worker keeps it: Store is false).
type Request struct {
	Model             string            `json:"model"`
	Instructions      string            `json:"instructions,omitempty"`
	Input             []json.RawMessage `json:"input"`
	Tools             []Tool            `json:"tools,omitempty"`
	ToolChoice        string            `json:"tool_choice,omitempty"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	Stream            bool              `json:"stream"`
	Store             bool              `json:"store"`
}

// Item is one output item of an answer. Raw is the item as the model
// sent it (carried back in the next request's input).
type Item struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Role      string `json:"role,omitempty"`
	Content   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content,omitempty"`
	Raw json.RawMessage `json:"-"`
}

// Text is a message item's output text.
func (it Item) Text() string {
	var b strings.Builder
	for _, c := range it.Content {
		if c.Type == "output_text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// Usage is an answer's token count.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// Response is one answer.
type Response struct {
	ID     string
	Output []Item
	Usage  Usage
	// Incomplete is why the model stopped early (response.incomplete),
	// "" for a completed answer.
	Incomplete string
	// Attempts is how many tries the call took.
	Attempts int
}

// Error is a call that failed: the upstream's HTTP status (0 for a
// transport error, a timeout or a malformed stream) and what it said.
type Error struct {
	Status    int
	Code      string
	Message   string
	Retryable bool
	// TooLarge: the answer broke MaxAnswer or MaxEvent.
	TooLarge bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("the model")
	if e.Status != 0 {
		fmt.Fprintf(&b, " answered HTTP %d", e.Status)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Create sends req (Stream and Store set for the caller) and reads the
// answer, retrying what is retryable. onWait, when set, is told of each
// retry's wait.
func (c *Client) Create(ctx context.Context, req Request, onRetry func(attempt int, err error, wait time.Duration)) (*Response, error) {
	req.Stream, req.Store = true, false
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	attempts := c.Attempts
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	backoff := c.Backoff
	if backoff <= 0 {
		backoff = DefaultBackoff
	}
	maxBackoff := c.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxBackoff
	}
	var last error
	for attempt := 1; ; attempt++ {
		res, wait, err := c.once(ctx, body)
		if err == nil {
			res.Attempts = attempt
			return res, nil
		}
		last = err
		var ue *Error
		if ctx.Err() != nil || !errors.As(err, &ue) || !ue.Retryable || attempt >= attempts {
			if ue != nil && ue.Retryable && attempt >= attempts {
				ue.Message = strings.TrimSpace(ue.Message + fmt.Sprintf(" (after %d attempts)", attempt))
			}
			return nil, last
		}
		if wait <= 0 || wait > maxBackoff {
			wait = backoff
		}
		if onRetry != nil {
			onRetry(attempt, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// once is one try: the answer, or the error and the upstream's
// Retry-After (0 when none).
func (c *Client) once(ctx context.Context, body []byte) (*Response, time.Duration, error) {
	idle := c.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watchdog cuts the request when nothing arrives for idle: before
	// the headers, and between pieces of the stream.
	wd := newWatchdog(idle, func() { cancel(errIdle) })
	defer wd.stop()

	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+"/responses", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if c.Key != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.Key)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, 0, c.transportErr(rctx, err)
	}
	defer resp.Body.Close()
	wd.kick()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		e := &Error{Status: resp.StatusCode, Retryable: resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500}
		e.Code, e.Message = c.upstreamMessage(b)
		return nil, retryAfter(resp.Header.Get("Retry-After")), e
	}
	maxAnswer := c.MaxAnswer
	if maxAnswer <= 0 {
		maxAnswer = DefaultMaxAnswer
	}
	maxEvent := c.MaxEvent
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEvent
	}
	res, err := c.read(&kickReader{r: resp.Body, wd: wd}, maxAnswer, maxEvent)
	if err != nil {
		if rctx.Err() != nil {
			return nil, 0, c.transportErr(rctx, err)
		}
		return nil, 0, err
	}
	return res, 0, nil
}

var errIdle = errors.New("idle")

// transportErr is a failed request: the run's own end passes through;
// the idle watchdog or a broken connection is retryable.
func (c *Client) transportErr(rctx context.Context, err error) error {
	if errors.Is(context.Cause(rctx), errIdle) {
		idle := c.IdleTimeout
		if idle <= 0 {
			idle = DefaultIdleTimeout
		}
		return &Error{Message: fmt.Sprintf("nothing arrived for %s (timeout)", idle), Code: "timeout", Retryable: true}
	}
	if rctx.Err() != nil {
		return rctx.Err()
	}
	return &Error{Message: c.redact(err.Error()), Code: "transport", Retryable: true}
}

// upstreamMessage reads an error body ({"error":{"code","message"}} or
// text), clipped and redacted.
func (c *Client) upstreamMessage(b []byte) (code, msg string) {
	var env struct {
		Error struct {
			Code    any    `json:"code"`
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && env.Error.Message != "" {
		code = env.Error.Type
		if s, ok := env.Error.Code.(string); ok && s != "" {
			code = s
		}
		return clip(c.redact(code), 64), clip(c.redact(env.Error.Message), 512)
	}
	return "", clip(c.redact(strings.TrimSpace(string(b))), 512)
}

// redact removes the key (and any long prefix of it) from upstream text.
func (c *Client) redact(s string) string {
	if c.Key == "" {
		return s
	}
	s = strings.ReplaceAll(s, c.Key, "[key]")
	if len(c.Key) >= 16 {
		s = strings.ReplaceAll(s, c.Key[:12], "[key]")
	}
	return s
}

// read parses the event stream into the answer.
func (c *Client) read(r io.Reader, maxAnswer, maxEvent int64) (*Response, error) {
	cr := &countReader{r: r, max: maxAnswer}
	br := bufio.NewReaderSize(cr, 64<<10)
	var res Response
	var data bytes.Buffer
	completed := false
	dispatch := func() error {
		if data.Len() == 0 {
			return nil
		}
		defer data.Reset()
		raw := data.Bytes()
		if bytes.Equal(bytes.TrimSpace(raw), []byte("[DONE]")) {
			return nil
		}
		var ev struct {
			Type     string          `json:"type"`
			Item     json.RawMessage `json:"item"`
			Response *struct {
				ID                string          `json:"id"`
				Output            json.RawMessage `json:"output"`
				Usage             *Usage          `json:"usage"`
				Error             *errBody        `json:"error"`
				IncompleteDetails *struct {
					Reason string `json:"reason"`
				} `json:"incomplete_details"`
			} `json:"response"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			return &Error{Code: "malformed_stream", Message: "an event is not JSON: " + clip(err.Error(), 200), Retryable: true}
		}
		switch ev.Type {
		case "response.created", "response.in_progress":
			if ev.Response != nil && ev.Response.ID != "" {
				res.ID = clip(ev.Response.ID, 256)
			}
		case "response.output_item.done":
			it, err := parseItem(ev.Item)
			if err != nil {
				return err
			}
			res.Output = append(res.Output, it)
		case "response.completed", "response.incomplete":
			completed = true
			if ev.Response != nil {
				if ev.Response.Usage != nil {
					res.Usage = *ev.Response.Usage
				}
				if ev.Type == "response.incomplete" {
					res.Incomplete = "incomplete"
					if ev.Response.IncompleteDetails != nil && ev.Response.IncompleteDetails.Reason != "" {
						res.Incomplete = clip(ev.Response.IncompleteDetails.Reason, 64)
					}
				}
				// An answer that lists its output only at the end.
				if len(res.Output) == 0 && len(ev.Response.Output) > 0 {
					var items []json.RawMessage
					if err := json.Unmarshal(ev.Response.Output, &items); err != nil {
						return &Error{Code: "malformed_stream", Message: "response.output is not a list", Retryable: true}
					}
					for _, raw := range items {
						it, err := parseItem(raw)
						if err != nil {
							return err
						}
						res.Output = append(res.Output, it)
					}
				}
			}
		case "response.failed":
			e := &Error{Code: "failed", Message: "response.failed", Retryable: true}
			if ev.Response != nil && ev.Response.Error != nil {
				e.Code, e.Message = clip(c.redact(ev.Response.Error.code()), 64), clip(c.redact(ev.Response.Error.Message), 512)
			}
			return e
		case "error":
			code := ""
			if s, ok := ev.Code.(string); ok {
				code = s
			}
			return &Error{Code: clip(c.redact(code), 64), Message: clip(c.redact(ev.Message), 512), Retryable: true}
		}
		return nil
	}
	for !completed {
		line, err := readLine(br, maxEvent)
		if err != nil {
			if cr.over {
				return nil, &Error{Code: "too_large", Message: fmt.Sprintf("the answer exceeded %d bytes; the cap is %d", maxAnswer, maxAnswer), TooLarge: true}
			}
			var le *lineErr
			if errors.As(err, &le) {
				return nil, &Error{Code: "too_large", Message: fmt.Sprintf("an event of the answer exceeded %d bytes; the cap is %d", maxEvent, maxEvent), TooLarge: true}
			}
			if errors.Is(err, io.EOF) {
				if derr := dispatch(); derr != nil {
					return nil, derr
				}
				if completed {
					break
				}
				return nil, &Error{Code: "cut_stream", Message: "the stream ended before response.completed", Retryable: true}
			}
			return nil, err
		}
		switch {
		case len(line) == 0:
			if err := dispatch(); err != nil {
				return nil, err
			}
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if int64(data.Len()+len(v)+1) > maxEvent {
				return nil, &Error{Code: "too_large", Message: fmt.Sprintf("an event of the answer exceeded %d bytes; the cap is %d", maxEvent, maxEvent), TooLarge: true}
			}
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(v)
		default: // event:, id:, retry: and unknown fields are not needed
		}
	}
	return &res, nil
}

type errBody struct {
	Code    any    `json:"code"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *errBody) code() string {
	if s, ok := e.Code.(string); ok && s != "" {
		return s
	}
	return e.Type
}

// parseItem reads one output item; an item that is not an object is a
// malformed stream.
func parseItem(raw json.RawMessage) (Item, error) {
	var it Item
	if err := json.Unmarshal(raw, &it); err != nil || it.Type == "" {
		return Item{}, &Error{Code: "malformed_stream", Message: "an output item is not an object with a type", Retryable: true}
	}
	it.Raw = append(json.RawMessage(nil), raw...)
	return it, nil
}

type lineErr struct{}

func (*lineErr) Error() string { return "line too long" }

// readLine reads one line (without its end) of at most max bytes.
func readLine(br *bufio.Reader, max int64) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if int64(len(line)+len(frag)) > max {
			return nil, &lineErr{}
		}
		line = append(line, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return bytes.TrimRight(line, "\r\n"), nil
			}
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
}

// countReader fails once more than max bytes were read.
type countReader struct {
	r    io.Reader
	n    int64
	max  int64
	over bool
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		c.over = true
		return 0, errors.New("answer too large")
	}
	return n, err
}

// kickReader tells the watchdog of every piece read.
type kickReader struct {
	r  io.Reader
	wd *watchdog
}

func (k *kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if n > 0 {
		k.wd.kick()
	}
	return n, err
}

// watchdog calls fire when kick was not called for d.
type watchdog struct {
	mu sync.Mutex
	t  *time.Timer
	d  time.Duration
}

func newWatchdog(d time.Duration, fire func()) *watchdog {
	return &watchdog{t: time.AfterFunc(d, fire), d: d}
}

func (w *watchdog) kick() {
	w.mu.Lock()
	w.t.Reset(w.d)
	w.mu.Unlock()
}

func (w *watchdog) stop() {
	w.mu.Lock()
	w.t.Stop()
	w.mu.Unlock()
}

// retryAfter reads a Retry-After in seconds (0 when absent or a date).
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

package client

// A botd is not trusted (README, Limits): every answer the worker reads from
// one is read under a cap for its kind of call, and every call has a
// deadline. An answer over its cap fails with a *Error of code
// shared.CodeReplyTooLarge naming the cap; the worker reads no further and
// closes the connection (it is never drained). A call past its deadline
// fails with an error wrapping context.DeadlineExceeded that names it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// The caps on one answer, by kind of call.
const (
	// MaxReply caps the JSON answer of a small call: health, screens,
	// leases, viewer links, clipboard, windows, open, launch, recordings'
	// metadata, a workspace import's summary.
	MaxReply = 4 << 20
	// MaxScreenshotReply caps an answer carrying a screenshot (observe,
	// act): a base64 image (a 1280×800 screen of random pixels is under
	// 1 MB) and up to shared.MaxElements elements.
	MaxScreenshotReply = 32 << 20
	// MaxExecReply caps /exec's answer: botd keeps at most 1 MiB of each
	// of stdout and stderr, which JSON escaping can grow sixfold.
	MaxExecReply = 16 << 20
	// MaxListReply caps /files/list (botd lists at most 10,000 entries)
	// and /screens/{id}/browser/page (at most 120,000 characters of text).
	MaxListReply = 16 << 20
	// MaxErrorReply caps an error envelope (only its first part is read).
	MaxErrorReply = 64 << 10
	// maxDrain is what is read of a discarded answer before closing it.
	maxDrain = 64 << 10
)

// The deadlines of calls whose context has none sooner.
const (
	// CallTimeout bounds a small call.
	CallTimeout = 30 * time.Second
	// ScreenTimeout bounds a call that starts or drives a screen (start,
	// spare, observe, open, launch, page reads, recordings' start and
	// stop); botd's own bound on a screen's start is 30 s.
	ScreenTimeout = 2 * time.Minute
	// ActTimeout bounds an act, plus the batch's waits.
	ActTimeout = 2 * time.Minute
	// ExecMargin is added to a command's own timeout (botd's default,
	// 60 s, when the request gives none).
	ExecMargin = 30 * time.Second
	// FileTimeout bounds a file's read or write (botd writes at most
	// 256 MiB).
	FileTimeout = 5 * time.Minute
	// StreamIdle bounds a stream (workspace export and import, a
	// recording's video): it fails when no byte moves for this long, and
	// its headers must come within it.
	StreamIdle = 2 * time.Minute
	// execDefault is botd's timeout of a command that gives none.
	execDefault = 60 * time.Second
)

// streamIdle is StreamIdle (a variable for tests).
var streamIdle = StreamIdle

// call is one kind of call: the cap of its answer and its deadline.
type call struct {
	what    string // "a shell answer", for the error
	max     int64
	timeout time.Duration
}

var (
	small      = call{"a small answer", MaxReply, CallTimeout}
	screenCall = call{"a screen's answer", MaxReply, ScreenTimeout}
	shotCall   = call{"an answer with a screenshot", MaxScreenshotReply, ScreenTimeout}
	listCall   = call{"a listing", MaxListReply, CallTimeout}
	pageCall   = call{"a page's text", MaxListReply, ScreenTimeout}
)

func execCall(req ExecRequest) call {
	d := execDefault
	if req.TimeoutMs > 0 {
		d = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	return call{"a shell answer", MaxExecReply, d + ExecMargin}
}

func actCall(actions []shared.Action) call {
	d := ActTimeout
	for _, a := range actions {
		if a.Type == shared.ActionWait && a.Ms != nil && *a.Ms > 0 {
			d += time.Duration(*a.Ms) * time.Millisecond
		}
	}
	return call{"an answer with a screenshot", MaxScreenshotReply, d}
}

// Size is n bytes in the unit the caps are given in ("16 MiB").
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// errOverCap is what a capReader returns past its cap.
var errOverCap = errors.New("over the cap")

// capReader reads at most max bytes of r; reading more fails with
// errOverCap.
type capReader struct {
	r   io.Reader
	max int64
	n   int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, errOverCap
	}
	if rem := c.max + 1 - c.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, errOverCap
	}
	return n, err
}

// tooLarge is the error of an answer over k's cap.
func tooLarge(method, path string, k call) error {
	return &Error{Status: http.StatusBadGateway, Code: shared.CodeReplyTooLarge,
		Message: fmt.Sprintf("the computer's answer to %s %s was larger than %s, the cap for %s; the worker read no further", method, pathOnly(path), Size(k.max), k.what)}
}

// pathOnly is path without its query (which may name a file).
func pathOnly(path string) string {
	for i := 0; i < len(path); i++ {
		if path[i] == '?' {
			return path[:i]
		}
	}
	return path
}

// late is err as the error of a call that passed its deadline d, when it
// did (parent did not end first), else err.
func late(parent, ctx context.Context, method, path string, d time.Duration, err error) error {
	if err == nil || parent.Err() != nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("botd %s %s: no answer within %s: %w", method, pathOnly(path), d, context.DeadlineExceeded)
}

// idle cancels a stream that moves no byte for StreamIdle (or its test
// value).
type idle struct {
	d      time.Duration
	t      *time.Timer
	cancel context.CancelFunc
	mu     sync.Mutex
	fired  bool
}

func newIdle(ctx context.Context, d time.Duration) (context.Context, *idle) {
	ctx, cancel := context.WithCancel(ctx)
	i := &idle{d: d, cancel: cancel}
	i.t = time.AfterFunc(d, func() {
		i.mu.Lock()
		i.fired = true
		i.mu.Unlock()
		cancel()
	})
	return ctx, i
}

func (i *idle) touch() { i.t.Reset(i.d) }

func (i *idle) stop() {
	i.t.Stop()
	i.cancel()
}

// err is err, or the idle error when the stream was cut for idling.
func (i *idle) err(method, path string, err error) error {
	i.mu.Lock()
	fired := i.fired
	i.mu.Unlock()
	if err == nil || !fired {
		return err
	}
	return fmt.Errorf("botd %s %s: no byte moved for %s: %w", method, pathOnly(path), i.d, context.DeadlineExceeded)
}

// idleReader touches i on every read that moves bytes.
type idleReader struct {
	r io.Reader
	i *idle
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.i.touch()
	}
	return n, err
}

// streamBody is a streamed answer's body: reads keep it alive, Close (or
// its end) stops the idle timer and releases the call's context.
type streamBody struct {
	rc           io.ReadCloser
	i            *idle
	method, path string
	once         sync.Once
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.i.touch()
	}
	if err != nil && err != io.EOF {
		err = b.i.err(b.method, b.path, err)
	}
	return n, err
}

func (b *streamBody) Close() error {
	err := b.rc.Close()
	b.once.Do(b.i.stop)
	return err
}

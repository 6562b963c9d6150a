package screen

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/pkg/shared"
)

// A screen's clipboard is its X server's CLIPBOARD selection, read and set
// with xclip run as the desktop user on that screen's display only (its
// own DISPLAY and cookie): a screen never reaches another's clipboard, and
// a person's copy and paste through the viewer is the same selection.
// Setting it leaves an `xclip -quiet` serving the text until something
// else on the screen takes the selection (then it exits) or the screen
// stops.

// clipboardWait bounds one read, and how long a write waits until its
// xclip owns the selection.
const clipboardWait = 5 * time.Second

// capWriter keeps up to max bytes and notes that more came.
type capWriter struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); len(p) > room {
		w.buf.Write(p[:max(room, 0)])
		w.over = true
		return len(p), nil
	}
	return w.buf.Write(p)
}

func errClipboardTooLarge(n string) error {
	return shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "the clipboard holds %s; at most %d bytes of text are read or written", n, shared.MaxClipboardBytes)
}

// readClipboard is the screen's clipboard text ("" when nothing offers
// text).
func (p *procStack) readClipboard(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, clipboardWait)
	defer cancel()
	u := p.m.o.Desktop
	out := &capWriter{max: shared.MaxClipboardBytes}
	var stderr capWriter
	stderr.max = 4 << 10
	proc, err := p.m.o.Runner.Start(runner.Spec{
		Argv: []string{"xclip", "-selection", "clipboard", "-o"},
		User: &u, Env: (&procBackend{m: p.m}).env(p.slot, p.runDir), Dir: p.m.DesktopHome(),
		Stdout: out, Stderr: &stderr,
	})
	if err != nil {
		return "", fmt.Errorf("clipboard: start xclip: %w", err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = proc.SignalGroup(syscall.SIGKILL)
		case <-done:
		}
	}()
	code, err := proc.Wait()
	close(done)
	switch {
	case err != nil:
		return "", fmt.Errorf("clipboard: xclip: %w", err)
	case ctx.Err() != nil:
		return "", shared.Errorf(http.StatusGatewayTimeout, shared.CodeTimeout, "the clipboard's owner did not answer within %s", clipboardWait)
	case code != 0 && strings.Contains(stderr.buf.String(), "not available"):
		return "", nil // nothing on the clipboard offers text
	case code != 0:
		return "", fmt.Errorf("clipboard: xclip exited %d: %s", code, strings.TrimSpace(stderr.buf.String()))
	case out.over:
		return "", errClipboardTooLarge("more than that")
	}
	return strings.ToValidUTF8(out.buf.String(), "\uFFFD"), nil
}

// writeClipboard makes text the screen's clipboard.
func (p *procStack) writeClipboard(ctx context.Context, text string) error {
	u := p.m.o.Desktop
	proc, err := p.m.o.Supervisor.Start(supervisor.Spec{
		Name:    fmt.Sprintf("clipboard:%s", p.id),
		Restart: supervisor.RestartNever,
		Cmd: runner.Spec{Argv: []string{"xclip", "-quiet", "-selection", "clipboard", "-i"},
			User: &u, Env: (&procBackend{m: p.m}).env(p.slot, p.runDir), Dir: p.m.DesktopHome(),
			Stdin: strings.NewReader(text)},
	})
	if err != nil {
		return fmt.Errorf("clipboard: start xclip: %w", err)
	}
	p.mu.Lock()
	p.apps = append(p.apps, proc)
	p.mu.Unlock()
	// xclip takes the selection once it has read all of its input: wait
	// until the clipboard says so, so a paste right after this finds it.
	deadline := time.Now().Add(clipboardWait)
	for {
		got, err := p.readClipboard(ctx)
		if err == nil && got == text {
			return nil
		}
		select {
		case <-proc.Done():
			return fmt.Errorf("clipboard: xclip ended before it held the clipboard")
		default:
		}
		if time.Now().After(deadline) {
			return shared.Errorf(http.StatusGatewayTimeout, shared.CodeTimeout, "the clipboard was not set within %s", clipboardWait)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// validClipboard checks text to be written.
func validClipboard(text string) error {
	if len(text) > shared.MaxClipboardBytes {
		return errClipboardTooLarge(fmt.Sprintf("%d bytes", len(text)))
	}
	if !utf8.ValidString(text) {
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "clipboard text must be valid UTF-8")
	}
	return nil
}

// Clipboard reads screen id's clipboard under leaseID.
func (m *Manager) Clipboard(ctx context.Context, id, leaseID string) (text string, err error) {
	err = m.withStack(ctx, id, leaseID, func(ctx context.Context, st stack) (err error) {
		text, err = st.readClipboard(ctx)
		return err
	})
	return text, err
}

// SetClipboard sets screen id's clipboard under leaseID.
func (m *Manager) SetClipboard(ctx context.Context, id, leaseID, text string) error {
	if err := validClipboard(text); err != nil {
		return err
	}
	return m.withStack(ctx, id, leaseID, func(ctx context.Context, st stack) error {
		return st.writeClipboard(ctx, text)
	})
}

// Windows lists screen id's application windows under leaseID.
func (m *Manager) Windows(ctx context.Context, id, leaseID string) (ws []shared.Window, err error) {
	err = m.withStack(ctx, id, leaseID, func(ctx context.Context, st stack) (err error) {
		ws, err = st.driver().Windows(ctx)
		return err
	})
	return ws, err
}

// withStack runs fn on screen id's running stack under leaseID.
func (m *Manager) withStack(ctx context.Context, id, leaseID string, fn func(context.Context, stack) error) error {
	return m.WithLease(ctx, id, leaseID, func(ctx context.Context, s *Screen) error {
		st, err := s.runningStack()
		if err != nil {
			return err
		}
		return fn(ctx, st)
	})
}

// runningStack is the screen's stack, or screen_unavailable.
func (s *Screen) runningStack() (stack, error) {
	s.m.mu.Lock()
	st := s.stack
	s.m.mu.Unlock()
	if st == nil {
		return nil, errUnavailable(s.ID, "is not running")
	}
	return st, nil
}

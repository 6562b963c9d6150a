package screen

import (
	"context"
	"errors"

	"github.com/open-bot/computer/apps/botd/internal/desktop"
	"github.com/open-bot/computer/pkg/shared"
)

// Target is one screen's X display as package desktop drives it.
type Target = desktop.Target

// Frame is one capture (JPEG nil when unchanged).
type Frame = desktop.Frame

// Driver is what a screen needs from package desktop: input, capture and
// cleanup. *desktop.Desktop is the real one; unit tests use a fake. Do must
// stop (and kill any helper process) when ctx is cancelled, and wrap
// ErrDisplayGone when the X server is not there.
type Driver interface {
	Do(ctx context.Context, a shared.Action) error
	// CaptureIfChanged captures the screen; when its hash equals prevHash
	// it may skip encoding and report changed=false.
	CaptureIfChanged(ctx context.Context, prevHash uint64) (f Frame, changed bool, err error)
	// TypeSecret types secret like a type action, never putting it in an
	// argv, a log or an error.
	TypeSecret(ctx context.Context, secret string) error
	// Windows lists the display's application windows, bottom to top.
	Windows(ctx context.Context) ([]shared.Window, error)
	Close() error
}

// ErrDisplayGone is what a Driver wraps when the X server died.
var ErrDisplayGone = desktop.ErrDisplayGone

func isDisplayGone(err error) bool { return errors.Is(err, ErrDisplayGone) }

// defaultDriver is desktop.New with the manager's runner and logger.
func (m *Manager) defaultDriver(t Target) (Driver, error) {
	return desktop.New(t, desktop.Options{Runner: m.o.Runner, Log: m.o.Log})
}

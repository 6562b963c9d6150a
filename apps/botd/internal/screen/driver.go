package screen

import (
	"context"
	"errors"
	"image"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/pkg/shared"
)

// Target is one screen's X display as the desktop package drives it.
type Target struct {
	Display    string
	XAuthority string
	User       *osuser.User
	Width      int
	Height     int
}

// Frame is one capture.
type Frame struct {
	// JPEG is nil when the frame equals the previous hash asked about.
	JPEG          []byte
	Width, Height int
	Pointer       image.Point
	Hash          uint64
}

// Driver is what a screen needs from package desktop: input, capture and
// cleanup. Do must stop (and kill any helper process) when ctx is
// cancelled, and wrap ErrDisplayGone when the X server is not there.
type Driver interface {
	Do(ctx context.Context, a shared.Action) error
	// CaptureIfChanged captures the screen; when its hash equals prevHash
	// it may skip encoding and report changed=false.
	CaptureIfChanged(ctx context.Context, prevHash uint64) (f Frame, changed bool, err error)
	Close() error
}

// ErrDisplayGone is what a Driver wraps when the X server died.
var ErrDisplayGone = errors.New("display gone")

// isDisplayGone also recognises the desktop package's own sentinel.
var displayGoneErrs = []error{ErrDisplayGone}

func isDisplayGone(err error) bool {
	for _, e := range displayGoneErrs {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

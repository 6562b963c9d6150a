package desktop

import (
	"context"

	"github.com/open-bot/computer/pkg/shared"
)

// ScreenAPI is what a Backend whose vendor publishes its own computer-use
// API for the sandbox's display :0 (Daytona's toolbox /computeruse/…) adds:
// the machine then takes display :0's screenshots and performs its input
// through that API, and keeps scrot and xdotool for the displays it starts
// itself (:1, :2, …). It is optional: a Backend without it is driven by
// commands alone.
type ScreenAPI interface {
	// Screenshot is display :0 as a JPEG (the pointer drawn in) and where
	// the pointer is.
	Screenshot(ctx context.Context) (jpeg []byte, pointer shared.Point, err error)
	// Input performs one validated action on display :0 (type: one chunk
	// of its text). handled false leaves the action to xdotool (what the
	// API cannot express, e.g. a drag along more than two points).
	Input(ctx context.Context, a shared.Action) (handled bool, err error)
}

// screenAPI is the backend's ScreenAPI for slot, when it drives that
// display (only :0, the sandbox's own).
func (m *Machine) screenAPI(slot int) ScreenAPI {
	if slot != 0 {
		return nil
	}
	sa, _ := m.b.(ScreenAPI)
	return sa
}

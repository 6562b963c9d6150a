package screen

// Display numbers are shared by everyone on the host (issue 36 row 6). An
// X server for display d takes three names: the lock file /tmp/.X<d>-lock,
// the socket /tmp/.X11-unix/X<d>, and the abstract unix name
// @/tmp/.X11-unix/X<d>. Abstract names belong to the network namespace,
// not to a user or a directory: any local user (another computer's bot on
// the local provider) may bind one first, and Xvfb then dies with "Cannot
// establish any listening sockets". So a display is free only when all
// three are, and a start whose Xvfb lost its display to someone who got in
// after the probe moves on to the next free display at once. Xvfb keeps
// its abstract listener (no -nolisten local): X clients on Linux try the
// abstract name first, and one held by someone else would be handed the
// desktop's cookie. Slots, and so display numbers, reach SlotSpan past
// DisplayBase, far more than the screens that may run: a bot that squats
// every number of the first MaxSlots (or any other fixed set short of the
// whole span) delays no screen, and a search of the span is bounded (a
// probe is a few system calls; no waiting for anyone).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/pkg/shared"
)

// errDisplayTaken means a stack's X server did not start because someone
// outside botd holds its display number (taken after the probe found it
// free).
var errDisplayTaken = errors.New("the display number is held by someone else")

// displayRetries bounds how many other displays one start moves on to
// when its display is taken from under it.
const displayRetries = 8

// x11AbstractName is the abstract unix name of display n's X server.
func x11AbstractName(n int) string { return "@" + x11SocketPath(n) }

// displayHeld reports whether something outside botd holds display disp:
// an X lock that is not a dead server's of desktop (or root), anything but
// desktop's own socket at the socket path, or the abstract name bound in
// botd's network namespace. The lock and the socket are in world-writable
// /tmp: read without blocking or following a link (a FIFO or a link there
// only marks the display taken).
func displayHeld(disp, desktop int) bool {
	lock := fmt.Sprintf("/tmp/.X%d-lock", disp)
	b, err := safefs.ReadOwned(lock, 64, -1)
	switch {
	case err == nil:
		if !lockStale(lock, b, desktop) {
			return true
		}
	case !errors.Is(err, os.ErrNotExist):
		return true // a FIFO, a link, something unreadable
	}
	if err := safefs.CheckSocket(x11SocketPath(disp), desktop); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true // someone else's socket: Xvfb could not replace it
	}
	return abstractHeld(disp)
}

// abstractHeld reports whether display disp's abstract name is bound in
// this network namespace. Binding it is the test (released at once, before
// Xvfb starts); when the bind fails for another reason than the name being
// in use, /proc/net/unix decides.
func abstractHeld(disp int) bool {
	name := x11AbstractName(disp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err == nil {
		ln.Close() // an abstract name is gone with its socket: nothing to unlink
		return false
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return true
	}
	b, rerr := os.ReadFile("/proc/net/unix")
	if rerr != nil {
		return true // cannot tell: taken
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 8 && f[len(f)-1] == name {
			return true
		}
	}
	return false
}

// xvfbFailed is the error of an Xvfb on disp that did not come up:
// errDisplayTaken when it exited and someone else now holds the display,
// else err as it was.
func (m *Manager) xvfbFailed(p *supervisor.Proc, disp int, err error) error {
	if p.State() == shared.StateCrashed {
		select {
		case <-p.Done():
			if displayHeld(disp, int(m.o.Desktop.UID)) {
				return fmt.Errorf("%w: display :%d (xvfb: %v)", errDisplayTaken, disp, err)
			}
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("xvfb: %w", err)
}

// startMovingOn starts a stack for s in slot; when its display was taken
// from under it, it moves on to the next free slot (at most displayRetries
// times), never waiting for the holder. setSlot gives the holder (a screen
// or the spare) its new slot; it is called with m.mu held.
func (m *Manager) startMovingOn(ctx context.Context, s *Screen, slot int, setSlot func(int)) (stack, error) {
	lost := map[int]bool{}
	for tries := 0; ; tries++ {
		st, err := m.be.start(ctx, s, slot)
		if err == nil || !errors.Is(err, errDisplayTaken) || tries == displayRetries || ctx.Err() != nil {
			return st, err
		}
		lost[slot] = true
		next := m.moveSlot(lost, setSlot)
		if next < 0 {
			return nil, err
		}
		m.log.Warn().Str("screen", s.ID).Int("display", m.display(slot)).Int("next_display", m.display(next)).
			Msg("the display was taken by someone else as the screen started; moving on")
		slot = next
	}
}

// moveSlot gives the holder (through setSlot, under m.mu) the lowest slot
// that no screen holds, nothing outside botd holds and that is not among
// lost (the slots this start already lost), releasing the one it had; -1
// when there is none or botd is closing.
func (m *Manager) moveSlot(lost map[int]bool, setSlot func(int)) int {
	for range 3 {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return -1
		}
		var cands []int
		for _, i := range m.unusedSlotsLocked() {
			if !lost[i] {
				cands = append(cands, i)
			}
		}
		m.mu.Unlock()
		hostFree := m.probeHost(cands)
		m.mu.Lock()
		next := m.freeSlotLocked(hostFree)
		if m.closed {
			next = -1
		} else if next >= 0 {
			setSlot(next)
		}
		m.mu.Unlock()
		if next >= 0 || len(hostFree) == 0 {
			return next
		}
		// Another start took the slot found free meanwhile: probe again.
	}
	return -1
}

package screen

// A spare screen (issue 24.3, the worker's warm pool). botd names a screen
// after the bot that uses it, and while a computer waits in the worker's
// pool no bot is known yet. So the pool asks botd (POST /screens/spare) to
// start one screen's stack — Xvfb, the session bus, the window manager,
// the panel and the desktop, x11vnc — in a slot, under no id. The next
// screen that has to start takes that stack instead of starting one: its
// profile directory is made, its start hooks run (the view ports, the
// browser's arguments), and it runs at once, its session already drawn.
//
// One spare at a time; a taken spare is not made again (the pool wants a
// pooled computer's first screen fast, later screens start as before). A
// spare counts against MaxScreens like a screen and holds its slot; one
// whose display dies is dropped. Nothing of any bot is on it: no profile,
// no browser, no lease.

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/pkg/shared"
)

// spareID names the spare's processes while it waits; it is never a
// screen id botd lists, and its profile directory is removed at once.
const spareID = "_spare"

// spareStack is a started stack waiting for its screen.
type spareStack struct {
	slot  int
	st    stack         // set when ready
	err   error         // why the start failed
	ready chan struct{} // closed once the start ended
}

// PrepareSpare starts the spare (or waits for the one starting) and
// returns once it is running and its session has drawn. It fails when botd is closing, every slot is
// taken, or the stack did not start.
func (m *Manager) PrepareSpare(ctx context.Context) error {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return errClosed
		}
		if sp := m.spare; sp != nil {
			m.mu.Unlock()
			select {
			case <-sp.ready:
				return sp.err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if m.busyLocked() >= m.o.MaxScreens {
			m.mu.Unlock()
			return shared.Errorf(http.StatusConflict, shared.CodeMultiScreen, "all %d screens are in use: no room for a spare", m.o.MaxScreens)
		}
		cands := m.unusedSlotsLocked()
		m.mu.Unlock()
		hostFree := m.probeHost(cands)
		m.mu.Lock()
		if m.spare != nil || m.closed {
			m.mu.Unlock()
			continue
		}
		slot := m.freeSlotLocked(hostFree)
		if slot < 0 {
			m.mu.Unlock()
			if len(hostFree) > 0 {
				continue // taken meanwhile: probe again
			}
			return shared.Errorf(http.StatusConflict, shared.CodeMultiScreen, "no free display slot for a spare")
		}
		sp := &spareStack{slot: slot, ready: make(chan struct{})}
		m.spare = sp
		m.mu.Unlock()
		go m.startSpare(sp)
	}
}

// startSpare starts sp's stack (outliving the request that asked for it).
func (m *Manager) startSpare(sp *spareStack) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	began := m.clock.Now()
	s := &Screen{ID: spareID, m: m, slot: sp.slot, state: shared.StateStarting}
	st, err := m.startMovingOn(ctx, s, sp.slot, func(n int) { sp.slot, s.slot = n, n })
	if err == nil {
		// Ready means drawn: the panel and the desktop are up (or
		// DrawnTimeout passed), so the first observation waits for
		// nothing.
		select {
		case <-st.drawn():
		case <-st.died():
		}
	}
	// The stack made a profile directory for its placeholder id: no
	// screen has it.
	_ = safefs.RemoveAllNoFollow(m.o.Home, filepath.Join("desktop", "screens", spareID))
	m.mu.Lock()
	if err == nil && m.closed {
		err = errClosed
	}
	if err != nil {
		if m.spare == sp {
			m.spare = nil
		}
		sp.err = err
	} else {
		sp.st = st
	}
	m.mu.Unlock()
	close(sp.ready)
	if err != nil {
		if st != nil {
			m.stopSpareStack(sp.slot, st)
		}
		m.log.Error().Int("slot", sp.slot).Err(err).Msg("spare screen did not start")
		return
	}
	m.log.Info().Int("slot", sp.slot).Int("display", m.display(sp.slot)).Int64("elapsed_ms", m.clock.Now().Sub(began).Milliseconds()).Msg("spare screen running")
	go func() {
		<-st.died()
		m.mu.Lock()
		mine := m.spare == sp
		if mine {
			m.spare = nil
		}
		m.mu.Unlock()
		if mine { // not taken: nobody else stops it
			m.log.Warn().Int("slot", sp.slot).Msg("the spare screen's display died; dropped")
			m.stopSpareStack(sp.slot, st)
		}
	}()
}

func (m *Manager) stopSpareStack(slot int, st stack) {
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	_ = st.stop(ctx)
	_ = os.Remove(m.xauthPath(slot))
}

// takeSpareLocked hands the ready spare to s (whose start it becomes), or
// reports the spare still starting (wait on it), or none. m.mu is held.
func (m *Manager) takeSpareLocked() (sp *spareStack, starting <-chan struct{}) {
	sp = m.spare
	if sp == nil {
		return nil, nil
	}
	if sp.st == nil {
		return nil, sp.ready
	}
	m.spare = nil
	return sp, nil
}

// adopt is the start of screen s on the spare sp: the profile directory,
// then the stack, already running, renamed.
func (m *Manager) adopt(s *Screen, sp *spareStack) func(ctx context.Context) (stack, error) {
	return func(ctx context.Context) (stack, error) {
		ps, ok := sp.st.(*procStack)
		if !ok {
			return sp.st, nil // a test backend's: it makes no directories
		}
		// What procBackend.start makes for a screen's id.
		u := m.o.Desktop
		for _, d := range []struct {
			rel  string
			mode os.FileMode
		}{{filepath.Join("desktop", "screens"), 0o755}, {filepath.Join("desktop", "screens", s.ID), 0o700}} {
			if err := safefs.EnsureDir(m.o.Home, d.rel, d.mode, int(u.UID), int(u.GID)); err != nil {
				m.stopSpareStack(sp.slot, sp.st)
				return nil, err
			}
		}
		ps.id = s.ID
		return ps, nil
	}
}

// closeSpare stops a spare nobody took (botd is closing).
func (m *Manager) closeSpare(ctx context.Context) {
	m.mu.Lock()
	sp := m.spare
	m.spare = nil
	m.mu.Unlock()
	if sp == nil {
		return
	}
	select {
	case <-sp.ready:
	case <-ctx.Done():
		return
	}
	if sp.st != nil {
		m.stopSpareStack(sp.slot, sp.st)
	}
}

// handleSpare is POST /screens/spare.
func (m *Manager) handleSpare(w http.ResponseWriter, r *http.Request) {
	if err := m.PrepareSpare(r.Context()); err != nil {
		var ae *shared.APIError
		if !errors.As(err, &ae) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			err = shared.Errorf(http.StatusServiceUnavailable, shared.CodeScreenUnavailable, "the spare screen did not start")
		}
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"spare": true})
}

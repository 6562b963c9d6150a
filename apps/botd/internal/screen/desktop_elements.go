package screen

import (
	"context"
	"errors"
	"net/http"

	"github.com/open-bot/computer/apps/botd/internal/atspi"
	"github.com/open-bot/computer/pkg/shared"
)

// Desktop elements (issue 23): the elements of the screen's desktop
// programs come from AT-SPI on the screen's own accessibility bus (package
// atspi), in the same list as the browser's. Ids start with "d" (the
// browser's with "e"), so an act's element target goes to the half that
// issued it.
//
// A desktop element is left out when a window stacked above its own
// covers its centre (the browser's window over a file manager, say): its
// own window is the X client window whose box holds the element's
// top-level AT-SPI window most tightly. Popups that are no client window
// (open menus, the panel's) are drawn above every window.

// desktopElems is a manager's AT-SPI reader.
type desktopElems struct {
	r *atspi.Reader
}

// deskLocked is the desktop element reader (nil for a manager whose screens
// are not real stacks: the unit tests' fake backend). m.elemMu is held.
func (m *Manager) deskLocked() *desktopElems {
	if _, real := m.be.(*procBackend); !real {
		return nil
	}
	if m.desk == nil {
		m.desk = &desktopElems{r: &atspi.Reader{UID: int(m.o.Desktop.UID), Skip: []string{"Chromium", "chromium", "Google Chrome"}}}
		d := m.desk
		m.BeforeStop(func(ctx context.Context, s *Screen) {
			m.mu.Lock()
			slot := s.slot
			m.mu.Unlock()
			if slot >= 0 {
				disp := m.display(slot)
				d.r.Forget(atspi.SocketPath(runDirFor(disp), disp))
			}
		})
	}
	return m.desk
}

// a11ySocket is screen id's accessibility bus socket (ok false when the
// screen is not up).
func (m *Manager) a11ySocket(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.screens[id]
	if !s.upLocked() {
		return "", false
	}
	d := m.display(s.slot)
	return atspi.SocketPath(runDirFor(d), d), true
}

// windowsOf lists screen id's client windows, bottom to top (nil when they
// cannot be read: nothing is then taken as covered).
func (m *Manager) windowsOf(ctx context.Context, id string) []shared.Window {
	m.mu.Lock()
	s := m.screens[id]
	var st stack
	if s != nil {
		st = s.stack
	}
	m.mu.Unlock()
	if st == nil || st.driver() == nil {
		return nil
	}
	ws, err := st.driver().Windows(ctx)
	if err != nil {
		return nil
	}
	return ws
}

// combined is the browser's element source and the desktop's in one.
type combined struct {
	m       *Manager
	browser ElementSource
	desk    *desktopElems
}

// Elements lists the browser's elements, then the desktop programs'
// (those not covered by a window above theirs), up to shared.MaxElements.
func (c *combined) Elements(ctx context.Context, id string) ([]shared.Element, error) {
	type res struct {
		list []shared.Element
		err  error
	}
	bch := make(chan res, 1)
	if c.browser != nil {
		go func() {
			l, err := c.browser.Elements(ctx, id)
			bch <- res{l, err}
		}()
	} else {
		bch <- res{}
	}
	dl, derr := c.desktop(ctx, id)
	b := <-bch
	if b.err != nil {
		return nil, b.err
	}
	if derr != nil && len(b.list) == 0 {
		return nil, derr
	}
	out := append([]shared.Element{}, b.list...)
	for _, e := range dl {
		if len(out) >= shared.MaxElements {
			break
		}
		out = append(out, e.Element)
	}
	return out, nil
}

// desktop reads screen id's desktop elements (none when no accessibility
// bus runs there yet), covered ones left out.
func (c *combined) desktop(ctx context.Context, id string) ([]atspi.Element, error) {
	sock, ok := c.m.a11ySocket(id)
	if !ok {
		return nil, nil
	}
	list, err := c.desk.r.Elements(ctx, sock, Width, Height)
	if errors.Is(err, atspi.ErrNoBus) {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, shared.Errorf(http.StatusServiceUnavailable, shared.CodeElementsUnavailable, "the desktop programs' elements could not be read: %v", err)
	}
	ws := c.m.windowsOf(ctx, id)
	out := list[:0]
	for _, e := range list {
		if !coveredBy(ws, e.Top, e.Box.Center()) {
			out = append(out, e)
		}
	}
	return out, nil
}

// coveredBy reports whether a window stacked above the one holding top
// (an AT-SPI top-level box) covers p. ws is bottom to top.
func coveredBy(ws []shared.Window, top shared.Box, p shared.Point) bool {
	own := -1
	best := 0
	for i, w := range ws {
		if w.Minimized {
			continue
		}
		if top.W > 0 && top.H > 0 && w.Box.X <= top.X+2 && w.Box.Y <= top.Y+2 &&
			w.Box.X+w.Box.W >= top.X+top.W-2 && w.Box.Y+w.Box.H >= top.Y+top.H-2 {
			a := w.Box.W * w.Box.H
			if own < 0 || a <= best {
				own, best = i, a
			}
		}
	}
	if own < 0 {
		return false // a popup or the panel: above every window
	}
	for _, w := range ws[own+1:] {
		if w.Minimized {
			continue
		}
		if p.X >= w.Box.X && p.X < w.Box.X+w.Box.W && p.Y >= w.Box.Y && p.Y < w.Box.Y+w.Box.H {
			return true
		}
	}
	return false
}

// Resolve sends a desktop id to AT-SPI, the rest to the browser.
func (c *combined) Resolve(ctx context.Context, id, elementID string) (shared.Point, error) {
	if !atspi.IsID(elementID) {
		if c.browser == nil {
			return shared.Point{}, shared.Errorf(http.StatusNotFound, shared.CodeElementNotFound, "no observation of this screen returned element %s", elementID)
		}
		return c.browser.Resolve(ctx, id, elementID)
	}
	sock, ok := c.m.a11ySocket(id)
	if !ok {
		return shared.Point{}, shared.Errorf(http.StatusConflict, shared.CodeElementStale, "element %s is gone: the screen is not running", elementID)
	}
	cur, err := c.desk.r.Locate(ctx, sock, elementID, Width, Height)
	if err != nil {
		return shared.Point{}, err
	}
	p := cur.Box.Center()
	if coveredBy(c.m.windowsOf(ctx, id), cur.Top, p) {
		return shared.Point{}, shared.Errorf(http.StatusConflict, shared.CodeElementCovered, "element %s is covered by another window at its centre (%d,%d); bring its window forward first", elementID, p.X, p.Y)
	}
	return p, nil
}

// Focus sends a desktop id to AT-SPI, the rest to the browser.
func (c *combined) Focus(ctx context.Context, id, elementID string) error {
	if !atspi.IsID(elementID) {
		if c.browser == nil {
			return shared.Errorf(http.StatusNotFound, shared.CodeElementNotFound, "no observation of this screen returned element %s", elementID)
		}
		return c.browser.Focus(ctx, id, elementID)
	}
	sock, ok := c.m.a11ySocket(id)
	if !ok {
		return shared.Errorf(http.StatusConflict, shared.CodeElementStale, "element %s is gone: the screen is not running", elementID)
	}
	return c.desk.r.Focus(ctx, sock, elementID)
}

// DesktopElements reads screen id's desktop elements with what the corpus
// test and the figures need (role, app, interactive); tests and benchmarks.
func (m *Manager) DesktopElements(ctx context.Context, id string) ([]atspi.Element, *atspi.Reader, string, error) {
	m.elemMu.Lock()
	d := m.deskLocked()
	m.elemMu.Unlock()
	if d == nil {
		return nil, nil, "", errors.New("no desktop elements on this manager")
	}
	c := &combined{m: m, desk: d}
	list, err := c.desktop(ctx, id)
	sock, _ := m.a11ySocket(id)
	return list, d.r, sock, err
}

package screen

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// ElementSource reads a screen's elements and resolves element targets at
// act time. The browser package supplies it (the screen's Chromium over
// its DevTools pipe); errors it returns are *shared.APIError values with the
// element codes (shared.CodeElementStale, …).
type ElementSource interface {
	// Elements lists the visible, interactive or labelled elements of
	// screen id in screen pixels.
	Elements(ctx context.Context, id string) ([]shared.Element, error)
	// Resolve returns the current centre of element elementID of screen
	// id, after checking it is still there, on screen and not covered.
	Resolve(ctx context.Context, id, elementID string) (shared.Point, error)
	// Focus gives element elementID of screen id the keyboard focus.
	Focus(ctx context.Context, id, elementID string) error
}

// ElementsTimeout bounds reading a screen's elements in an observation: a
// page that never settles its tree gets an elementsError, and the
// screenshot still comes back.
const ElementsTimeout = 3 * time.Second

// SetElements sets where observations find elements and acts resolve
// element targets (nil: no elements).
func (m *Manager) SetElements(src ElementSource) {
	m.elemMu.Lock()
	defer m.elemMu.Unlock()
	m.elements = src
}

func (m *Manager) elementSource() ElementSource {
	m.elemMu.Lock()
	defer m.elemMu.Unlock()
	if d := m.deskLocked(); d != nil {
		return &combined{m: m, browser: m.elements, desk: d}
	}
	return m.elements
}

// ObserveOptions asks an observation for more than the screenshot.
type ObserveOptions struct {
	// Elements adds the screen's elements (Observation.Elements).
	Elements bool `json:"elements,omitempty"`
}

// elementsResult is one read of the elements, run beside the capture.
type elementsResult struct {
	list []shared.Element
	err  error
}

// startElements reads the elements in the background (nil when not asked).
func (s *Screen) startElements(ctx context.Context, o ObserveOptions) <-chan elementsResult {
	if !o.Elements {
		return nil
	}
	ch := make(chan elementsResult, 1)
	src := s.m.elementSource()
	if src == nil {
		ch <- elementsResult{err: shared.Errorf(http.StatusServiceUnavailable, shared.CodeElementsUnavailable, "this computer does not read elements")}
		return ch
	}
	go func() {
		ectx, cancel := context.WithTimeout(ctx, ElementsTimeout)
		defer cancel()
		list, err := src.Elements(ectx, s.ID)
		if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = shared.Errorf(http.StatusServiceUnavailable, shared.CodeElementsUnavailable, "the page did not settle its elements in %v; the screenshot is current", ElementsTimeout)
		}
		ch <- elementsResult{list: list, err: err}
	}()
	return ch
}

// finishElements puts the elements (or why there are none) into obs.
func finishElements(obs *Observation, ch <-chan elementsResult) {
	if ch == nil {
		return
	}
	r := <-ch
	if r.err != nil {
		var ae *shared.APIError
		body := &shared.ErrorBody{Code: shared.CodeElementsUnavailable, Message: "the elements could not be read; the screenshot is current"}
		if errors.As(r.err, &ae) {
			body = &shared.ErrorBody{Code: ae.Code, Message: ae.Message}
		}
		obs.ElementsError = body
		obs.Elements = []shared.Element{}
		return
	}
	if r.list == nil {
		r.list = []shared.Element{}
	}
	obs.Elements = r.list
}

// isElementErr reports whether err is an element target's own failure
// (unknown, stale, covered, off screen): the action fails in its result,
// the batch stops, the observation still comes back.
func isElementErr(err error) (*shared.APIError, bool) {
	var ae *shared.APIError
	if !errors.As(err, &ae) {
		return nil, false
	}
	switch ae.Code {
	case shared.CodeElementNotFound, shared.CodeElementStale, shared.CodeElementCovered, shared.CodeElementOffscreen, shared.CodeElementsUnavailable:
		return ae, true
	}
	return nil, false
}

// resolveElement turns an element target into the point action it stands
// for, and for type focuses the element first (a click at its centre, so
// the window comes forward as for a person, then a DevTools focus).
func (s *Screen) resolveElement(ctx context.Context, drv Driver, a shared.Action) (shared.Action, error) {
	if a.Element == "" {
		return a, nil
	}
	src := s.m.elementSource()
	if src == nil {
		return a, shared.Errorf(http.StatusConflict, shared.CodeElementsUnavailable, "this computer does not resolve elements; use x and y")
	}
	rctx, cancel := context.WithTimeout(ctx, ElementsTimeout)
	p, err := src.Resolve(rctx, s.ID, a.Element)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = shared.Errorf(http.StatusServiceUnavailable, shared.CodeElementsUnavailable, "the page did not answer where element %s is within %v; nothing was done", a.Element, ElementsTimeout)
		}
		return a, err
	}
	x, y := p.X, p.Y
	out := a
	out.Element = ""
	if a.Type == shared.ActionType {
		click := shared.Action{Type: shared.ActionClick, X: &x, Y: &y}
		if err := drv.Do(ctx, click); err != nil {
			return a, err
		}
		fctx, cancel := context.WithTimeout(ctx, ElementsTimeout)
		err := src.Focus(fctx, s.ID, a.Element)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				err = shared.Errorf(http.StatusServiceUnavailable, shared.CodeElementsUnavailable, "the page did not answer in time to focus element %s", a.Element)
			}
			return a, err
		}
		return out, nil
	}
	out.X, out.Y = &x, &y
	return out, nil
}

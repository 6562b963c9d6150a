package browser

import (
	"context"
	"errors"
	"net/http"

	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
)

var _ screen.ElementSource = (*Screens)(nil)

// running returns screen id's browser when one runs now (reading elements
// never starts a browser), for one request.
func (bs *Screens) runningNow(id string) (*Browser, func()) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.browsers[id]
	if b == nil || bs.pausedLocked(id) {
		return nil, nil
	}
	select {
	case <-b.Done():
		return nil, nil
	default:
	}
	bs.inUse[id]++
	return b, func() {
		bs.mu.Lock()
		bs.inUse[id]--
		if bs.inUse[id] <= 0 {
			delete(bs.inUse, id)
		}
		bs.wakeLocked()
		bs.mu.Unlock()
	}
}

// Elements implements screen.ElementSource: the elements of the page in
// front of screen id's browser (none when no browser runs there).
func (bs *Screens) Elements(ctx context.Context, id string) ([]shared.Element, error) {
	b, release := bs.runningNow(id)
	if b == nil {
		return []shared.Element{}, nil
	}
	defer release()
	list, err := b.Elements(ctx)
	if err != nil {
		return nil, elementErr(err)
	}
	return list, nil
}

// Resolve implements screen.ElementSource.
func (bs *Screens) Resolve(ctx context.Context, id, elementID string) (shared.Point, error) {
	b, release := bs.runningNow(id)
	if b == nil {
		return shared.Point{}, shared.Errorf(http.StatusConflict, shared.CodeElementStale, "element %s is gone: no browser runs on this screen now", elementID)
	}
	defer release()
	p, err := b.Resolve(ctx, elementID)
	return p, elementErr(err)
}

// Focus implements screen.ElementSource.
func (bs *Screens) Focus(ctx context.Context, id, elementID string) error {
	b, release := bs.runningNow(id)
	if b == nil {
		return shared.Errorf(http.StatusConflict, shared.CodeElementStale, "element %s is gone: no browser runs on this screen now", elementID)
	}
	defer release()
	return elementErr(b.Focus(ctx, elementID))
}

// elementErr keeps element codes and maps the rest like the browser routes.
func elementErr(err error) error {
	var ae *shared.APIError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return err // the screen maps a page that never settles
	}
	msg := "browser error"
	if errors.As(browserErr(err), &ae) {
		msg = ae.Message
	}
	return shared.Errorf(http.StatusServiceUnavailable, shared.CodeElementsUnavailable, "the page's elements could not be read: %s", msg)
}

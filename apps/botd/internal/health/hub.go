// Package health keeps the event hub (everything /events pushes) and the
// ComputerHealth model assembled from the components' own state.
package health

import (
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// subscriberBuffer is how many events a slow subscriber may lag before it is
// dropped (its channel closed) so it can never stall a publisher.
const subscriberBuffer = 256

// Hub fans events out to subscribers. Publish never blocks.
type Hub struct {
	// mu guards subs and closed.
	mu     sync.Mutex
	subs   map[chan shared.Event]struct{}
	closed bool
	now    func() time.Time
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[chan shared.Event]struct{}{}, now: time.Now}
}

// Subscribe returns a channel of events and a cancel func. The channel is
// closed on cancel, on Close, or when the subscriber falls too far behind.
func (h *Hub) Subscribe() (<-chan shared.Event, func()) {
	ch := make(chan shared.Event, subscriberBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// Publish sends an event of typ with data to every subscriber.
func (h *Hub) Publish(typ string, data any) {
	ev := shared.Event{Type: typ, At: h.now().UTC(), Data: data}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// Close ends every subscription.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

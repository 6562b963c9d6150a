package cdp

import (
	"sync"

	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
)

// subscription queues one subscriber's events without bound, so the reader
// loop never waits on a slow consumer, and forwards them in order on out.
type subscription struct {
	out    chan jsonv2.Value
	wake   chan struct{}
	stop   chan struct{}
	ending chan struct{}

	// mu guards queue and finished.
	mu       sync.Mutex
	queue    []jsonv2.Value
	finished bool

	stopOnce sync.Once
	endOnce  sync.Once
}

func newSubscription() *subscription {
	s := &subscription{
		out:    make(chan jsonv2.Value),
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		ending: make(chan struct{}),
	}
	go s.pump()
	return s
}

// push queues v; it never blocks.
func (s *subscription) push(v jsonv2.Value) {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, v)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// finish delivers what is queued, then closes out (the source ended).
func (s *subscription) finish() {
	s.mu.Lock()
	s.finished = true
	s.mu.Unlock()
	s.endOnce.Do(func() { close(s.ending) })
}

// cancel drops what is queued and closes out (the subscriber left).
func (s *subscription) cancel() {
	s.finish()
	s.stopOnce.Do(func() { close(s.stop) })
}

func (s *subscription) pump() {
	defer close(s.out)
	for {
		s.mu.Lock()
		var v jsonv2.Value
		have := len(s.queue) > 0
		if have {
			v = s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
		if !have {
			select {
			case <-s.wake:
				continue
			case <-s.ending:
				s.mu.Lock()
				empty := len(s.queue) == 0
				s.mu.Unlock()
				if empty {
					return
				}
				continue
			case <-s.stop:
				return
			}
		}
		select {
		case s.out <- sanitize(v):
		case <-s.stop:
			return
		}
	}
}

// sanitize makes v decodable under JSON v2's strict defaults, which
// cdp.Events uses: lone surrogates and invalid UTF-8 become U+FFFD.
func sanitize(v jsonv2.Value) jsonv2.Value {
	if len(v) == 0 {
		return jsonv2.Value("{}")
	}
	if v.IsValid() {
		return v
	}
	c := v.Clone()
	if err := c.Format(jsonv2.AllowInvalidUTF8(true)); err != nil {
		return v
	}
	return c
}

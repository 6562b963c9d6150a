package egressagent

import "time"

// backoff is the reconnect delay: min doubling to max, with equal jitter
// (half fixed, half random) so many agents never reconnect in step.
type backoff struct {
	min, max time.Duration
	rand     func() float64
	n        int
}

// next is the delay before the next attempt.
func (b *backoff) next() time.Duration {
	d := b.max
	if b.n < 32 {
		if x := b.min << b.n; x > 0 && x < b.max {
			d = x
			b.n++
		}
	}
	half := d / 2
	return half + time.Duration(b.rand()*float64(d-half))
}

// reset starts over from min after a session that held.
func (b *backoff) reset() { b.n = 0 }

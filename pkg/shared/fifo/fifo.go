// Package fifo is a lock handed to waiters strictly in the order they asked
// for it: a screen's input queue, in botd and in the worker's command-driven
// desktop machine alike.
package fifo

import (
	"context"
	"sync"
)

// Lock is handed to waiters strictly in the order they asked for it. A
// sync.Mutex does not promise that (a goroutine that just unlocked, or a
// newly arriving one, can barge ahead of one that has waited), so two
// batches sent one after the other could run the other way round. Here each
// waiter gets its own channel in a queue; release closes the channel of the
// oldest waiter, and nobody else can take the lock in between.
//
// "Arrival order" is the order in which requests call Acquire, which the
// handlers do right after decoding and validating the body and checking the
// lease; requests that arrive at the same instant on different connections
// have no order other than that one. The zero Lock is free.
type Lock struct {
	// mu guards busy and waiters.
	mu      sync.Mutex
	busy    bool
	waiters []chan struct{}
}

// Acquire blocks until it is this caller's turn or ctx ends. On success the
// caller must call the returned release (once; later calls do nothing).
func (q *Lock) Acquire(ctx context.Context) (release func(), err error) {
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		return q.releaseOnce(), nil
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	q.mu.Unlock()
	select {
	case <-ch:
		return q.releaseOnce(), nil
	case <-ctx.Done():
		q.mu.Lock()
		for i, w := range q.waiters {
			if w == ch {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				q.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		q.mu.Unlock()
		// We were handed the lock just as ctx ended: pass it on.
		q.release()
		return nil, ctx.Err()
	}
}

func (q *Lock) releaseOnce() func() {
	var once sync.Once
	return func() { once.Do(q.release) }
}

// release hands the lock to the oldest waiter, or frees it.
func (q *Lock) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) == 0 {
		q.busy = false
		return
	}
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	close(next)
}

// Queued is how many callers wait (for tests and listings).
func (q *Lock) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}

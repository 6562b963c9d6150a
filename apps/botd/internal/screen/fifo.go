package screen

import (
	"context"
	"sync"
)

// fifo is a lock that is handed to waiters strictly in the order they asked
// for it. A sync.Mutex does not promise that (a goroutine that just unlocked,
// or a newly arriving one, can barge ahead of one that has waited), so two
// batches sent one after the other could run the other way round. Here each
// waiter gets its own channel in a queue; release closes the channel of the
// oldest waiter, and nobody else can take the lock in between.
//
// "Arrival order" is the order in which requests call acquire, which the
// handlers do right after decoding and validating the body and checking the
// lease; requests that arrive at the same instant on different connections
// have no order other than that one.
type fifo struct {
	// mu guards busy and waiters.
	mu      sync.Mutex
	busy    bool
	waiters []chan struct{}
}

// acquire blocks until it is this caller's turn or ctx ends. On success the
// caller must call the returned release exactly once.
func (q *fifo) acquire(ctx context.Context) (release func(), err error) {
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

func (q *fifo) releaseOnce() func() {
	var once sync.Once
	return func() { once.Do(q.release) }
}

// release hands the lock to the oldest waiter, or frees it.
func (q *fifo) release() {
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

// queued is how many callers wait (for tests and listings).
func (q *fifo) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}

package fifo

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFIFOKeepsArrivalOrder(t *testing.T) {
	var q Lock
	rel, err := q.Acquire(ctxT(t))
	require.NoError(t, err)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := q.Acquire(ctxT(t))
			require.NoError(t, err)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			r()
		}()
		eventually(t, "queued", func() bool { return q.Queued() == i+1 })
	}
	rel()
	wg.Wait()
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order)
}

func TestFIFOAbandonedWaiter(t *testing.T) {
	var q Lock
	rel, err := q.Acquire(ctxT(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := q.Acquire(ctx); errc <- err }()
	eventually(t, "queued", func() bool { return q.Queued() == 1 })
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	rel()
	rel2, err := q.Acquire(ctxT(t))
	require.NoError(t, err)
	rel2()
}

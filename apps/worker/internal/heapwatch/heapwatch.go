// Package heapwatch samples the Go heap's high-water mark while a test
// feeds the code something hostile, for the tests that bound the memory it
// may take (a flooding machine, a relayed giant message, a lying VNC
// server).
package heapwatch

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Watch samples HeapAlloc until Stop.
type Watch struct {
	base uint64
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

// Start collects garbage, notes HeapAlloc as the base and samples it every
// period until Stop.
func Start(every time.Duration) *Watch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &Watch{base: ms.HeapAlloc, stop: make(chan struct{}), done: make(chan struct{})}
	w.peak.Store(ms.HeapAlloc)
	go func() {
		defer close(w.done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > w.peak.Load() {
				w.peak.Store(ms.HeapAlloc)
			}
			select {
			case <-w.stop:
				return
			case <-time.After(every):
			}
		}
	}()
	return w
}

// Stop ends the sampling and returns the heap's highest growth over the
// base, in bytes. Call it once.
func (w *Watch) Stop() int64 {
	close(w.stop)
	<-w.done
	return int64(w.peak.Load()) - int64(w.base)
}

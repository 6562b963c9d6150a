// Package agentlease shares one agent lease of a screen among the worker's
// outside-agent entry points for a bot (issue 34): the CDP endpoint and
// OSWorld's guest API. OSWorld's harness uses both for one bot (its chrome
// setup steps over CDP, then guest screenshots and executes), so they hold
// the screen under one holder, cdp-<bot>, and the lease is given back only
// when the last of them lets go: a CDP session that ends never releases
// the lease under an execute that is still acting.
package agentlease

import (
	"context"
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared/client"
)

// Holder is the lease holder of bot's outside agents.
func Holder(bot string) string { return "cdp-" + bot }

// Machine is what a lease is taken on.
type Machine interface {
	AcquireLease(ctx context.Context, id, kind, holder string, ttl time.Duration) (client.Lease, error)
	ReleaseLease(ctx context.Context, id, leaseID string) error
}

// Registry counts the holds of each (computer, screen, holder) lease.
type Registry struct {
	mu sync.Mutex
	m  map[key]*entry
}

type key struct{ computer, screen, holder string }

type entry struct {
	id   string
	refs int
	// releasing, while set, is closed once the machine has the lease back:
	// a hold meanwhile waits for it, or botd would answer it the lease
	// being given back (same holder) and the release would land under it.
	releasing chan struct{}
	// keep: the lease was there before any hold here (taken outside this
	// registry), so it is not ours to give back.
	keep bool
}

// New returns an empty registry.
func New() *Registry { return &Registry{m: map[key]*entry{}} }

// Hold takes (or shares) the holder's agent lease on screen and returns its
// id; release gives this hold back, and the last release gives the lease
// back to the machine. fresh asks botd again even when shared (a caller
// whose lease botd no longer honours); the new id is then everyone's.
// heldBefore says the machine showed the holder holding the screen already
// (a lease taken outside this registry): then no release gives it back.
func (r *Registry) Hold(ctx context.Context, m Machine, computer, screen, holder string, ttl time.Duration, fresh, heldBefore bool) (string, func(), error) {
	k := key{computer, screen, holder}
	r.mu.Lock()
	e := r.m[k]
	for e != nil && e.releasing != nil {
		ch := e.releasing
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", nil, ctx.Err()
		}
		r.mu.Lock()
		e = r.m[k]
	}
	if e != nil && !fresh {
		e.refs++
		id := e.id
		r.mu.Unlock()
		return id, r.releaser(m, k, e), nil
	}
	r.mu.Unlock()
	// Same kind and holder: botd answers the current lease (renewed) or a
	// new one.
	l, err := m.AcquireLease(ctx, screen, "agent", holder, ttl)
	if err != nil {
		return "", nil, err
	}
	r.mu.Lock()
	if e = r.m[k]; e == nil {
		e = &entry{keep: heldBefore}
		r.m[k] = e
	}
	e.id = l.LeaseID
	e.refs++
	r.mu.Unlock()
	return l.LeaseID, r.releaser(m, k, e), nil
}

func (r *Registry) releaser(m Machine, k key, e *entry) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			e.refs--
			last := e.refs <= 0 && r.m[k] == e
			if last && e.keep {
				delete(r.m, k)
			}
			if !last || e.keep {
				r.mu.Unlock()
				return
			}
			// The entry stays, releasing, until botd has the lease back.
			ch := make(chan struct{})
			e.releasing = ch
			id := e.id
			r.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = m.ReleaseLease(ctx, k.screen, id) // one botd already dropped is no matter
			cancel()
			r.mu.Lock()
			if r.m[k] == e {
				delete(r.m, k)
			}
			close(ch)
			r.mu.Unlock()
		})
	}
}

package agentlease

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// tableMachine is botd's lease table itself (pkg/shared/lease), the rules
// a machine answers with.
type tableMachine struct {
	t        *lease.Table
	mu       sync.Mutex
	released []string
}

func (m *tableMachine) AcquireLease(_ context.Context, id, kind, holder string, ttl time.Duration) (client.Lease, error) {
	l, err := m.t.Acquire(id, lease.Kind(kind), holder, ttl)
	return client.Lease{LeaseID: l.ID, Kind: string(l.Kind), Holder: l.Holder}, err
}

func (m *tableMachine) ReleaseLease(_ context.Context, id, leaseID string) error {
	m.mu.Lock()
	m.released = append(m.released, leaseID)
	m.mu.Unlock()
	return m.t.Release(id, leaseID)
}

// TestSharedUntilTheLast: two holds of one holder share the lease; the
// first release keeps it (the other is still acting), the last gives it
// back; another holder is refused meanwhile, and takes it after.
func TestSharedUntilTheLast(t *testing.T) {
	m := &tableMachine{t: lease.New(lease.Options{})}
	r := New()
	ctx := t.Context()
	a, relA, err := r.Hold(ctx, m, "c1", "alice", Holder("alice"), time.Minute, false, false)
	require.NoError(t, err)
	b, relB, err := r.Hold(ctx, m, "c1", "alice", Holder("alice"), time.Minute, false, false)
	require.NoError(t, err)
	require.Equal(t, a, b)
	relA()
	relA() // twice is once
	_, err = m.t.Check("alice", a)
	require.NoError(t, err, "the lease must outlive the first release while another hold acts")
	require.Empty(t, m.released)
	_, err = m.t.Acquire("alice", lease.Agent, "run-1", time.Minute)
	require.Error(t, err, "another agent is refused while the lease is held")
	relB()
	require.Equal(t, []string{a}, m.released)
	_, err = m.t.Acquire("alice", lease.Agent, "run-1", time.Minute)
	require.NoError(t, err, "free once the last hold let go")

	// A lease the machine showed held before any hold here is not given
	// back by the last release.
	pre, err := m.t.Acquire("bob", lease.Agent, Holder("bob"), time.Minute)
	require.NoError(t, err)
	id, rel, err := r.Hold(ctx, m, "c1", "bob", Holder("bob"), time.Minute, false, true)
	require.NoError(t, err)
	require.Equal(t, pre.ID, id)
	rel()
	_, err = m.t.Check("bob", pre.ID)
	require.NoError(t, err, "a lease held before is left held")
}

// slowRelease holds every ReleaseLease until gate closes.
type slowRelease struct {
	*tableMachine
	gate chan struct{}
	in   chan struct{}
}

func (m *slowRelease) ReleaseLease(ctx context.Context, id, leaseID string) error {
	m.in <- struct{}{}
	<-m.gate
	return m.tableMachine.ReleaseLease(ctx, id, leaseID)
}

// TestHoldWaitsForARelease: a hold that comes while the last hold's
// release is on its way to the machine waits for it and gets a new lease;
// it does not share the one being given back (which would be gone under
// it: the race integrations/osworld's execute_right_after_cdp found).
func TestHoldWaitsForARelease(t *testing.T) {
	m := &slowRelease{tableMachine: &tableMachine{t: lease.New(lease.Options{})}, gate: make(chan struct{}), in: make(chan struct{}, 1)}
	r := New()
	ctx := t.Context()
	old, rel, err := r.Hold(ctx, m, "c1", "alice", Holder("alice"), time.Minute, false, false)
	require.NoError(t, err)
	go rel()
	<-m.in // the release is at the machine
	got := make(chan string, 1)
	go func() {
		id, _, err := r.Hold(ctx, m, "c1", "alice", Holder("alice"), time.Minute, false, false)
		if err != nil {
			id = "error: " + err.Error()
		}
		got <- id
	}()
	select {
	case id := <-got:
		t.Fatalf("the hold did not wait for the release on its way: %s", id)
	case <-time.After(200 * time.Millisecond):
	}
	close(m.gate)
	id := <-got
	require.NotEqual(t, old, id, "the new hold must not share the lease being given back")
	_, err = m.t.Check("alice", id)
	require.NoError(t, err, "the new hold's lease is held")
}

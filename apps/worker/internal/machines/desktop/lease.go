package desktop

import (
	"errors"
	"fmt"
	"time"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// The lease rules are botd's own table (pkg/shared/lease): one agent or one
// person (kind "user") per screen, a person preempts an agent, an agent
// never takes a screen a person holds, use renews, leases expire. The
// worker holds the table because the sandbox runs no botd; this file only
// turns its answers into the *client.Error callers of a machine branch on.

// Lease kinds.
const (
	KindAgent = string(lease.Agent)
	KindUser  = string(lease.User)
)

// MaxHolderLen caps a holder label (botd's).
const MaxHolderLen = lease.MaxHolderLen

type leaseTable struct{ t *lease.Table }

func newLeaseTable(now func() time.Time, onChange func(lease.Change)) *leaseTable {
	return &leaseTable{t: lease.New(lease.Options{Now: now, OnChange: onChange})}
}

func public(l lease.Lease) client.Lease {
	return client.Lease{LeaseID: l.ID, Kind: string(l.Kind), Holder: l.Holder, ExpiresAt: l.ExpiresAt.UTC()}
}

// acquire grants screen to holder (lease.Table.AcquireUntil's rules).
func (t *leaseTable) acquire(screen, kind, holder string, ttl time.Duration, notAfter time.Time) (client.Lease, error) {
	l, err := t.t.AcquireUntil(screen, lease.Kind(kind), holder, ttl, notAfter)
	if err != nil {
		return client.Lease{}, asClientErr(err)
	}
	return public(l), nil
}

// check verifies that id is the screen's current lease and renews it.
func (t *leaseTable) check(screen, id string) error {
	_, err := t.t.Check(screen, id)
	return asClientErr(err)
}

// current is the screen's unexpired lease, or nil.
func (t *leaseTable) current(screen string) *lease.Lease { return t.t.Current(screen) }

// release ends lease id on screen: 404 when it is not the current one.
func (t *leaseTable) release(screen, id string) error {
	return asClientErr(t.t.Release(screen, id))
}

// drop ends whatever lease screen has (forgetting a screen).
func (t *leaseTable) drop(screen string) { t.t.Drop(screen) }

// sweep removes every expired lease.
func (t *leaseTable) sweep() { t.t.Sweep() }

// asClientErr turns the lease table's *shared.APIError into the
// *client.Error a machine's callers branch on (client.CodeOf).
func asClientErr(err error) error {
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return &client.Error{Status: ae.Status, Code: ae.Code, Message: ae.Message}
	}
	return err
}

// apiErr is the error callers branch on: botd's envelope as a *client.Error.
func apiErr(status int, code shared.Code, format string, args ...any) error {
	return &client.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

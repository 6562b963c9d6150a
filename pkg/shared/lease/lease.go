// Package lease decides who may act on a screen. A lease is held by an agent
// (a run) or a user (a human); a user lease preempts an agent lease. Leases
// have a TTL, are renewed by use and swept when they expire. The table is
// pure bookkeeping: it tells its owner (the screen manager) about
// preemptions through a callback, and the owner kills the in-flight input.
package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// Kind is who holds a lease.
type Kind string

// The two kinds of holder.
const (
	// Agent is a run acting through the worker's tools.
	Agent Kind = "agent"
	// User is a human taking over; it preempts an agent.
	User Kind = "user"
)

// TTL bounds. A lease asked for without a TTL gets DefaultTTL; longer ones
// are capped at MaxTTL so a forgotten lease frees the screen eventually.
const (
	DefaultTTL = 120 * time.Second
	MinTTL     = 5 * time.Second
	MaxTTL     = time.Hour
	// MaxHolderLen caps the holder label.
	MaxHolderLen = 128
)

// Lease is one grant. ID is a capability: only the holder learns it.
type Lease struct {
	ID        string        `json:"leaseId"`
	Screen    string        `json:"-"`
	Kind      Kind          `json:"kind"`
	Holder    string        `json:"holder"`
	TTL       time.Duration `json:"-"`
	ExpiresAt time.Time     `json:"expiresAt"`
	// NotAfter, when set, caps every renewal: a lease taken through a
	// viewer link never outlives the link.
	NotAfter time.Time `json:"-"`
}

// capped is t, or the lease's NotAfter when that comes first.
func (l *Lease) capped(t time.Time) time.Time {
	if !l.NotAfter.IsZero() && l.NotAfter.Before(t) {
		return l.NotAfter
	}
	return t
}

// Info is the lease without its id, for listings and health.
func (l *Lease) Info() *shared.LeaseInfo {
	if l == nil {
		return nil
	}
	return &shared.LeaseInfo{Kind: string(l.Kind), Holder: l.Holder, ExpiresAt: l.ExpiresAt.UTC()}
}

// Change is what a callback hears about: a lease acquired, released,
// expired, or preempted (Old replaced by New).
type Change struct {
	Screen string
	// What is "acquired", "released", "expired" or "preempted".
	What string
	Old  *Lease
	New  *Lease
}

// Options configures a Table; nil fields get defaults.
type Options struct {
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// OnChange is called after every change, outside the table's lock. A
	// preemption is reported before Acquire returns, so the owner has cut
	// the old holder off by the time the new holder can act.
	OnChange func(Change)
	// NewID makes lease ids (random when nil).
	NewID func() string
}

// Table holds at most one lease per screen.
type Table struct {
	now      func() time.Time
	onChange func(Change)
	newID    func() string

	// mu guards byScreen.
	mu       sync.Mutex
	byScreen map[string]*Lease
}

// New returns an empty table.
func New(o Options) *Table {
	t := &Table{now: o.Now, onChange: o.OnChange, newID: o.NewID, byScreen: map[string]*Lease{}}
	if t.now == nil {
		t.now = time.Now
	}
	if t.onChange == nil {
		t.onChange = func(Change) {}
	}
	if t.newID == nil {
		t.newID = randomID
	}
	return t
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "ls_" + hex.EncodeToString(b)
}

// ClampTTL turns a requested TTL (0 = default) into the one granted.
func ClampTTL(d time.Duration) time.Duration {
	switch {
	case d <= 0:
		return DefaultTTL
	case d < MinTTL:
		return MinTTL
	case d > MaxTTL:
		return MaxTTL
	}
	return d
}

// Acquire grants screen to holder. The rules:
//   - a free screen (or one whose lease expired) goes to anyone;
//   - the same holder asking again with the same kind gets its lease back,
//     renewed, with the new TTL (so a reconnecting client is idempotent);
//   - a user preempts an agent: the agent's lease ends at once;
//   - an agent never takes a screen a user holds (409 user_has_control);
//   - otherwise the screen is held by someone else (409 conflict).
func (t *Table) Acquire(screen string, kind Kind, holder string, ttl time.Duration) (Lease, error) {
	return t.AcquireUntil(screen, kind, holder, ttl, time.Time{})
}

// AcquireUntil is Acquire with a hard end: the lease, and every renewal of
// it, ends at notAfter at the latest (zero: no end).
func (t *Table) AcquireUntil(screen string, kind Kind, holder string, ttl time.Duration, notAfter time.Time) (Lease, error) {
	if kind != Agent && kind != User {
		return Lease{}, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "kind must be agent or user")
	}
	if holder == "" || len(holder) > MaxHolderLen {
		return Lease{}, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "holder must be 1..%d characters", MaxHolderLen)
	}
	ttl = ClampTTL(ttl)
	now := t.now()
	var changes []Change
	t.mu.Lock()
	cur := t.currentLocked(screen, now, &changes)
	var granted Lease
	var err error
	switch {
	case cur == nil:
		l := &Lease{ID: t.newID(), Screen: screen, Kind: kind, Holder: holder, TTL: ttl, NotAfter: notAfter}
		l.ExpiresAt = l.capped(now.Add(ttl))
		t.byScreen[screen] = l
		granted = *l
		changes = append(changes, Change{Screen: screen, What: "acquired", New: cp(l)})
	case cur.Kind == kind && cur.Holder == holder:
		cur.TTL, cur.NotAfter = ttl, notAfter
		cur.ExpiresAt = cur.capped(now.Add(ttl))
		granted = *cur
	case kind == User && cur.Kind == Agent:
		l := &Lease{ID: t.newID(), Screen: screen, Kind: kind, Holder: holder, TTL: ttl, NotAfter: notAfter}
		l.ExpiresAt = l.capped(now.Add(ttl))
		t.byScreen[screen] = l
		granted = *l
		changes = append(changes, Change{Screen: screen, What: "preempted", Old: cp(cur), New: cp(l)})
	case cur.Kind == User:
		err = shared.Errorf(http.StatusConflict, shared.CodeUserHasControl, "a user has control of screen %s", screen)
	default:
		err = shared.Errorf(http.StatusConflict, shared.CodeConflict, "screen %s is held by another %s", screen, cur.Kind)
	}
	t.mu.Unlock()
	t.notify(changes)
	return granted, err
}

// Check verifies that id is the screen's current lease and renews it (use
// renews). A missing or stale id fails with 409 user_has_control when a user
// holds the screen, and 409 lease_required otherwise.
func (t *Table) Check(screen, id string) (Lease, error) {
	now := t.now()
	var changes []Change
	t.mu.Lock()
	cur := t.currentLocked(screen, now, &changes)
	var out Lease
	var err error
	switch {
	case cur != nil && id != "" && cur.ID == id:
		cur.ExpiresAt = cur.capped(now.Add(cur.TTL))
		out = *cur
	case cur != nil && cur.Kind == User:
		err = shared.Errorf(http.StatusConflict, shared.CodeUserHasControl, "a user has control of screen %s", screen)
	default:
		err = shared.Errorf(http.StatusConflict, shared.CodeLeaseRequired, "acting on screen %s needs its current lease", screen)
	}
	t.mu.Unlock()
	t.notify(changes)
	return out, err
}

// RenewUntil renews lease id of screen like Check, but never past
// notAfter (a viewer link's expiry): input on a link that is about to
// expire does not keep the screen beyond it. A lease already running later
// is left as it is.
func (t *Table) RenewUntil(screen, id string, notAfter time.Time) {
	now := t.now()
	var changes []Change
	t.mu.Lock()
	cur := t.currentLocked(screen, now, &changes)
	if cur != nil && cur.ID == id {
		exp := cur.capped(now.Add(cur.TTL))
		if notAfter.Before(exp) {
			exp = notAfter
		}
		if exp.After(cur.ExpiresAt) {
			cur.ExpiresAt = exp
		}
	}
	t.mu.Unlock()
	t.notify(changes)
}

// Current is the screen's unexpired lease, or nil. It only reads (an
// expired lease is removed by Sweep or the next Check), so it is safe to
// call while holding locks that OnChange callbacks take.
func (t *Table) Current(screen string) *Lease {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.byScreen[screen]
	if cur == nil || !now.Before(cur.ExpiresAt) {
		return nil
	}
	return cp(cur)
}

// Held reports whether screen has an unexpired lease (read-only, like
// Current).
func (t *Table) Held(screen string) bool { return t.Current(screen) != nil }

// Release ends lease id on screen. It fails with 404 when id is not the
// screen's current lease (already released, expired or preempted).
func (t *Table) Release(screen, id string) error {
	now := t.now()
	var changes []Change
	t.mu.Lock()
	cur := t.currentLocked(screen, now, &changes)
	found := cur != nil && id != "" && cur.ID == id
	if found {
		delete(t.byScreen, screen)
		changes = append(changes, Change{Screen: screen, What: "released", Old: cp(cur)})
	}
	t.mu.Unlock()
	t.notify(changes)
	if !found {
		return shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such lease on screen %s", screen)
	}
	return nil
}

// Drop ends whatever lease screen has (forgetting a screen).
func (t *Table) Drop(screen string) {
	t.mu.Lock()
	cur := t.byScreen[screen]
	delete(t.byScreen, screen)
	t.mu.Unlock()
	if cur != nil {
		t.notify([]Change{{Screen: screen, What: "released", Old: cp(cur)}})
	}
}

// Sweep removes every expired lease; botd calls it every 5 s.
func (t *Table) Sweep() {
	now := t.now()
	var changes []Change
	t.mu.Lock()
	for screen := range t.byScreen {
		t.currentLocked(screen, now, &changes)
	}
	t.mu.Unlock()
	t.notify(changes)
}

// currentLocked returns screen's lease, removing it (and recording an
// "expired" change) when its time is up.
func (t *Table) currentLocked(screen string, now time.Time, changes *[]Change) *Lease {
	cur := t.byScreen[screen]
	if cur == nil {
		return nil
	}
	if !now.Before(cur.ExpiresAt) {
		delete(t.byScreen, screen)
		*changes = append(*changes, Change{Screen: screen, What: "expired", Old: cp(cur)})
		return nil
	}
	return cur
}

func (t *Table) notify(changes []Change) {
	for _, c := range changes {
		t.onChange(c)
	}
}

func cp(l *Lease) *Lease {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}

// String describes a change for logs (never the lease id).
func (c Change) String() string {
	who := func(l *Lease) string {
		if l == nil {
			return "-"
		}
		return fmt.Sprintf("%s:%s", l.Kind, l.Holder)
	}
	return fmt.Sprintf("%s %s old=%s new=%s", c.Screen, c.What, who(c.Old), who(c.New))
}

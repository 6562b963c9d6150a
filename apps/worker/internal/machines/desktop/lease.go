package desktop

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// The lease rules mirror botd's (apps/botd/internal/lease): one agent or
// one person (kind "user") per screen, a person preempts an agent, an agent
// never takes a screen a person holds, use renews, leases expire. The
// worker holds this table because the sandbox runs no botd.

// Lease kinds.
const (
	KindAgent = "agent"
	KindUser  = "user"
)

// Lease TTL bounds (botd's).
const (
	DefaultTTL   = 120 * time.Second
	MinTTL       = 5 * time.Second
	MaxTTL       = time.Hour
	MaxHolderLen = 128
)

type leaseEntry struct {
	id        string
	kind      string
	holder    string
	ttl       time.Duration
	expiresAt time.Time
	notAfter  time.Time
}

func (l *leaseEntry) capped(t time.Time) time.Time {
	if !l.notAfter.IsZero() && l.notAfter.Before(t) {
		return l.notAfter
	}
	return t
}

func (l *leaseEntry) public() client.Lease {
	return client.Lease{LeaseID: l.id, Kind: l.kind, Holder: l.holder, ExpiresAt: l.expiresAt.UTC()}
}

// leaseChange is what the table reports: "acquired", "released",
// "expired" or "preempted" (old replaced by new).
type leaseChange struct {
	screen   string
	what     string
	old, new *leaseEntry
}

type leaseTable struct {
	now      func() time.Time
	onChange func(leaseChange)

	// mu guards byScreen.
	mu       sync.Mutex
	byScreen map[string]*leaseEntry
}

func newLeaseTable(now func() time.Time, onChange func(leaseChange)) *leaseTable {
	if now == nil {
		now = time.Now
	}
	if onChange == nil {
		onChange = func(leaseChange) {}
	}
	return &leaseTable{now: now, onChange: onChange, byScreen: map[string]*leaseEntry{}}
}

func newLeaseID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "ls_" + hex.EncodeToString(b)
}

func clampTTL(d time.Duration) time.Duration {
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

func errUserHasControl(screen string) error {
	return apiErr(http.StatusConflict, shared.CodeUserHasControl, "a user has control of screen %s", screen)
}

// acquire grants screen to holder by botd's rules: a free (or expired)
// screen goes to anyone; the same holder and kind get their lease back,
// renewed; a user preempts an agent; an agent never takes a user's screen
// (409 user_has_control); otherwise 409 conflict.
func (t *leaseTable) acquire(screen, kind, holder string, ttl time.Duration, notAfter time.Time) (client.Lease, error) {
	if kind != KindAgent && kind != KindUser {
		return client.Lease{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "kind must be agent or user")
	}
	if holder == "" || len(holder) > MaxHolderLen {
		return client.Lease{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "holder must be 1..%d characters", MaxHolderLen)
	}
	ttl = clampTTL(ttl)
	now := t.now()
	var changes []leaseChange
	t.mu.Lock()
	cur := t.currentLocked(screen, now, &changes)
	var granted client.Lease
	var err error
	switch {
	case cur == nil:
		l := &leaseEntry{id: newLeaseID(), kind: kind, holder: holder, ttl: ttl, notAfter: notAfter}
		l.expiresAt = l.capped(now.Add(ttl))
		t.byScreen[screen] = l
		granted = l.public()
		changes = append(changes, leaseChange{screen: screen, what: "acquired", new: cp(l)})
	case cur.kind == kind && cur.holder == holder:
		cur.ttl, cur.notAfter = ttl, notAfter
		cur.expiresAt = cur.capped(now.Add(ttl))
		granted = cur.public()
	case kind == KindUser && cur.kind == KindAgent:
		l := &leaseEntry{id: newLeaseID(), kind: kind, holder: holder, ttl: ttl, notAfter: notAfter}
		l.expiresAt = l.capped(now.Add(ttl))
		t.byScreen[screen] = l
		granted = l.public()
		changes = append(changes, leaseChange{screen: screen, what: "preempted", old: cp(cur), new: cp(l)})
	case cur.kind == KindUser:
		err = errUserHasControl(screen)
	default:
		err = apiErr(http.StatusConflict, shared.CodeConflict, "screen %s is held by another %s", screen, cur.kind)
	}
	t.mu.Unlock()
	t.notify(changes)
	return granted, err
}

// check verifies that id is the screen's current lease and renews it. A
// missing or stale id is 409 user_has_control when a user holds the
// screen, 409 lease_required otherwise.
func (t *leaseTable) check(screen, id string) error {
	now := t.now()
	var changes []leaseChange
	t.mu.Lock()
	cur := t.currentLocked(screen, now, &changes)
	var err error
	switch {
	case cur != nil && id != "" && cur.id == id:
		cur.expiresAt = cur.capped(now.Add(cur.ttl))
	case cur != nil && cur.kind == KindUser:
		err = errUserHasControl(screen)
	default:
		err = apiErr(http.StatusConflict, shared.CodeLeaseRequired, "acting on screen %s needs its current lease", screen)
	}
	t.mu.Unlock()
	t.notify(changes)
	return err
}

// current is the screen's unexpired lease, or nil.
func (t *leaseTable) current(screen string) *leaseEntry {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.byScreen[screen]
	if cur == nil || !now.Before(cur.expiresAt) {
		return nil
	}
	return cp(cur)
}

// release ends lease id on screen: 404 when it is not the current one.
func (t *leaseTable) release(screen, id string) error {
	now := t.now()
	var changes []leaseChange
	t.mu.Lock()
	cur := t.currentLocked(screen, now, &changes)
	found := cur != nil && id != "" && cur.id == id
	if found {
		delete(t.byScreen, screen)
		changes = append(changes, leaseChange{screen: screen, what: "released", old: cp(cur)})
	}
	t.mu.Unlock()
	t.notify(changes)
	if !found {
		return apiErr(http.StatusNotFound, shared.CodeNotFound, "no such lease on screen %s", screen)
	}
	return nil
}

// drop ends whatever lease screen has (forgetting a screen).
func (t *leaseTable) drop(screen string) {
	t.mu.Lock()
	cur := t.byScreen[screen]
	delete(t.byScreen, screen)
	t.mu.Unlock()
	if cur != nil {
		t.notify([]leaseChange{{screen: screen, what: "released", old: cp(cur)}})
	}
}

// sweep removes every expired lease.
func (t *leaseTable) sweep() {
	now := t.now()
	var changes []leaseChange
	t.mu.Lock()
	for s := range t.byScreen {
		t.currentLocked(s, now, &changes)
	}
	t.mu.Unlock()
	t.notify(changes)
}

func (t *leaseTable) currentLocked(screen string, now time.Time, changes *[]leaseChange) *leaseEntry {
	cur := t.byScreen[screen]
	if cur == nil {
		return nil
	}
	if !now.Before(cur.expiresAt) {
		delete(t.byScreen, screen)
		*changes = append(*changes, leaseChange{screen: screen, what: "expired", old: cp(cur)})
		return nil
	}
	return cur
}

func (t *leaseTable) notify(changes []leaseChange) {
	for _, c := range changes {
		t.onChange(c)
	}
}

func cp(l *leaseEntry) *leaseEntry {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}

func (l *leaseEntry) info() *shared.LeaseInfo {
	if l == nil {
		return nil
	}
	return &shared.LeaseInfo{Kind: l.kind, Holder: l.holder, ExpiresAt: l.expiresAt.UTC()}
}

// apiErr is the error callers branch on: botd's envelope as a *client.Error.
func apiErr(status int, code shared.Code, format string, args ...any) error {
	return &client.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

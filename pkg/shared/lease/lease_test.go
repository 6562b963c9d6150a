package lease

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) advance(d time.Duration) { c.now = c.now.Add(d) }

func newTable(t *testing.T) (*Table, *clock, *[]string) {
	t.Helper()
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	var log []string
	n := 0
	tb := New(Options{Now: c.Now, OnChange: func(ch Change) { log = append(log, ch.String()) }, NewID: func() string { n++; return fmt.Sprintf("L%d", n) }})
	return tb, c, &log
}

func code(err error) shared.Code {
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func TestAcquireRules(t *testing.T) {
	type req struct {
		kind   Kind
		holder string
	}
	for _, tc := range []struct {
		name      string
		first     req
		second    req
		wantCode  shared.Code
		wantSame  bool // the second gets the first's lease back
		wantEvent string
	}{
		{"agent then user preempts", req{Agent, "run1"}, req{User, "ann"}, "", false, "s preempted old=agent:run1 new=user:ann"},
		{"user then agent refused", req{User, "ann"}, req{Agent, "run1"}, shared.CodeUserHasControl, false, ""},
		{"agent then other agent refused", req{Agent, "run1"}, req{Agent, "run2"}, shared.CodeConflict, false, ""},
		{"user then other user refused", req{User, "ann"}, req{User, "bob"}, shared.CodeUserHasControl, false, ""},
		{"same agent again is idempotent", req{Agent, "run1"}, req{Agent, "run1"}, "", true, ""},
		{"same user again is idempotent", req{User, "ann"}, req{User, "ann"}, "", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, _, log := newTable(t)
			a, err := tb.Acquire("s", tc.first.kind, tc.first.holder, 0)
			require.NoError(t, err)
			b, err := tb.Acquire("s", tc.second.kind, tc.second.holder, 0)
			require.Equal(t, tc.wantCode, code(err))
			if tc.wantCode != "" {
				require.Equal(t, a.ID, tb.Current("s").ID, "a refused request leaves the lease alone")
				return
			}
			require.Equal(t, tc.wantSame, a.ID == b.ID)
			require.Equal(t, b.ID, tb.Current("s").ID)
			if tc.wantEvent != "" {
				require.Contains(t, *log, tc.wantEvent)
			}
		})
	}
}

func TestAcquireValidates(t *testing.T) {
	tb, _, _ := newTable(t)
	_, err := tb.Acquire("s", "robot", "x", 0)
	require.Equal(t, shared.CodeBadRequest, code(err))
	_, err = tb.Acquire("s", Agent, "", 0)
	require.Equal(t, shared.CodeBadRequest, code(err))
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		held  Kind // "" = nobody
		id    string
		want  shared.Code
		renew bool
	}{
		{"current agent lease", Agent, "L1", "", true},
		{"current user lease", User, "L1", "", true},
		{"stale id, agent holds", Agent, "L9", shared.CodeLeaseRequired, false},
		{"missing id, agent holds", Agent, "", shared.CodeLeaseRequired, false},
		{"stale id, user holds", User, "L9", shared.CodeUserHasControl, false},
		{"nobody holds", "", "L1", shared.CodeLeaseRequired, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, c, _ := newTable(t)
			if tc.held != "" {
				_, err := tb.Acquire("s", tc.held, "h", 60*time.Second)
				require.NoError(t, err)
			}
			c.advance(30 * time.Second)
			l, err := tb.Check("s", tc.id)
			require.Equal(t, tc.want, code(err))
			if tc.renew {
				require.Equal(t, c.now.Add(60*time.Second), l.ExpiresAt, "use renews")
			}
		})
	}
}

func TestExpiryAndSweep(t *testing.T) {
	tb, c, log := newTable(t)
	l, err := tb.Acquire("s", Agent, "run1", 10*time.Second)
	require.NoError(t, err)
	c.advance(9 * time.Second)
	_, err = tb.Check("s", l.ID) // renewed to now+10s
	require.NoError(t, err)
	c.advance(9 * time.Second)
	require.True(t, tb.Held("s"))
	c.advance(time.Second)
	tb.Sweep()
	require.False(t, tb.Held("s"))
	require.Contains(t, *log, "s expired old=agent:run1 new=-")
	_, err = tb.Check("s", l.ID)
	require.Equal(t, shared.CodeLeaseRequired, code(err))
	// A free screen goes to anyone, an agent included.
	_, err = tb.Acquire("s", Agent, "run2", 0)
	require.NoError(t, err)
}

func TestRelease(t *testing.T) {
	tb, _, log := newTable(t)
	l, err := tb.Acquire("s", Agent, "run1", 0)
	require.NoError(t, err)
	require.Equal(t, shared.CodeNotFound, code(tb.Release("s", "nope")))
	require.NoError(t, tb.Release("s", l.ID))
	require.Equal(t, shared.CodeNotFound, code(tb.Release("s", l.ID)))
	require.False(t, tb.Held("s"))
	require.Equal(t, []string{"s acquired old=- new=agent:run1", "s released old=agent:run1 new=-"}, *log)
}

func TestClampTTL(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, DefaultTTL}, {-time.Second, DefaultTTL}, {time.Second, MinTTL},
		{time.Minute, time.Minute}, {10 * time.Hour, MaxTTL},
	} {
		require.Equal(t, tc.want, ClampTTL(tc.in), "%v", tc.in)
	}
}

// A lease taken through a viewer link never outlives the link: neither use
// (Check) nor the link's own input (RenewUntil) renews it past the end.
func TestLeaseNeverOutlivesItsLink(t *testing.T) {
	tb, c, _ := newTable(t)
	end := c.now.Add(90 * time.Second)
	l, err := tb.AcquireUntil("s", User, "ann", 60*time.Second, end)
	require.NoError(t, err)
	require.Equal(t, c.now.Add(60*time.Second), l.ExpiresAt)
	c.advance(50 * time.Second)
	l, err = tb.Check("s", l.ID)
	require.NoError(t, err)
	require.Equal(t, end, l.ExpiresAt, "use renews, but only up to the link's end")
	c.advance(40 * time.Second)
	require.Nil(t, tb.Current("s"), "the lease ended with the link")

	// An unbounded lease renewed by a link's input stops at that link's end.
	l, err = tb.Acquire("s", User, "bob", 60*time.Second)
	require.NoError(t, err)
	linkEnd := c.now.Add(10 * time.Second)
	c.advance(5 * time.Second)
	tb.RenewUntil("s", l.ID, linkEnd)
	require.Equal(t, l.ExpiresAt, tb.Current("s").ExpiresAt, "a renewal capped before the current expiry shortens nothing")
	c.advance(50 * time.Second)
	tb.RenewUntil("s", l.ID, c.now.Add(30*time.Second))
	require.Equal(t, c.now.Add(30*time.Second), tb.Current("s").ExpiresAt, "renewed, but to the link's end, not a full TTL")
}

package cdp

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is a settable clock for tickets.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestTickets: a ticket works once, for what it was minted for, until it
// expires; it is spent by its first presentation whatever follows; the
// set holds at most MaxTickets live ones and sweeps the expired.
func TestTickets(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	ts := &Tickets{Now: c.Now}
	mint := func(computer, bot, screen string) string {
		t.Helper()
		tok, exp, err := ts.Mint(computer, bot, screen)
		require.NoError(t, err)
		require.Len(t, tok, 43)
		require.Equal(t, c.Now().Add(TicketTTL), exp)
		return tok
	}
	rows := []struct {
		name string
		// The ticket is minted for c1, alice, alice and presented after
		// after, for computer, bot and screen.
		after                 time.Duration
		computer, bot, screen string
		ok                    bool
	}{
		{"its own computer, bot and screen", 0, "c1", "alice", "alice", true},
		{"just before it expires", TicketTTL - time.Nanosecond, "c1", "alice", "alice", true},
		{"expired", TicketTTL, "c1", "alice", "alice", false},
		{"another computer", 0, "c2", "alice", "alice", false},
		{"another bot", 0, "c1", "bob", "alice", false},
		{"another screen", 0, "c1", "alice", "alice-2", false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			tok := mint("c1", "alice", "alice")
			c.Add(r.after)
			err := ts.Redeem(tok, r.computer, r.bot, r.screen)
			if r.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrBadTicket)
			}
			// Spent either way: its own binding, in time, is refused now.
			c.Add(-r.after)
			require.ErrorIs(t, ts.Redeem(tok, "c1", "alice", "alice"), ErrBadTicket, "a ticket works once")
		})
	}
	require.ErrorIs(t, ts.Redeem("", "c1", "alice", "alice"), ErrBadTicket)
	require.ErrorIs(t, ts.Redeem("not-a-ticket-but-43-characters-long-xxxxxxx", "c1", "alice", "alice"), ErrBadTicket)

	// Bounded: MaxTickets live, then refused until they expire.
	for range MaxTickets - ts.Live() {
		mint("c1", "alice", "alice")
	}
	_, _, err := ts.Mint("c1", "alice", "alice")
	require.ErrorIs(t, err, ErrTooMany)
	c.Add(TicketTTL)
	mint("c1", "alice", "alice")
	require.Equal(t, 1, ts.Live(), "the expired were swept")
}

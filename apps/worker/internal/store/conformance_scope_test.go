package store

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConformanceOneLiveComputerPerScope: the store, not only the worker's
// code, keeps at most one live computer per scope (seed 003) — two workers
// may share one Postgres. A second computer of a team, of a session or of
// the account is refused with ErrScopeTaken (an ErrExists); other scopes
// are not; once the first is destroyed the scope takes a new one; of
// concurrent creates for one scope exactly one wins.
func TestConformanceOneLiveComputerPerScope(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		mk := func(id, kind, scopeID string) Computer {
			c := computer(id)
			c.ScopeKind, c.ScopeID = kind, scopeID
			return c
		}
		require.NoError(t, s.CreateComputer(ctx, mk("t1", ScopeTeam, "blue")))
		err := s.CreateComputer(ctx, mk("t2", ScopeTeam, "blue"))
		require.ErrorIs(t, err, ErrScopeTaken)
		require.ErrorIs(t, err, ErrExists)
		require.ErrorIs(t, s.CreateComputer(ctx, mk("t1", ScopeTeam, "green")), ErrExists, "an id taken is still ErrExists")
		require.NotErrorIs(t, s.CreateComputer(ctx, mk("t1", ScopeTeam, "green")), ErrScopeTaken)
		require.NoError(t, s.CreateComputer(ctx, mk("g1", ScopeTeam, "green")), "another team")
		require.NoError(t, s.CreateComputer(ctx, mk("s1", ScopeSession, "blue")), "a session named like a team is another scope")
		require.ErrorIs(t, s.CreateComputer(ctx, mk("s2", ScopeSession, "blue")), ErrScopeTaken, "one computer per session")
		require.NoError(t, s.CreateComputer(ctx, mk("a1", ScopeAccount, "")))
		require.ErrorIs(t, s.CreateComputer(ctx, mk("a2", ScopeAccount, "")), ErrScopeTaken, "one account computer")
		_, err = s.GetComputer(ctx, "t2")
		require.ErrorIs(t, err, ErrNotFound, "the refused computer was not recorded")

		// Every state but destroyed holds the scope: error, stopped, destroying.
		for _, st := range []string{StateError, StateStopped, StateDestroying} {
			_, err := s.UpdateComputer(ctx, "t1", StateUpdate{Observed: ptr(st)})
			require.NoError(t, err)
			require.ErrorIs(t, s.CreateComputer(ctx, mk("t3", ScopeTeam, "blue")), ErrScopeTaken, "while %s", st)
		}
		_, err = s.UpdateComputer(ctx, "t1", StateUpdate{Desired: ptr(StateDestroyed), Observed: ptr(StateDestroyed)})
		require.NoError(t, err)
		require.NoError(t, s.CreateComputer(ctx, mk("t3", ScopeTeam, "blue")), "a destroyed computer frees its scope")
		// The destroyed one cannot come back beside the new one.
		_, err = s.UpdateComputer(ctx, "t1", StateUpdate{Observed: ptr(StateError)})
		require.ErrorIs(t, err, ErrExists)

		// Concurrent creates for one scope: exactly one wins.
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.CreateComputer(ctx, mk(fmt.Sprintf("race%d", i), ScopeTeam, "race"))
			}()
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				continue
			}
			require.ErrorIs(t, err, ErrScopeTaken, "create %d", i)
		}
		require.Equal(t, 1, won, "exactly one of %d concurrent creates wins: %v", n, errs)
		live := 0
		list, err := s.ListComputers(ctx)
		require.NoError(t, err)
		for _, c := range list {
			if c.ScopeKind == ScopeTeam && c.ScopeID == "race" {
				live++
			}
		}
		require.Equal(t, 1, live)
	})
}

// TestConformanceRemoveBot: a removed bot is gone from its computer only;
// a computer has at most one sole bot.
func TestConformanceRemoveBot(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		require.NoError(t, s.CreateComputer(ctx, computer("c1")))
		require.NoError(t, s.CreateComputer(ctx, computer("c2")))
		for _, c := range []string{"c1", "c2"} {
			require.NoError(t, s.AddBot(ctx, Bot{ComputerID: c, ID: "alice", TeamID: "t"}))
		}
		require.NoError(t, s.RemoveBot(ctx, "c1", "alice"))
		require.ErrorIs(t, s.RemoveBot(ctx, "c1", "alice"), ErrNotFound)
		bots, err := s.ListBots(ctx, "c1")
		require.NoError(t, err)
		require.Empty(t, bots)
		bots, err = s.ListBots(ctx, "c2")
		require.NoError(t, err)
		require.Len(t, bots, 1)
		require.NoError(t, s.AddBot(ctx, Bot{ComputerID: "c1", ID: "alice", TeamID: "t"}), "added again")

		// A Private computer's bot is its sole bot: the store takes no
		// second one, whoever asks; once it is removed another may come.
		require.NoError(t, s.CreateComputer(ctx, computer("p1")))
		require.NoError(t, s.AddBot(ctx, Bot{ComputerID: "p1", ID: "solo", TeamID: "t", Sole: true}))
		require.ErrorIs(t, s.AddBot(ctx, Bot{ComputerID: "p1", ID: "other", TeamID: "t", Sole: true}), ErrExists)
		bots, err = s.ListBots(ctx, "p1")
		require.NoError(t, err)
		require.Len(t, bots, 1)
		require.True(t, bots[0].Sole)
		require.NoError(t, s.RemoveBot(ctx, "p1", "solo"))
		require.NoError(t, s.AddBot(ctx, Bot{ComputerID: "p1", ID: "other", TeamID: "t", Sole: true}))
	})
}

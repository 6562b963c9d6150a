package computers

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

func newService(t *testing.T) (*Service, store.Store) {
	dir := t.TempDir()
	st, err := store.OpenSQLite(t.Context(), filepath.Join(dir, "worker.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	sealer, err := secret.LoadOrCreate(filepath.Join(dir, "secret.key"))
	require.NoError(t, err)
	s, err := New(Options{Store: st, Providers: map[string]providers.Provider{providers.KindAttach: providers.NewAttach()},
		DefaultProvider: providers.KindAttach, Sealer: sealer, Log: zerolog.Nop()})
	require.NoError(t, err)
	return s, st
}

func TestUnknownDefaultProvider(t *testing.T) {
	_, err := New(Options{Providers: map[string]providers.Provider{providers.KindAttach: providers.NewAttach()}, DefaultProvider: "e2b"})
	require.ErrorIs(t, err, providers.ErrUnknownKind)
	require.ErrorContains(t, err, `"e2b"`)
}

// TestNothingStaysTransitional: a transitional state past its deadline
// becomes error with the reason; one within it is left alone; a computer of
// a kind this worker lacks is error at reconcile, not a crash.
func TestNothingStaysTransitional(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	mk := func(id, observed, provider string, deadline time.Time) {
		require.NoError(t, st.CreateComputer(ctx, store.Computer{ID: id, ScopeKind: store.ScopeTeam, ScopeID: id, Kind: KindTeam,
			Provider: provider, ProviderRef: "{}", DesiredState: store.StateStopped, ObservedState: observed, StateDeadline: deadline, HomeKey: id}))
	}
	mk("late", store.StateStopping, providers.KindAttach, time.Now().Add(-time.Second))
	mk("ontime", store.StateStopping, providers.KindAttach, time.Now().Add(time.Hour))
	mk("settled", store.StateStopped, providers.KindAttach, time.Time{})
	require.NoError(t, s.SweepDeadlines(ctx))
	got := func(id string) store.Computer {
		c, err := st.GetComputer(ctx, id)
		require.NoError(t, err)
		return c
	}
	require.Equal(t, store.StateError, got("late").ObservedState)
	require.Contains(t, got("late").LastError, "stuck in stopping past its deadline")
	require.Equal(t, store.StateStopped, got("late").DesiredState, "desired is kept")
	require.Equal(t, store.StateStopping, got("ontime").ObservedState)
	require.Equal(t, store.StateStopped, got("settled").ObservedState)

	require.NoError(t, st.CreateComputer(ctx, store.Computer{ID: "alien", ScopeKind: store.ScopeTeam, ScopeID: "alien", Kind: KindTeam,
		Provider: "kubernetes", ProviderRef: "{}", DesiredState: store.StateRunning, ObservedState: store.StateRunning, HomeKey: "alien"}))
	require.NoError(t, st.CreateComputer(ctx, store.Computer{ID: "halfmade", ScopeKind: store.ScopeTeam, ScopeID: "halfmade", Kind: KindTeam,
		Provider: providers.KindAttach, DesiredState: store.StateRunning, ObservedState: store.StateCreating, HomeKey: "halfmade"}))
	require.NoError(t, s.Reconcile(ctx))
	require.Equal(t, store.StateError, got("alien").ObservedState)
	require.Contains(t, got("alien").LastError, "no such provider")
	require.Equal(t, store.StateError, got("halfmade").ObservedState)
	require.Contains(t, got("halfmade").LastError, "while this computer was being created")
}

// TestGoneCallerSetsNoState: a connect whose caller went away (an event
// follower stopped, a request cancelled) leaves the computer's state alone:
// another caller may have just replaced its machine, and the gone caller
// still held the ref read before it waited.
func TestGoneCallerSetsNoState(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	require.NoError(t, st.CreateComputer(ctx, store.Computer{ID: "c1", ScopeKind: store.ScopeTeam, ScopeID: "t", Kind: KindTeam,
		Provider: providers.KindAttach, ProviderRef: "{}", DesiredState: store.StateRunning, ObservedState: store.StateRunning, HomeKey: "c1"}))
	c, err := st.GetComputer(ctx, "c1")
	require.NoError(t, err)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.connectWithin(gone, c, time.Minute)
	require.Error(t, err)
	after, err := st.GetComputer(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, store.StateRunning, after.ObservedState, "last error: %s", after.LastError)
	require.Empty(t, after.LastError)
}

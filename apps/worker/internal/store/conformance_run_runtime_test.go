package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConformanceRunRuntime: a run's runtime is kept and listed; a run
// stored without one is "machine" (every run before runtimes existed ran
// Codex in the machine) (issue 30).
func TestConformanceRunRuntime(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		require.NoError(t, s.CreateComputer(ctx, computer("c1")))
		for i, rt := range []string{"worker", ""} {
			key := []string{"team:t/a", "team:t/b"}[i]
			l, err := s.AcquireLease(ctx, key, "r", time.Minute)
			require.NoError(t, err)
			id := []string{"r1", "r2"}[i]
			require.NoError(t, s.CreateRun(ctx, Run{ID: id, ComputerID: "c1", BotID: "a", LeaseKey: key, Epoch: l.Epoch, State: "queued", Runtime: rt}))
		}
		got, err := s.GetRun(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, "worker", got.Runtime)
		got, err = s.GetRun(ctx, "r2")
		require.NoError(t, err)
		require.Equal(t, "machine", got.Runtime)
		list, err := s.ListRuns(ctx, "c1", "queued")
		require.NoError(t, err)
		require.Len(t, list, 2)
		for _, r := range list {
			require.Equal(t, map[string]string{"r1": "worker", "r2": "machine"}[r.ID], r.Runtime)
		}
	})
}

package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConformanceComputerEvaluation: an evaluation computer (migration
// 00012) stays one through Get, List and updates; others are not.
func TestConformanceComputerEvaluation(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		c := computer("eval")
		c.Evaluation = true
		require.NoError(t, s.CreateComputer(ctx, c))
		require.NoError(t, s.CreateComputer(ctx, computer("plain")))
		got, err := s.GetComputer(ctx, "eval")
		require.NoError(t, err)
		require.True(t, got.Evaluation)
		got, err = s.UpdateComputer(ctx, "eval", StateUpdate{Observed: ptr(StateRunning), ProviderRef: ptr("ref2")})
		require.NoError(t, err)
		require.True(t, got.Evaluation, "an update keeps it")
		list, err := s.ListComputers(ctx)
		require.NoError(t, err)
		byID := map[string]bool{}
		for _, l := range list {
			byID[l.ID] = l.Evaluation
		}
		require.Equal(t, map[string]bool{"eval": true, "plain": false}, byID)
	})
}

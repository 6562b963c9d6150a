package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConformanceComputerTemplate: a computer's template (migration 00009)
// is kept as created, read back by Get and List, and changed only by an
// update that names it.
func TestConformanceComputerTemplate(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		c := computer("tpl")
		c.Provider, c.Template = "e2b", "desktop"
		require.NoError(t, s.CreateComputer(ctx, c))
		require.NoError(t, s.CreateComputer(ctx, computer("plain")))
		got, err := s.GetComputer(ctx, "tpl")
		require.NoError(t, err)
		require.Equal(t, "desktop", got.Template)
		got, err = s.UpdateComputer(ctx, "tpl", StateUpdate{Observed: ptr(StateRunning), ProviderRef: ptr("ref2")})
		require.NoError(t, err)
		require.Equal(t, "desktop", got.Template, "an update that does not name the template keeps it")
		list, err := s.ListComputers(ctx)
		require.NoError(t, err)
		byID := map[string]string{}
		for _, l := range list {
			byID[l.ID] = l.Template
		}
		require.Equal(t, map[string]string{"tpl": "desktop", "plain": ""}, byID)
		got, err = s.UpdateComputer(ctx, "tpl", StateUpdate{Provider: ptr("docker"), Template: ptr("")})
		require.NoError(t, err)
		require.Equal(t, "", got.Template)
		require.Equal(t, "docker", got.Provider)
	})
}

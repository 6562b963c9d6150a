package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConformanceSecretVisible: a secret's visible flag is kept, replaced
// with the secret, and listed; a secret stored without it is not visible
// (issue 36 row 2).
func TestConformanceSecretVisible(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		require.NoError(t, s.CreateComputer(ctx, computer("c1")))
		_, err := s.PutSecret(ctx, Secret{ComputerID: "c1", Name: "pw", Origin: "https://a.test", Value: []byte{1}})
		require.NoError(t, err)
		_, err = s.PutSecret(ctx, Secret{ComputerID: "c1", Name: "otp", Origin: "https://a.test", Value: []byte{2}, Visible: true})
		require.NoError(t, err)
		got, err := s.GetSecret(ctx, "c1", "pw")
		require.NoError(t, err)
		require.False(t, got.Visible)
		got, err = s.GetSecret(ctx, "c1", "otp")
		require.NoError(t, err)
		require.True(t, got.Visible)
		list, err := s.ListSecrets(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.True(t, list[0].Visible, "otp")
		require.False(t, list[1].Visible, "pw")

		// Replacing a secret replaces its flag.
		replaced, err := s.PutSecret(ctx, Secret{ComputerID: "c1", Name: "otp", Origin: "https://a.test", Value: []byte{3}})
		require.NoError(t, err)
		require.True(t, replaced)
		got, err = s.GetSecret(ctx, "c1", "otp")
		require.NoError(t, err)
		require.False(t, got.Visible)
		_, err = s.PutSecret(ctx, Secret{ComputerID: "c1", Name: "pw", Origin: "https://a.test", Value: []byte{4}, Visible: true})
		require.NoError(t, err)
		got, err = s.GetSecret(ctx, "c1", "pw")
		require.NoError(t, err)
		require.True(t, got.Visible)
	})
}

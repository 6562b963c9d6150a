package capability

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMintCheckAdoptForget(t *testing.T) {
	s := NewSet()
	a, err := s.Mint("c1")
	require.NoError(t, err)
	b, err := s.Mint("c2")
	require.NoError(t, err)
	require.Len(t, a, 43, "32 bytes, base64url")
	require.True(t, s.Check("c1", a))
	require.False(t, s.Check("c1", b), "another computer's capability")
	require.False(t, s.Check("c3", a), "unknown computer")
	require.False(t, s.Check("c1", ""))
	require.False(t, s.Check("c3", ""), "empty never matches an unknown id's zero hash")
	a2, err := s.Mint("c1") // adopt
	require.NoError(t, err)
	require.NotEqual(t, a, a2)
	require.False(t, s.Check("c1", a), "the old value stops working")
	require.True(t, s.Check("c1", a2))
	s.Forget("c1")
	require.False(t, s.Check("c1", a2))
}

func TestLookup(t *testing.T) {
	s := NewSet()
	a, err := s.Mint("c1")
	require.NoError(t, err)
	b, err := s.Mint("c2")
	require.NoError(t, err)
	id, ok := s.Lookup(a)
	require.True(t, ok)
	require.Equal(t, "c1", id)
	id, ok = s.Lookup(b)
	require.True(t, ok)
	require.Equal(t, "c2", id)
	for _, bad := range []string{"", "x", a + "x"} {
		_, ok = s.Lookup(bad)
		require.False(t, ok, "%q", bad)
	}
	a2, err := s.Mint("c1") // adopt
	require.NoError(t, err)
	_, ok = s.Lookup(a)
	require.False(t, ok, "the old value stops working")
	id, ok = s.Lookup(a2)
	require.True(t, ok)
	require.Equal(t, "c1", id)
	s.Forget("c1")
	_, ok = s.Lookup(a2)
	require.False(t, ok)
}

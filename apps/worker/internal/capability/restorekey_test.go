package capability

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRestoreKeys: a restore key opens only its own scope's kept home,
// once; a claim given back works again unless a newer key replaced it;
// Forget drops it.
func TestRestoreKeys(t *testing.T) {
	k := NewRestoreKeys()
	key, err := k.Mint("team:victim", "c_old")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(key), 43, "32 random bytes")

	_, ok := k.Take("team:victim", "")
	require.False(t, ok, "no key")
	_, ok = k.Take("team:victim", key+"x")
	require.False(t, ok, "a wrong key")
	_, ok = k.Take("team:other", key)
	require.False(t, ok, "another scope's key")
	_, ok = k.Take("session:victim", key)
	require.False(t, ok, "the same name, another kind of scope")

	cl, ok := k.Take("team:victim", key)
	require.True(t, ok)
	require.Equal(t, "c_old", cl.Home)
	_, ok = k.Take("team:victim", key)
	require.False(t, ok, "taken: used up until given back")
	k.Release(cl)
	cl, ok = k.Take("team:victim", key)
	require.True(t, ok, "given back: works again")

	// A newer key minted meanwhile wins over the one given back.
	newer, err := k.Mint("team:victim", "c_old")
	require.NoError(t, err)
	k.Release(cl)
	_, ok = k.Take("team:victim", key)
	require.False(t, ok, "the older key was replaced")
	_, ok = k.Take("team:victim", newer)
	require.True(t, ok)

	again, err := k.Mint("team:victim", "c_old")
	require.NoError(t, err)
	k.Forget("c_old")
	_, ok = k.Take("team:victim", again)
	require.False(t, ok, "forgotten with its home")
}

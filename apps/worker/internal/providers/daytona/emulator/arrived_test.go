package emulator

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAllArrived: a file read out of a sandbox counts only when every byte
// its script counted arrived; a short read (the engine closed the stream
// early), a missing count or a count with other words is not.
func TestAllArrived(t *testing.T) {
	rest, ok := allArrived([]byte("abcde"), []byte("5\n"))
	require.True(t, ok)
	require.Empty(t, rest)

	rest, ok = allArrived([]byte("abcde"), []byte("scrot: a warning\n5\n"))
	require.True(t, ok, "what the script said before its count is kept")
	require.Equal(t, "scrot: a warning", string(rest))

	_, ok = allArrived([]byte("abc"), []byte("5\n"))
	require.False(t, ok, "3 of 5 bytes arrived")
	_, ok = allArrived([]byte("abcde"), nil)
	require.False(t, ok, "no count arrived")
	_, ok = allArrived([]byte("abcde"), []byte("5 bytes\n"))
	require.False(t, ok, "not a count")
	rest, ok = allArrived(nil, []byte("0\n"))
	require.True(t, ok, "an empty file")
	require.Empty(t, rest)
}

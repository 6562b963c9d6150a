package codexrpc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSizeAndClip(t *testing.T) {
	for n, want := range map[int64]string{128: "128 bytes", 4 << 20: "4 MiB", 16<<20 + 60: "16 MiB", 3<<19 + 1: "1.5 MiB", 300 << 10: "300 KiB", 64 << 30: "64 GiB"} {
		require.Equal(t, want, Size(n))
	}
	require.Equal(t, "abc", Clip("abc", 3))
	require.Equal(t, "ab"+Truncated, Clip("abc", 2))
	// Never half a character: "é" is two bytes.
	require.Equal(t, "a"+Truncated, Clip("aé", 2))
}

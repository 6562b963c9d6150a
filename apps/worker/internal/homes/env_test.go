package homes

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// COMPUTER_HOME_MAX_BYTES may not exceed what an import accepts (a
// checkpoint above it could be stored and never restored).
func TestHomeLimits(t *testing.T) {
	get := func(env map[string]string) (int64, int64, error) {
		return LimitsFromEnv(func(k string) string { return env[k] })
	}
	max, free, err := get(nil)
	require.NoError(t, err)
	require.Equal(t, int64(DefaultMaxBytes), max)
	require.Equal(t, int64(DefaultMinFree), free)
	max, free, err = get(map[string]string{"COMPUTER_HOME_MAX_BYTES": "1048576", "COMPUTER_HOME_MIN_FREE_BYTES": "0"})
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), max)
	require.Zero(t, free)
	for _, bad := range []map[string]string{
		{"COMPUTER_HOME_MAX_BYTES": "53687091201"}, // one byte over the import's 50 GiB
		{"COMPUTER_HOME_MAX_BYTES": "0"},
		{"COMPUTER_HOME_MAX_BYTES": "10G"},
		{"COMPUTER_HOME_MIN_FREE_BYTES": "-1"},
	} {
		_, _, err := get(bad)
		require.Error(t, err, "%v", bad)
	}
	_, _, err = get(map[string]string{"COMPUTER_HOME_MAX_BYTES": "53687091200"})
	require.NoError(t, err, "exactly what an import accepts")
}

package computers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParsePool: WORKER_POOL's form, and the message each bad value gets.
func TestParsePool(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]int
		err  string
	}{
		{in: "", want: map[string]int{}},
		{in: "docker=2,local=1", want: map[string]int{"docker": 2, "local": 1}},
		{in: " local = 3 ", want: map[string]int{"local": 3}},
		{in: "local=0", want: map[string]int{"local": 0}},
		{in: "local", err: `"local" is not kind=count`},
		{in: "local=", err: `is not kind=count`},
		{in: "=2", err: `is not kind=count`},
		{in: "local=two", err: "local=two: want a whole number from 0 to 16"},
		{in: "local=-1", err: "want a whole number from 0 to 16"},
		{in: "local=17", err: "want a whole number from 0 to 16"},
		{in: "local=1,local=2", err: "local is given twice"},
		{in: "e2b=1", err: `"e2b" cannot be pooled (pooled kinds: local, docker, kubernetes)`},
		{in: "attach=1", err: `"attach" cannot be pooled`},
		{in: "docker=1;local=1", err: "want a whole number"},
	} {
		got, err := ParsePool(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "WORKER_POOL=%q", tc.in)
			require.ErrorContains(t, err, "WORKER_POOL=", "the message names the variable")
			continue
		}
		require.NoError(t, err, "WORKER_POOL=%q", tc.in)
		require.Equal(t, tc.want, got, "WORKER_POOL=%q", tc.in)
	}
}

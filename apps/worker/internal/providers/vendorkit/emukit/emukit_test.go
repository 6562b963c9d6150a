package emukit

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEqualSecret(t *testing.T) {
	require.True(t, EqualSecret("e2b_abc", "e2b_abc"))
	require.False(t, EqualSecret("e2b_abd", "e2b_abc"))
	require.False(t, EqualSecret("e2b_ab", "e2b_abc"), "a prefix of the secret is not the secret")
	require.False(t, EqualSecret("", ""), "an empty expected secret matches nothing")
	require.False(t, EqualSecret("x", ""))
}

func TestBase(t *testing.T) {
	var b Base
	r := httptest.NewRequest("GET", "http://127.0.0.1:3100/sandbox", nil)
	require.Equal(t, "http://127.0.0.1:3100", b.For(r), "from the request's Host when not set")
	b.Set("http://127.0.0.1:9/front/")
	require.Equal(t, "http://127.0.0.1:9/front", b.For(r))
}

func TestRandomHex(t *testing.T) {
	a, c := RandomHex(32), RandomHex(32)
	require.Len(t, a, 32)
	require.NotEqual(t, a, c)
}

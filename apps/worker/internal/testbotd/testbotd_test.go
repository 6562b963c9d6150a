package testbotd

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartRetriesATakenPort: a botd whose API port another process took
// before it listened is started again on a new port, and comes up.
func TestStartRetriesATakenPort(t *testing.T) {
	Require(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	picks := 0
	listenAddr = func(t testing.TB) string {
		picks++
		if picks == 1 {
			return taken.Addr().String()
		}
		return FreeAddr(t)
	}
	defer func() { listenAddr = FreeAddr }()
	d := Start(t, Options{DisplayBase: 1900, PortBase: 29500}) // no screen starts: neither is taken
	require.Equal(t, 2, picks, "a second address after the taken one")
	require.False(t, strings.HasSuffix(d.URL, taken.Addr().String()), d.URL)
	h, err := d.Client.Health(t.Context())
	require.NoError(t, err)
	require.True(t, h.OK)
}

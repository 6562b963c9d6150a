package store

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
)

// TestPostgresGoesAway: while the database is unreachable every call is
// ErrUnavailable (the API's 503); once it is back the same store works again
// without a restart, and nothing written before was lost.
func TestPostgresGoesAway(t *testing.T) {
	dsn := testDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	target := u.Host
	p := storetest.StartCutProxy(t, "127.0.0.1:0", target)
	addr := p.Addr()
	u.Host = addr
	s := openTestPostgres(t, u.String())
	ctx := t.Context()
	require.NoError(t, s.CreateComputer(ctx, computer("c1")))

	p.Cut()
	_, err = s.GetComputer(ctx, "c1")
	require.ErrorIs(t, err, ErrUnavailable, "%v", err)
	_, err = s.AcquireLease(ctx, "k", "h", time.Minute)
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotContains(t, err.Error(), "passfile", "errors never carry the DSN")

	p = storetest.StartCutProxy(t, addr, target)
	defer p.Cut()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = s.GetComputer(ctx, "c1")
		if err == nil {
			break
		}
		require.ErrorIs(t, err, ErrUnavailable)
		require.True(t, time.Now().Before(deadline), "store did not recover: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	_, err = s.AcquireLease(ctx, "k", "h", time.Minute)
	require.NoError(t, err)
}

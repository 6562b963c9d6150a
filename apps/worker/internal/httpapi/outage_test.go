package httpapi

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
)

// TestPostgresGoesAwayMidRequest: the API answers 503 while Postgres is
// unreachable, and works again, with nothing lost, once it is back.
func TestPostgresGoesAwayMidRequest(t *testing.T) {
	dsn := os.Getenv("WORKER_TEST_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but WORKER_TEST_DATABASE_URL is not set (scripts/postgres.sh)")
		}
		t.Skip("set WORKER_TEST_DATABASE_URL (scripts/postgres.sh prints it)")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "api_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.ExecContext(t.Context(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	defer func() { _, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE") }()

	u, err := url.Parse(dsn)
	require.NoError(t, err)
	target := u.Host
	p := storetest.StartCutProxy(t, "127.0.0.1:0", target)
	addr := p.Addr()
	u.Host = addr
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	st, err := store.OpenPostgres(t.Context(), u.String())
	require.NoError(t, err)
	f := newFixtureOn(t, t.TempDir(), st)
	attach := map[string]any{"url": f.botd.URL, "token": botdTok}
	status, id, _ := f.create(t, map[string]any{"scope": map[string]any{"team": "t1"}, "attach": attach})
	require.Equal(t, http.StatusCreated, status)

	p.Cut()
	status, body := f.req(t, "GET", "/v1/computers", token, "", nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "database is unavailable")
	require.False(t, strings.Contains(body, "passfile") || strings.Contains(body, "openbot"), "no DSN in the answer: %s", body)
	status, _, _ = f.create(t, map[string]any{"scope": map[string]any{"team": "t2"}, "attach": attach})
	require.Equal(t, http.StatusServiceUnavailable, status)

	storetest.StartCutProxy(t, addr, target)
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body = f.req(t, "GET", "/v1/computers", token, "", nil)
		if status == http.StatusOK {
			break
		}
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.True(t, time.Now().Before(deadline), "the API did not recover")
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, body, id, "nothing written before the outage was lost")
}

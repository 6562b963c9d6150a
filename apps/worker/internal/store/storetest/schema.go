package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/stretchr/testify/require"
)

// DSN is the CI Postgres (WORKER_TEST_DATABASE_URL, which scripts/postgres.sh
// prints). Without it the test skips, and under CI=true it fails.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("WORKER_TEST_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but WORKER_TEST_DATABASE_URL is not set (run scripts/postgres.sh; make test does)")
		}
		t.Skip("Postgres: set WORKER_TEST_DATABASE_URL (scripts/postgres.sh prints it)")
	}
	return dsn
}

// SchemaURL makes an empty schema of the test's own (named prefix + random
// hex) on the Postgres at dsn, drops it when the test ends (cleanups run
// last-registered first, so register this before whatever must close
// first), and returns dsn with search_path set to it: tests never see each
// other's rows.
func SchemaURL(t testing.TB, dsn, prefix string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := prefix + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	_, err = admin.ExecContext(t.Context(), "CREATE SCHEMA "+schema)
	require.NoError(t, err, "Postgres at WORKER_TEST_DATABASE_URL")
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

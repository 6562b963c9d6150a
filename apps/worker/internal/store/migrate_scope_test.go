package store

import (
	"database/sql"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
)

// TestScopeMigrationKeepsOlderComputers: a database made before the
// one-live-computer-per-scope rule, with two live computers of one team
// (and a destroyed one), migrates: nothing is lost, both keep working, and
// the scope takes no third.
func TestScopeMigrationKeepsOlderComputers(t *testing.T) {
	for _, e := range []struct {
		name, driver, dir string
		dialect           goose.Dialect
		dsn               func(t *testing.T) string
		open              func(t *testing.T, dsn string) Store
	}{
		{"sqlite", "sqlite", "migrations/sqlite", goose.DialectSQLite3,
			func(t *testing.T) string { return filepath.Join(t.TempDir(), "worker.db") },
			func(t *testing.T, dsn string) Store {
				s, err := OpenSQLite(t.Context(), dsn)
				require.NoError(t, err)
				return s
			}},
		{"postgres", "pgx", "migrations/postgres", goose.DialectPostgres,
			func(t *testing.T) string { return storetest.SchemaURL(t, storetest.DSN(t), "t_") },
			func(t *testing.T, dsn string) Store {
				s, err := OpenPostgres(t.Context(), dsn)
				require.NoError(t, err)
				return s
			}},
	} {
		t.Run(e.name, func(t *testing.T) {
			ctx := t.Context()
			dsn := e.dsn(t)
			// The schema as it was: migration 00001 only.
			first, err := fs.ReadFile(migrations, e.dir+"/00001_init.sql")
			require.NoError(t, err)
			db, err := sql.Open(e.driver, dsn)
			require.NoError(t, err)
			p, err := goose.NewProvider(e.dialect, db, fstest.MapFS{"00001_init.sql": {Data: first}})
			require.NoError(t, err)
			_, err = p.Up(ctx)
			require.NoError(t, err)
			old := &sqlStore{db: db, engine: e.name, dollar: e.driver == "pgx", isUnique: func(error) bool { return false }}
			for _, c := range []struct{ id, observed string }{{"old1", StateRunning}, {"old2", StateStopped}, {"gone", StateDestroyed}} {
				cc := computer(c.id)
				cc.ScopeID, cc.ObservedState = "legacy", c.observed
				_, err := db.ExecContext(ctx, old.q(`INSERT INTO computers (`+computerCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`),
					cc.ID, cc.ScopeKind, cc.ScopeID, cc.Kind, cc.Provider, cc.ProviderRef, cc.BotdToken, cc.DesiredState, cc.ObservedState,
					0, "", cc.HomeKey, 0, 1000, 1000)
				require.NoError(t, err)
			}
			require.NoError(t, db.Close())

			s := e.open(t, dsn)
			defer s.Close()
			list, err := s.ListComputers(ctx)
			require.NoError(t, err)
			require.Len(t, list, 3, "nothing lost")
			for _, id := range []string{"old1", "old2"} {
				_, err := s.UpdateComputer(ctx, id, StateUpdate{Observed: ptr(StateRunning)})
				require.NoError(t, err, "%s keeps working", id)
			}
			c := computer("new")
			c.ScopeID = "legacy"
			require.ErrorIs(t, s.CreateComputer(ctx, c), ErrScopeTaken, "the scope takes no third")
		})
	}
}

package store

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations
var migrations embed.FS

// sqliteMagic opens every SQLite database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// OpenSQLite opens (or creates) the embedded database at path: WAL, a busy
// timeout, migrations applied. A file that is not a SQLite database, is
// corrupt, or is held by another worker is a clear error, and nothing is
// written to it.
func OpenSQLite(ctx context.Context, path string) (Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// One worker per database: two would both recover the same runs.
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("store: %s is in use by another worker (lock %s held)", path, path+".lock")
	}
	fail := func(err error) (Store, error) {
		lock.Close()
		return nil, err
	}
	if f, err := os.Open(path); err == nil {
		head := make([]byte, len(sqliteMagic))
		n, _ := io.ReadFull(f, head)
		f.Close()
		if n > 0 && !bytes.Equal(head[:n], sqliteMagic) {
			return fail(fmt.Errorf("store: %s is not a SQLite database (left untouched; move it aside or set DATA_DIR)", path))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(fmt.Errorf("store: %w", err))
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fail(fmt.Errorf("store: %w", err))
	}
	// Check the file before anything writes to it (WAL switch, migrations).
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&check); err != nil || check != "ok" {
		db.Close()
		if err == nil {
			err = errors.New(check)
		}
		return fail(fmt.Errorf("store: %s cannot be used (%s); it was left untouched", path, sqliteReason(err)))
	}
	if _, err := db.ExecContext(ctx, "PRAGMA journal_mode=WAL"); err != nil {
		db.Close()
		return fail(fmt.Errorf("store: %s: set WAL mode: %s", path, sqliteReason(err)))
	}
	s := &sqlStore{db: db, engine: "sqlite", isUnique: func(err error) bool {
		return strings.Contains(err.Error(), "UNIQUE constraint failed")
	}}
	if err := migrate(ctx, db, goose.DialectSQLite3, "migrations/sqlite"); err != nil {
		db.Close()
		return fail(err)
	}
	return &lockedStore{sqlStore: s, lock: lock}, nil
}

func sqliteReason(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "locked"), strings.Contains(msg, "busy"):
		return "the database is locked by another process"
	case strings.Contains(msg, "malformed"), strings.Contains(msg, "not a database"), strings.Contains(msg, "corrupt"):
		return "the database file is corrupt"
	}
	return msg
}

// lockedStore keeps the SQLite lock file held until Close.
type lockedStore struct {
	*sqlStore
	lock *os.File
}

func (l *lockedStore) Close() error {
	err := l.sqlStore.Close()
	l.lock.Close()
	return err
}

// OpenPostgres connects to dsn (WORKER_DATABASE_URL) and applies the
// migrations. Errors never carry the DSN (it may hold a password).
func OpenPostgres(ctx context.Context, dsn string) (Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, errors.New("store: WORKER_DATABASE_URL is not a valid Postgres URL")
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: cannot reach Postgres: %s", pgReason(err))
	}
	s := &sqlStore{db: db, engine: "postgres", dollar: true, isUnique: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505"
	}}
	if err := migrate(ctx, db, goose.DialectPostgres, "migrations/postgres"); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// pgReason is a connection error without the DSN.
func pgReason(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Severity + " " + pe.Code + ": " + pe.Message
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return "connection refused or failed"
	}
	return err.Error()
}

func migrate(ctx context.Context, db *sql.DB, dialect goose.Dialect, dir string) error {
	sub, err := fs.Sub(migrations, dir)
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(dialect, db, sub)
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("store: apply migrations: %w", err)
	}
	return nil
}

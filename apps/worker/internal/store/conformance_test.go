package store

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
	"github.com/stretchr/testify/require"
)

// engine opens a fresh, empty store of one engine for a test.
type engine struct {
	name string
	open func(t testing.TB) Store
}

// engines is every engine the conformance suite runs on. Postgres comes from
// WORKER_TEST_DATABASE_URL (scripts/postgres.sh prints it; .ci/run sets it);
// without it the Postgres half skips on a laptop and fails under CI=true.
func engines(t testing.TB) []engine {
	return []engine{
		{"sqlite", func(t testing.TB) Store {
			s, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "worker.db"))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"postgres", func(t testing.TB) Store { return openTestPostgres(t, testDSN(t)) }},
	}
}

func testDSN(t testing.TB) string { return storetest.DSN(t) }

// openTestPostgres gives the test its own schema, dropped afterwards, so
// tests never see each other's rows.
func openTestPostgres(t testing.TB, dsn string) Store {
	t.Helper()
	u := storetest.SchemaURL(t, dsn, "t_")
	s, err := OpenPostgres(t.Context(), u)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// eachEngine runs fn as a subtest on every engine.
func eachEngine(t *testing.T, fn func(t *testing.T, s Store)) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) { fn(t, e.open(t)) })
	}
}

func computer(id string) Computer {
	return Computer{ID: id, ScopeKind: ScopeTeam, ScopeID: "team-" + id, Kind: "team", Provider: "attach",
		ProviderRef: `{"url":"http://127.0.0.1:1"}`, BotdToken: []byte{1, 2, 3}, DesiredState: StateRunning,
		ObservedState: StateCreating, HomeKey: "home-" + id}
}

func ptr[T any](v T) *T { return &v }

func TestConformanceComputers(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		_, err := s.GetComputer(ctx, "nope")
		require.ErrorIs(t, err, ErrNotFound)
		require.NoError(t, s.CreateComputer(ctx, computer("c1")))
		require.ErrorIs(t, s.CreateComputer(ctx, computer("c1")), ErrExists)
		require.NoError(t, s.CreateComputer(ctx, computer("c2")))
		c, err := s.GetComputer(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, []byte{1, 2, 3}, c.BotdToken)
		require.Equal(t, StateCreating, c.ObservedState)
		require.True(t, c.StateDeadline.IsZero())
		deadline := time.Now().Add(time.Minute).Truncate(time.Millisecond).UTC()
		c, err = s.UpdateComputer(ctx, "c1", StateUpdate{Observed: ptr(StateStarting), Deadline: &deadline, ProviderRef: ptr("ref2")})
		require.NoError(t, err)
		require.Equal(t, StateStarting, c.ObservedState)
		require.Equal(t, StateRunning, c.DesiredState, "desired is kept apart")
		require.Equal(t, deadline, c.StateDeadline)
		require.Equal(t, "ref2", c.ProviderRef)
		_, err = s.UpdateComputer(ctx, "nope", StateUpdate{Observed: ptr(StateError)})
		require.ErrorIs(t, err, ErrNotFound)
		list, err := s.ListComputers(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)

		require.NoError(t, s.AddBot(ctx, Bot{ComputerID: "c1", ID: "alice", TeamID: "team1"}))
		require.NoError(t, s.AddBot(ctx, Bot{ComputerID: "c1", ID: "bob", TeamID: "team1"}))
		require.ErrorIs(t, s.AddBot(ctx, Bot{ComputerID: "c1", ID: "alice", TeamID: "team1"}), ErrExists)
		require.ErrorIs(t, s.AddBot(ctx, Bot{ComputerID: "nope", ID: "alice"}), ErrNotFound)
		bots, err := s.ListBots(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, bots, 2)
		bots, err = s.ListBots(ctx, "c2")
		require.NoError(t, err)
		require.Empty(t, bots)

		_, err = s.LatestCheckpoint(ctx, "c1")
		require.ErrorIs(t, err, ErrNotFound)
		require.NoError(t, s.PutCheckpoint(ctx, Checkpoint{ComputerID: "c1", Revision: 1, Size: 10}))
		require.NoError(t, s.PutCheckpoint(ctx, Checkpoint{ComputerID: "c1", Revision: 2, Size: 20}))
		cp, err := s.LatestCheckpoint(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, int64(2), cp.Revision)
		require.Equal(t, int64(20), cp.Size)
		c, err = s.GetComputer(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, int64(2), c.HomeRevision)

		// A checkpoint made for a run carries the run's lease epoch: once
		// the lease moved on, it is refused and the latest stays.
		l1, err := s.AcquireLease(ctx, "c1/ckpt-bot", "run-a", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.PutCheckpoint(ctx, Checkpoint{ComputerID: "c1", Revision: 3, Size: 30, LeaseKey: "c1/ckpt-bot", Epoch: l1.Epoch}))
		require.NoError(t, s.ReleaseLease(ctx, "c1/ckpt-bot", l1.Epoch))
		l2, err := s.AcquireLease(ctx, "c1/ckpt-bot", "run-b", time.Minute)
		require.NoError(t, err)
		require.ErrorIs(t, s.PutCheckpoint(ctx, Checkpoint{ComputerID: "c1", Revision: 4, Size: 40, LeaseKey: "c1/ckpt-bot", Epoch: l1.Epoch}), ErrStaleEpoch)
		require.ErrorIs(t, s.PutCheckpoint(ctx, Checkpoint{ComputerID: "c1", Revision: 4, Size: 40, LeaseKey: "nope", Epoch: 1}), ErrStaleEpoch)
		require.NoError(t, s.PutCheckpoint(ctx, Checkpoint{ComputerID: "c1", Revision: 4, Size: 40, LeaseKey: "c1/ckpt-bot", Epoch: l2.Epoch}))
		cp, err = s.LatestCheckpoint(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, int64(4), cp.Revision)
	})
}

func TestConformanceLease(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		_, err := s.GetLease(ctx, "k")
		require.ErrorIs(t, err, ErrNotFound)
		l1, err := s.AcquireLease(ctx, "k", "run-a", time.Minute)
		require.NoError(t, err)
		require.Equal(t, int64(1), l1.Epoch)
		_, err = s.AcquireLease(ctx, "k", "run-b", time.Minute)
		require.ErrorIs(t, err, ErrBusy, "a second holder is refused while the lease lives")
		// The same holder re-takes it (a restarted worker) and fences its past self.
		l2, err := s.AcquireLease(ctx, "k", "run-a", time.Minute)
		require.NoError(t, err)
		require.Equal(t, int64(2), l2.Epoch)
		_, err = s.RenewLease(ctx, "k", l1.Epoch, time.Minute)
		require.ErrorIs(t, err, ErrStaleEpoch)
		require.ErrorIs(t, s.ReleaseLease(ctx, "k", l1.Epoch), ErrStaleEpoch)
		_, err = s.RenewLease(ctx, "k", l2.Epoch, time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.ReleaseLease(ctx, "k", l2.Epoch))
		require.ErrorIs(t, s.ReleaseLease(ctx, "k", l2.Epoch), ErrStaleEpoch, "released twice")
		l3, err := s.AcquireLease(ctx, "k", "run-b", -time.Second) // already expired
		require.NoError(t, err)
		require.Equal(t, int64(3), l3.Epoch)
		l4, err := s.AcquireLease(ctx, "k", "run-c", time.Minute)
		require.NoError(t, err, "an expired lease is free")
		require.Equal(t, int64(4), l4.Epoch)
		got, err := s.GetLease(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, "run-c", got.Holder)

		// Many holders race for one free lease: exactly one wins.
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, busy := 0, 0
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.AcquireLease(ctx, "race", fmt.Sprintf("h%d", i), time.Minute)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, ErrBusy):
					busy++
				default:
					t.Errorf("acquire: %v", err)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, 1, wins)
		require.Equal(t, 7, busy)
	})
}

func TestConformanceRunsFenced(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		require.NoError(t, s.CreateComputer(ctx, computer("c1")))
		l, err := s.AcquireLease(ctx, "team1/alice", "r1", -time.Second)
		require.NoError(t, err)
		run := Run{ID: "r1", ComputerID: "c1", BotID: "alice", LeaseKey: "team1/alice", Epoch: l.Epoch, State: RunQueued, Prompt: "p", Model: "m"}
		bad := run
		bad.Epoch = l.Epoch + 7
		require.ErrorIs(t, s.CreateRun(ctx, bad), ErrStaleEpoch)
		require.NoError(t, s.CreateRun(ctx, run))
		got, err := s.UpdateRun(ctx, "r1", l.Epoch, RunUpdate{State: ptr(RunRunning), ThreadID: ptr("th")})
		require.NoError(t, err)
		require.Equal(t, RunRunning, got.State)
		require.Equal(t, "th", got.ThreadID)
		require.True(t, got.EndedAt.IsZero())
		for i := range 3 {
			seq, err := s.AppendEvent(ctx, "r1", l.Epoch, "status", fmt.Appendf(nil, `{"i":%d}`, i))
			require.NoError(t, err)
			require.Equal(t, int64(i+1), seq)
		}
		// Another holder takes the (expired) lease: every write of the old
		// epoch is refused from now on.
		l2, err := s.AcquireLease(ctx, "team1/alice", "r2", time.Minute)
		require.NoError(t, err)
		_, err = s.UpdateRun(ctx, "r1", l.Epoch, RunUpdate{State: ptr(RunCompleted)})
		require.ErrorIs(t, err, ErrStaleEpoch)
		_, err = s.AppendEvent(ctx, "r1", l.Epoch, "status", []byte(`{}`))
		require.ErrorIs(t, err, ErrStaleEpoch)
		_, err = s.UpdateRun(ctx, "nope", l2.Epoch, RunUpdate{State: ptr(RunCompleted)})
		require.ErrorIs(t, err, ErrNotFound)
		_, err = s.AppendEvent(ctx, "nope", l2.Epoch, "x", nil)
		require.ErrorIs(t, err, ErrNotFound)
		got, err = s.GetRun(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, RunRunning, got.State, "the stale write changed nothing")

		evs, err := s.Events(ctx, "r1", 0)
		require.NoError(t, err)
		require.Len(t, evs, 3)
		require.JSONEq(t, `{"i":0}`, string(evs[0].Data))
		evs, err = s.Events(ctx, "r1", 2)
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, int64(3), evs[0].Seq)
		// The last n of a type, in order; none of a skipped type.
		evs, err = s.RecentEvents(ctx, "r1", 2, "notification")
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, []int64{2, 3}, []int64{evs[0].Seq, evs[1].Seq})
		evs, err = s.RecentEvents(ctx, "r1", 10, "status")
		require.NoError(t, err)
		require.Empty(t, evs)

		// The new holder (the same run, re-fenced) finishes it.
		got, err = s.UpdateRun(ctx, "r1", l2.Epoch, RunUpdate{State: ptr(RunFailed), Error: ptr("worker restarted")})
		require.NoError(t, err)
		require.Equal(t, RunFailed, got.State)
		require.False(t, got.EndedAt.IsZero())
		require.Equal(t, l2.Epoch, got.Epoch)
		active, err := s.ListRuns(ctx, "", RunQueued, RunRunning, RunWaitingTakeover)
		require.NoError(t, err)
		require.Empty(t, active)
		all, err := s.ListRuns(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, all, 1)

		// Concurrent appends under one epoch get distinct, gapless seqs.
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.AppendEvent(ctx, "r1", l2.Epoch, "tool_call", []byte(`{}`))
				if err != nil {
					t.Errorf("append: %v", err)
				}
			}()
		}
		wg.Wait()
		evs, err = s.Events(ctx, "r1", 0)
		require.NoError(t, err)
		require.Len(t, evs, 13)
		for i, e := range evs {
			require.Equal(t, int64(i+1), e.Seq)
		}
	})
}

// TestConformanceSurvivesReopen: what one store wrote, a reopened one reads.
func TestSQLiteSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.db")
	s, err := OpenSQLite(t.Context(), path)
	require.NoError(t, err)
	require.NoError(t, s.CreateComputer(t.Context(), computer("c1")))
	_, err = OpenSQLite(t.Context(), path)
	require.ErrorContains(t, err, "in use by another worker", "a second worker on one database is refused")
	require.NoError(t, s.Close())
	s, err = OpenSQLite(t.Context(), path)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.GetComputer(t.Context(), "c1")
	require.NoError(t, err)
}

// TestSQLiteBadFiles: a file that is not a database, a corrupt one and a
// locked one are clear errors at start, and the file is not changed.
func TestSQLiteBadFiles(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "not.db")
	require.NoError(t, os.WriteFile(notDB, []byte("hello, I am a text file\n"), 0o600))
	_, err := OpenSQLite(t.Context(), notDB)
	require.ErrorContains(t, err, "not a SQLite database")
	b, _ := os.ReadFile(notDB)
	require.Equal(t, "hello, I am a text file\n", string(b))

	// A real database with its pages overwritten in the middle.
	corrupt := filepath.Join(dir, "corrupt.db")
	s, err := OpenSQLite(t.Context(), corrupt)
	require.NoError(t, err)
	for i := range 200 {
		require.NoError(t, s.CreateComputer(t.Context(), computer(fmt.Sprintf("c%03d", i))))
	}
	require.NoError(t, s.Close())
	// Fold the WAL in, then damage the file past its header.
	db, err := sql.Open("sqlite", corrupt)
	require.NoError(t, err)
	_, err = db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	f, err := os.OpenFile(corrupt, os.O_RDWR, 0)
	require.NoError(t, err)
	junk := make([]byte, 8192)
	for i := range junk {
		junk[i] = 0xA5
	}
	_, err = f.WriteAt(junk, 4096)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before, _ := os.ReadFile(corrupt)
	_, err = OpenSQLite(t.Context(), corrupt)
	require.Error(t, err)
	require.ErrorContains(t, err, "left untouched")
	after, _ := os.ReadFile(corrupt)
	require.Equal(t, before, after, "nothing was written to the corrupt file")

	// Another process (here: another connection) holds an exclusive lock.
	locked := filepath.Join(dir, "locked.db")
	s, err = OpenSQLite(t.Context(), locked)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	other, err := sql.Open("sqlite", locked)
	require.NoError(t, err)
	defer other.Close()
	conn, err := other.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(t.Context(), "PRAGMA locking_mode=EXCLUSIVE")
	require.NoError(t, err)
	_, err = conn.ExecContext(t.Context(), "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	_, err = OpenSQLite(t.Context(), locked)
	require.ErrorContains(t, err, "locked by another process")
	_, _ = conn.ExecContext(t.Context(), "ROLLBACK")
}

func TestConformanceSecrets(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		require.NoError(t, s.CreateComputer(ctx, computer("c1")))
		require.NoError(t, s.CreateComputer(ctx, computer("c2")))
		_, err := s.PutSecret(ctx, Secret{ComputerID: "nope", Name: "a", Origin: "https://a.test", Value: []byte{1}})
		require.ErrorIs(t, err, ErrNotFound)

		replaced, err := s.PutSecret(ctx, Secret{ComputerID: "c1", Name: "bank", Origin: "https://bank.test", Value: []byte{1, 2, 3}})
		require.NoError(t, err)
		require.False(t, replaced)
		replaced, err = s.PutSecret(ctx, Secret{ComputerID: "c1", Name: "mail", Origin: "https://mail.test", Value: []byte{4}})
		require.NoError(t, err)
		require.False(t, replaced)
		replaced, err = s.PutSecret(ctx, Secret{ComputerID: "c1", Name: "bank", Origin: "https://bank2.test", Value: []byte{9, 9}})
		require.NoError(t, err)
		require.True(t, replaced)

		got, err := s.GetSecret(ctx, "c1", "bank")
		require.NoError(t, err)
		require.Equal(t, "https://bank2.test", got.Origin)
		require.Equal(t, []byte{9, 9}, got.Value)
		_, err = s.GetSecret(ctx, "c2", "bank")
		require.ErrorIs(t, err, ErrNotFound, "a secret belongs to one computer")

		list, err := s.ListSecrets(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, "bank", list[0].Name)
		require.Equal(t, "mail", list[1].Name)
		list, err = s.ListSecrets(ctx, "c2")
		require.NoError(t, err)
		require.Empty(t, list)

		require.NoError(t, s.DeleteSecret(ctx, "c1", "bank"))
		require.ErrorIs(t, s.DeleteSecret(ctx, "c1", "bank"), ErrNotFound)
		_, err = s.GetSecret(ctx, "c1", "bank")
		require.ErrorIs(t, err, ErrNotFound)
		list, err = s.ListSecrets(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, list, 1)
	})
}

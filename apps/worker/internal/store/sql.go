package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// sqlStore is the Store over database/sql; the two engines differ only in
// placeholders and in how they report a duplicate key.
type sqlStore struct {
	db       *sql.DB
	engine   string
	dollar   bool // Postgres placeholders ($1…)
	isUnique func(error) bool
}

func (s *sqlStore) Engine() string { return s.engine }
func (s *sqlStore) Close() error   { return s.db.Close() }

func (s *sqlStore) Ping(ctx context.Context) error { return s.wrap(s.db.PingContext(ctx)) }

// q rewrites ? placeholders for Postgres.
func (s *sqlStore) q(query string) string {
	if !s.dollar {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// wrap maps an engine error to a domain error: no rows is ErrNotFound,
// anything else the database could not do is ErrUnavailable.
func (s *sqlStore) wrap(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case s.isUnique(err):
		return ErrExists
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

const computerCols = `id, scope_kind, scope_id, kind, provider, provider_ref, botd_token, desired_state, observed_state,
 state_deadline, last_error, home_key, home_revision, created_at, updated_at`

// computerSelect is what a read selects: computerCols (the columns of
// migration 00001), the template (00009) and evaluation (00012).
const computerSelect = computerCols + `, template, evaluation`

func scanComputer(sc interface{ Scan(...any) error }) (Computer, error) {
	var c Computer
	var deadline, created, updated, evaluation int64
	err := sc.Scan(&c.ID, &c.ScopeKind, &c.ScopeID, &c.Kind, &c.Provider, &c.ProviderRef, &c.BotdToken, &c.DesiredState,
		&c.ObservedState, &deadline, &c.LastError, &c.HomeKey, &c.HomeRevision, &created, &updated, &c.Template, &evaluation)
	c.StateDeadline, c.CreatedAt, c.UpdatedAt = fromMs(deadline), fromMs(created), fromMs(updated)
	c.Evaluation = evaluation != 0
	return c, err
}

func (s *sqlStore) CreateComputer(ctx context.Context, c Computer) error {
	now := time.Now()
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	// scope_key carries the one-live-computer-per-scope rule: a unique
	// index over the computers not destroyed (migration 00003).
	evaluation := 0
	if c.Evaluation {
		evaluation = 1
	}
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO computers (`+computerCols+`, scope_key, template, evaluation) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`),
		c.ID, c.ScopeKind, c.ScopeID, c.Kind, c.Provider, c.ProviderRef, c.BotdToken, c.DesiredState, c.ObservedState,
		ms(c.StateDeadline), c.LastError, c.HomeKey, c.HomeRevision, ms(c.CreatedAt), ms(now), c.ScopeKind+":"+c.ScopeID, c.Template, evaluation)
	if err = s.wrap(err); errors.Is(err, ErrExists) {
		if _, gerr := s.GetComputer(ctx, c.ID); errors.Is(gerr, ErrNotFound) {
			return ErrScopeTaken
		}
	}
	return err
}

func (s *sqlStore) GetComputer(ctx context.Context, id string) (Computer, error) {
	c, err := scanComputer(s.db.QueryRowContext(ctx, s.q(`SELECT `+computerSelect+` FROM computers WHERE id=?`), id))
	return c, s.wrap(err)
}

func (s *sqlStore) ListComputers(ctx context.Context) ([]Computer, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+computerSelect+` FROM computers ORDER BY created_at, id`)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	var out []Computer
	for rows.Next() {
		c, err := scanComputer(rows)
		if err != nil {
			return nil, s.wrap(err)
		}
		out = append(out, c)
	}
	return out, s.wrap(rows.Err())
}

func (s *sqlStore) UpdateComputer(ctx context.Context, id string, u StateUpdate) (Computer, error) {
	sets := []string{"updated_at=?"}
	args := []any{ms(time.Now())}
	add := func(col string, v any) { sets = append(sets, col+"=?"); args = append(args, v) }
	if u.Desired != nil {
		add("desired_state", *u.Desired)
	}
	if u.Observed != nil {
		add("observed_state", *u.Observed)
	}
	if u.Deadline != nil {
		add("state_deadline", ms(*u.Deadline))
	}
	if u.LastError != nil {
		add("last_error", *u.LastError)
	}
	if u.ProviderRef != nil {
		add("provider_ref", *u.ProviderRef)
	}
	if u.Provider != nil {
		add("provider", *u.Provider)
	}
	if u.Template != nil {
		add("template", *u.Template)
	}
	args = append(args, id)
	where, fargs := ctxFence(ctx)
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE computers SET `+strings.Join(sets, ", ")+` WHERE id=?`+where), append(args, fargs...)...)
	if err != nil {
		return Computer{}, s.wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Computer{}, s.fenceOrMissing(ctx, id, where)
	}
	return s.GetComputer(ctx, id)
}

func (s *sqlStore) AddBot(ctx context.Context, b Bot) error {
	if _, err := s.GetComputer(ctx, b.ComputerID); err != nil {
		return err
	}
	now := time.Now()
	if b.TeamID != "" {
		if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO teams (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`), b.TeamID, ms(now)); err != nil {
			return s.wrap(err)
		}
	}
	sole := 0
	if b.Sole {
		sole = 1
	}
	if where, fargs := ctxFence(ctx); where != "" {
		res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO bots (computer_id, id, team_id, created_at, sole)
			SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS INTEGER) WHERE 1=1`+where),
			append([]any{b.ComputerID, b.ID, b.TeamID, ms(now), sole}, fargs...)...)
		if err != nil {
			return s.wrap(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrStaleEpoch
		}
		return nil
	}
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO bots (computer_id, id, team_id, created_at, sole) VALUES (?,?,?,?,?)`),
		b.ComputerID, b.ID, b.TeamID, ms(now), sole)
	return s.wrap(err)
}

// ctxFence is the condition (" AND EXISTS …") and its arguments that a
// fence carried by ctx adds to a computer write (UpdateComputer, AddBot,
// RemoveBot, PutCheckpoint, PutSecret, DeleteSecret); "" without one.
func ctxFence(ctx context.Context) (string, []any) {
	f, ok := FenceOf(ctx)
	if !ok {
		return "", nil
	}
	return ` AND EXISTS (SELECT 1 FROM bot_leases fl WHERE fl.lease_key=? AND fl.epoch=? AND fl.holder<>'')`, []any{f.Key, f.Epoch}
}

// fenceOrMissing tells why a fenced write changed nothing: the row is
// missing, or the fence moved on.
func (s *sqlStore) fenceOrMissing(ctx context.Context, id, where string) error {
	if where == "" {
		return ErrNotFound
	}
	if _, err := s.GetComputer(ctx, id); err != nil {
		return err
	}
	return ErrStaleEpoch
}

// missingOrStale tells why a delete changed nothing: the fence ctx
// carries moved on, or the row is missing.
func (s *sqlStore) missingOrStale(ctx context.Context) error {
	if f, ok := FenceOf(ctx); ok && !s.fenceHolds(ctx, f) {
		return ErrStaleEpoch
	}
	return ErrNotFound
}

func (s *sqlStore) RemoveBot(ctx context.Context, computerID, botID string) error {
	where, fargs := ctxFence(ctx)
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM bots WHERE computer_id=? AND id=?`+where), append([]any{computerID, botID}, fargs...)...)
	if err != nil {
		return s.wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return s.missingOrStale(ctx)
	}
	return nil
}

func (s *sqlStore) ListBots(ctx context.Context, computerID string) ([]Bot, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT computer_id, id, team_id, created_at, sole FROM bots WHERE computer_id=? ORDER BY created_at, id`), computerID)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	var out []Bot
	for rows.Next() {
		var b Bot
		var created, sole int64
		if err := rows.Scan(&b.ComputerID, &b.ID, &b.TeamID, &created, &sole); err != nil {
			return nil, s.wrap(err)
		}
		b.CreatedAt, b.Sole = fromMs(created), sole == 1
		out = append(out, b)
	}
	return out, s.wrap(rows.Err())
}

func scanLease(sc interface{ Scan(...any) error }) (Lease, error) {
	var l Lease
	var exp int64
	err := sc.Scan(&l.Key, &l.Epoch, &l.Holder, &exp)
	l.ExpiresAt = fromMs(exp)
	return l, err
}

// AcquireLease is one compare-and-swap: the row is created free, then taken
// only if free, expired or already ours, and the epoch moves on either way.
func (s *sqlStore) AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (Lease, error) {
	if holder == "" {
		return Lease{}, errors.New("lease holder is required")
	}
	if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO bot_leases (lease_key, epoch, holder, expires_at) VALUES (?, 0, '', 0) ON CONFLICT (lease_key) DO NOTHING`), key); err != nil {
		return Lease{}, s.wrap(err)
	}
	now := time.Now()
	l, err := scanLease(s.db.QueryRowContext(ctx, s.q(`UPDATE bot_leases SET epoch=epoch+1, holder=?, expires_at=?
 WHERE lease_key=? AND (holder='' OR expires_at<? OR holder=?) RETURNING lease_key, epoch, holder, expires_at`),
		holder, ms(now.Add(ttl)), key, ms(now), holder))
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, ErrBusy
	}
	return l, s.wrap(err)
}

func (s *sqlStore) RenewLease(ctx context.Context, key string, epoch int64, ttl time.Duration) (Lease, error) {
	l, err := scanLease(s.db.QueryRowContext(ctx, s.q(`UPDATE bot_leases SET expires_at=? WHERE lease_key=? AND epoch=? AND holder<>''
 RETURNING lease_key, epoch, holder, expires_at`), ms(time.Now().Add(ttl)), key, epoch))
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, ErrStaleEpoch
	}
	return l, s.wrap(err)
}

func (s *sqlStore) ReleaseLease(ctx context.Context, key string, epoch int64) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE bot_leases SET holder='', expires_at=0 WHERE lease_key=? AND epoch=? AND holder<>''`), key, epoch)
	if err != nil {
		return s.wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrStaleEpoch
	}
	return nil
}

// fenceHolds reports whether f's lease is still held at its epoch.
func (s *sqlStore) fenceHolds(ctx context.Context, f Fence) bool {
	l, err := s.GetLease(ctx, f.Key)
	return err == nil && l.Epoch == f.Epoch && l.Holder != ""
}

func (s *sqlStore) ListLeases(ctx context.Context, prefix string) ([]Lease, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT lease_key, epoch, holder, expires_at FROM bot_leases WHERE substr(lease_key, 1, ?)=? ORDER BY lease_key`), len(prefix), prefix)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, s.wrap(err)
		}
		out = append(out, l)
	}
	return out, s.wrap(rows.Err())
}

func (s *sqlStore) TakeLease(ctx context.Context, key, holder string, ttl time.Duration, fenceKey string, fenceEpoch int64) (Lease, error) {
	if holder == "" {
		return Lease{}, errors.New("lease holder is required")
	}
	if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO bot_leases (lease_key, epoch, holder, expires_at) VALUES (?, 0, '', 0) ON CONFLICT (lease_key) DO NOTHING`), key); err != nil {
		return Lease{}, s.wrap(err)
	}
	l, err := scanLease(s.db.QueryRowContext(ctx, s.q(`UPDATE bot_leases SET epoch=epoch+1, holder=?, expires_at=?
 WHERE lease_key=? AND EXISTS (SELECT 1 FROM bot_leases f WHERE f.lease_key=? AND f.epoch=? AND f.holder<>'')
 RETURNING lease_key, epoch, holder, expires_at`),
		holder, ms(time.Now().Add(ttl)), key, fenceKey, fenceEpoch))
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, ErrStaleEpoch
	}
	return l, s.wrap(err)
}

func (s *sqlStore) GetLease(ctx context.Context, key string) (Lease, error) {
	l, err := scanLease(s.db.QueryRowContext(ctx, s.q(`SELECT lease_key, epoch, holder, expires_at FROM bot_leases WHERE lease_key=?`), key))
	return l, s.wrap(err)
}

const runCols = `id, computer_id, bot_id, lease_key, epoch, state, prompt, model, thread_id, turn_id, message, error,
 created_at, updated_at, ended_at, runtime`

func scanRun(sc interface{ Scan(...any) error }) (Run, error) {
	var r Run
	var created, updated, ended int64
	err := sc.Scan(&r.ID, &r.ComputerID, &r.BotID, &r.LeaseKey, &r.Epoch, &r.State, &r.Prompt, &r.Model, &r.ThreadID,
		&r.TurnID, &r.Message, &r.Error, &created, &updated, &ended, &r.Runtime)
	r.CreatedAt, r.UpdatedAt, r.EndedAt = fromMs(created), fromMs(updated), fromMs(ended)
	return r, err
}

// fence is the condition every run write carries: the lease named by the
// run is still at this epoch and still held.
const fence = `EXISTS (SELECT 1 FROM bot_leases l WHERE l.lease_key=runs.lease_key AND l.epoch=? AND l.holder<>'')`

func (s *sqlStore) CreateRun(ctx context.Context, r Run) error {
	now := time.Now()
	res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO runs (`+runCols+`)
 SELECT ?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,? WHERE EXISTS (SELECT 1 FROM bot_leases l WHERE l.lease_key=? AND l.epoch=? AND l.holder<>'')`),
		r.ID, r.ComputerID, r.BotID, r.LeaseKey, r.Epoch, r.State, r.Prompt, r.Model, r.ThreadID, r.TurnID, r.Message, r.Error,
		ms(now), ms(now), runtimeOr(r.Runtime), r.LeaseKey, r.Epoch)
	if err != nil {
		return s.wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrStaleEpoch
	}
	return nil
}

func (s *sqlStore) GetRun(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, s.q(`SELECT `+runCols+` FROM runs WHERE id=?`), id))
	return r, s.wrap(err)
}

func (s *sqlStore) ListRuns(ctx context.Context, computerID string, states ...string) ([]Run, error) {
	where := []string{"1=1"}
	var args []any
	if computerID != "" {
		where = append(where, "computer_id=?")
		args = append(args, computerID)
	}
	if len(states) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(",?", len(states)-1)+")")
		for _, st := range states {
			args = append(args, st)
		}
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+runCols+` FROM runs WHERE `+strings.Join(where, " AND ")+` ORDER BY created_at DESC, id`), args...)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, s.wrap(err)
		}
		out = append(out, r)
	}
	return out, s.wrap(rows.Err())
}

func (s *sqlStore) UpdateRun(ctx context.Context, id string, epoch int64, u RunUpdate) (Run, error) {
	now := ms(time.Now())
	sets := []string{"updated_at=?", "epoch=?"}
	args := []any{now, epoch}
	add := func(col string, v any) { sets = append(sets, col+"=?"); args = append(args, v) }
	if u.State != nil {
		add("state", *u.State)
		if RunEnded(*u.State) {
			add("ended_at", now)
		}
	}
	if u.ThreadID != nil {
		add("thread_id", *u.ThreadID)
	}
	if u.TurnID != nil {
		add("turn_id", *u.TurnID)
	}
	if u.Message != nil {
		add("message", *u.Message)
	}
	if u.Error != nil {
		add("error", *u.Error)
	}
	args = append(args, id, epoch)
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE runs SET `+strings.Join(sets, ", ")+` WHERE id=? AND `+fence), args...)
	if err != nil {
		return Run{}, s.wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := s.GetRun(ctx, id); err != nil {
			return Run{}, err
		}
		return Run{}, ErrStaleEpoch
	}
	return s.GetRun(ctx, id)
}

// AppendEvent takes the run's next seq from its row (a row lock on both
// engines, under the fence) and writes the event in the same transaction.
func (s *sqlStore) AppendEvent(ctx context.Context, runID string, epoch int64, typ string, data []byte) (int64, error) {
	if len(data) == 0 {
		data = []byte("null")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.wrap(err)
	}
	defer tx.Rollback()
	var seq int64
	err = tx.QueryRowContext(ctx, s.q(`UPDATE runs SET last_seq=last_seq+1 WHERE id=? AND `+fence+` RETURNING last_seq`), runID, epoch).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		tx.Rollback()
		if _, err := s.GetRun(ctx, runID); err != nil {
			return 0, err
		}
		return 0, ErrStaleEpoch
	}
	if err != nil {
		return 0, s.wrap(err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO run_events (run_id, seq, at, type, data) VALUES (?,?,?,?,?)`),
		runID, seq, ms(time.Now()), typ, string(data)); err != nil {
		return 0, s.wrap(err)
	}
	return seq, s.wrap(tx.Commit())
}

func (s *sqlStore) Events(ctx context.Context, runID string, afterSeq int64) ([]Event, error) {
	return s.queryEvents(ctx, `SELECT seq, at, type, data FROM run_events WHERE run_id=? AND seq>? ORDER BY seq`, runID, afterSeq)
}

func (s *sqlStore) RecentEvents(ctx context.Context, runID string, n int, skipType string) ([]Event, error) {
	out, err := s.queryEvents(ctx, `SELECT seq, at, type, data FROM run_events WHERE run_id=? AND type<>? ORDER BY seq DESC LIMIT ?`, runID, skipType, n)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, err
}

// queryEvents runs a query that selects seq, at, type and data of run
// events, and scans its rows in order.
func (s *sqlStore) queryEvents(ctx context.Context, query string, args ...any) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at int64
		var data string
		if err := rows.Scan(&e.Seq, &at, &e.Type, &data); err != nil {
			return nil, s.wrap(err)
		}
		e.At, e.Data = fromMs(at), []byte(data)
		out = append(out, e)
	}
	return out, s.wrap(rows.Err())
}

func (s *sqlStore) PutCheckpoint(ctx context.Context, c Checkpoint) error {
	if c.At.IsZero() {
		c.At = time.Now()
	}
	if c.LeaseKey != "" {
		// Fenced: recorded only while the run's lease is still at its epoch.
		res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO checkpoints (computer_id, revision, size, at)
			SELECT CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT) WHERE EXISTS (SELECT 1 FROM bot_leases WHERE lease_key=? AND epoch=?)`),
			c.ComputerID, c.Revision, c.Size, ms(c.At), c.LeaseKey, c.Epoch)
		if err != nil {
			return s.wrap(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.wrap(err)
		} else if n == 0 {
			return ErrStaleEpoch
		}
	} else if where, fargs := ctxFence(ctx); where != "" {
		res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO checkpoints (computer_id, revision, size, at)
			SELECT CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT) WHERE 1=1`+where),
			append([]any{c.ComputerID, c.Revision, c.Size, ms(c.At)}, fargs...)...)
		if err != nil {
			return s.wrap(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrStaleEpoch
		}
	} else if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO checkpoints (computer_id, revision, size, at) VALUES (?,?,?,?)`),
		c.ComputerID, c.Revision, c.Size, ms(c.At)); err != nil {
		return s.wrap(err)
	}
	_, err := s.db.ExecContext(ctx, s.q(`UPDATE computers SET home_revision=?, updated_at=? WHERE id=? AND home_revision<?`),
		c.Revision, ms(time.Now()), c.ComputerID, c.Revision)
	return s.wrap(err)
}

func (s *sqlStore) LatestCheckpoint(ctx context.Context, computerID string) (Checkpoint, error) {
	var c Checkpoint
	var at int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT computer_id, revision, size, at FROM checkpoints WHERE computer_id=? ORDER BY revision DESC LIMIT 1`), computerID).
		Scan(&c.ComputerID, &c.Revision, &c.Size, &at)
	c.At = fromMs(at)
	return c, s.wrap(err)
}

func (s *sqlStore) PutSecret(ctx context.Context, sec Secret) (bool, error) {
	if _, err := s.GetComputer(ctx, sec.ComputerID); err != nil {
		return false, err
	}
	now := ms(time.Now())
	visible := 0
	if sec.Visible {
		visible = 1
	}
	// A fence (a worker group's ownership) goes with every statement.
	where, fargs := ctxFence(ctx)
	update := func() (int64, error) {
		res, err := s.db.ExecContext(ctx, s.q(`UPDATE secrets SET origin=?, value=?, visible=?, updated_at=? WHERE computer_id=? AND name=?`+where),
			append([]any{sec.Origin, sec.Value, visible, now, sec.ComputerID, sec.Name}, fargs...)...)
		if err != nil {
			return 0, s.wrap(err)
		}
		n, err := res.RowsAffected()
		return n, s.wrap(err)
	}
	n, err := update()
	if err != nil {
		return false, err
	} else if n > 0 {
		return true, nil
	}
	value := "?" // SQLite takes the blob as it is; Postgres must be told
	if s.engine == "postgres" {
		value = "CAST(? AS BYTEA)"
	}
	res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO secrets (computer_id, name, origin, value, visible, created_at, updated_at)
		SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), `+value+`, CAST(? AS INTEGER), CAST(? AS BIGINT), CAST(? AS BIGINT) WHERE 1=1`+where),
		append([]any{sec.ComputerID, sec.Name, sec.Origin, sec.Value, visible, now, now}, fargs...)...)
	if errors.Is(s.wrap(err), ErrExists) {
		// A concurrent put made it first: replace it.
		if n, err := update(); err != nil || n > 0 {
			return true, err
		}
		return false, ErrStaleEpoch
	}
	if err != nil {
		return false, s.wrap(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, s.wrap(err)
	} else if n == 0 {
		return false, ErrStaleEpoch // only a fence stops the insert
	}
	return false, nil
}

const secretCols = `computer_id, name, origin, value, visible, created_at, updated_at`

func scanSecret(sc interface{ Scan(...any) error }) (Secret, error) {
	var sec Secret
	var created, updated, visible int64
	err := sc.Scan(&sec.ComputerID, &sec.Name, &sec.Origin, &sec.Value, &visible, &created, &updated)
	sec.Visible = visible != 0
	sec.CreatedAt, sec.UpdatedAt = fromMs(created), fromMs(updated)
	return sec, err
}

func (s *sqlStore) GetSecret(ctx context.Context, computerID, name string) (Secret, error) {
	sec, err := scanSecret(s.db.QueryRowContext(ctx, s.q(`SELECT `+secretCols+` FROM secrets WHERE computer_id=? AND name=?`), computerID, name))
	return sec, s.wrap(err)
}

func (s *sqlStore) ListSecrets(ctx context.Context, computerID string) ([]Secret, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+secretCols+` FROM secrets WHERE computer_id=? ORDER BY name`), computerID)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	out := []Secret{}
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, s.wrap(err)
		}
		out = append(out, sec)
	}
	return out, s.wrap(rows.Err())
}

func (s *sqlStore) DeleteSecret(ctx context.Context, computerID, name string) error {
	where, fargs := ctxFence(ctx)
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM secrets WHERE computer_id=? AND name=?`+where), append([]any{computerID, name}, fargs...)...)
	if err != nil {
		return s.wrap(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.wrap(err)
	} else if n == 0 {
		return s.missingOrStale(ctx)
	}
	return nil
}

// runtimeOr is a run's runtime as stored: "machine" when unset (every run
// made before runtimes existed ran Codex in the machine).
func runtimeOr(rt string) string {
	if rt == "" {
		return "machine"
	}
	return rt
}

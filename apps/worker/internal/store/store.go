// Package store is the worker's durable state behind one interface, with two
// engines: embedded SQLite (the default, DATA_DIR/worker.db) and Postgres
// (WORKER_DATABASE_URL). One conformance suite (conformance_test.go) runs
// against both. Times are stored as Unix milliseconds so both engines agree.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Domain outcomes; anything else a Store returns wraps ErrUnavailable.
var (
	// ErrNotFound: no such row.
	ErrNotFound = errors.New("not found")
	// ErrExists: a row with that key exists already.
	ErrExists = errors.New("already exists")
	// ErrScopeTaken: the computer's scope has a live (not destroyed)
	// computer already; it is an ErrExists.
	ErrScopeTaken = fmt.Errorf("%w: the scope has a live computer", ErrExists)
	// ErrBusy: the bot's lease is held by another holder.
	ErrBusy = errors.New("the bot is busy")
	// ErrStaleEpoch: a write carried an epoch that is no longer the lease's.
	ErrStaleEpoch = errors.New("stale lease epoch")
	// ErrUnavailable: the database did not answer (gone, locked, broken).
	ErrUnavailable = errors.New("database unavailable")
)

// Scope kinds (seed 003).
const (
	ScopeSession = "session"
	ScopeTeam    = "team"
	ScopeAccount = "account"
)

// Computer states; desired and observed are kept apart.
const (
	StateCreating   = "creating"
	StateStarting   = "starting"
	StateRunning    = "running"
	StateStopping   = "stopping"
	StateStopped    = "stopped"
	StateDestroying = "destroying"
	StateDestroyed  = "destroyed"
	StateError      = "error"
)

// Run states.
const (
	RunQueued          = "queued"
	RunRunning         = "running"
	RunWaitingTakeover = "waiting_takeover"
	RunCompleted       = "completed"
	RunFailed          = "failed"
	RunStopped         = "stopped"
)

// RunEnded reports whether a run state is final.
func RunEnded(state string) bool {
	return state == RunCompleted || state == RunFailed || state == RunStopped
}

// Computer is one computer as the store keeps it.
type Computer struct {
	ID          string
	ScopeKind   string // session, team, account
	ScopeID     string // the session or team id ("" for account)
	Kind        string // team or private
	Provider    string
	ProviderRef string
	// BotdToken is sealed (AES-GCM) by the caller; the store never sees it in
	// clear.
	BotdToken     []byte
	DesiredState  string
	ObservedState string
	// StateDeadline bounds a transitional observed state (zero: none).
	StateDeadline time.Time
	LastError     string
	HomeKey       string
	HomeRevision  int64
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// Template is the provider template the computer was made from (e2b:
	// open-bot or desktop), kept so a replacement is made from the same
	// one; "" for providers without templates.
	Template string
	// Evaluation: the computer serves OSWorld's guest API (issue 34), set
	// at create and kept.
	Evaluation bool
}

// StateUpdate changes a computer's state fields; nil fields are kept.
type StateUpdate struct {
	Desired, Observed *string
	Deadline          *time.Time
	LastError         *string
	ProviderRef       *string
	// Provider changes the computer's provider kind (a move to another
	// kind; set with the new kind's ProviderRef).
	Provider *string
	// Template changes the computer's template (a move to another kind
	// takes that kind's).
	Template *string
}

// Bot is a bot added to a computer.
type Bot struct {
	ComputerID string
	ID         string
	TeamID     string
	// Sole marks the only bot a computer may have (a Private computer's):
	// AddBot refuses a sole bot with ErrExists when the computer has one.
	Sole      bool
	CreatedAt time.Time
}

// Fence names a lease and the epoch a write is made under: a write whose
// context carries one (WithFence) is refused with ErrStaleEpoch unless that
// lease is still held at that epoch. A worker group's owner of a computer
// carries its ownership lease on every write it makes for the computer.
type Fence struct {
	Key   string
	Epoch int64
}

type fenceKey struct{}

// WithFence returns ctx carrying f for the store's computer writes
// (UpdateComputer, AddBot, RemoveBot, PutCheckpoint, PutSecret,
// DeleteSecret).
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceOf returns the fence ctx carries, if any.
func FenceOf(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok && f.Key != ""
}

// Lease is a fenced per-bot lease: each acquisition bumps the epoch, and
// every write made under it names the epoch.
type Lease struct {
	Key       string
	Epoch     int64
	Holder    string
	ExpiresAt time.Time
}

// Run is one computer-use run.
type Run struct {
	ID         string
	ComputerID string
	BotID      string
	LeaseKey   string
	Epoch      int64
	State      string
	Prompt     string
	Model      string
	ThreadID   string
	TurnID     string
	Message    string
	Error      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	EndedAt    time.Time
	// Runtime is where the run's agent loop runs: "machine" (Codex in the
	// computer; also what an empty value is stored as) or "worker".
	Runtime string
}

// RunUpdate changes a run; nil fields are kept.
type RunUpdate struct {
	State, ThreadID, TurnID, Message, Error *string
}

// Event is one recorded run event.
type Event struct {
	Seq  int64
	At   time.Time
	Type string
	Data []byte // JSON
}

// Checkpoint is one workspace checkpoint's metadata.
type Checkpoint struct {
	ComputerID string
	Revision   int64
	Size       int64
	At         time.Time
	// LeaseKey and Epoch fence a checkpoint made for a run: when LeaseKey
	// is set the write is refused with ErrStaleEpoch unless Epoch is still
	// that lease's epoch. They are not stored.
	LeaseKey string
	Epoch    int64
}

// Secret is one vault entry of a computer: Value is sealed (AES-GCM) by
// the caller; the store never sees it in clear.
type Secret struct {
	ComputerID string
	Name       string
	Origin     string
	Value      []byte
	// Visible: the value may be typed into a field that shows it (not
	// only a masked password field).
	Visible   bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Store is the worker's state. Every method is safe for concurrent use.
type Store interface {
	// Engine names the engine ("sqlite" or "postgres").
	Engine() string
	Ping(ctx context.Context) error
	Close() error

	// CreateComputer records a new computer; ErrScopeTaken when its scope
	// (ScopeKind, ScopeID) has a computer that is not destroyed: at most
	// one live computer per scope, whichever worker asks.
	CreateComputer(ctx context.Context, c Computer) error
	GetComputer(ctx context.Context, id string) (Computer, error)
	ListComputers(ctx context.Context) ([]Computer, error)
	UpdateComputer(ctx context.Context, id string, u StateUpdate) (Computer, error)

	// AddBot adds a bot (and its team) to a computer; ErrExists if there.
	AddBot(ctx context.Context, b Bot) error
	ListBots(ctx context.Context, computerID string) ([]Bot, error)
	// RemoveBot removes a bot from a computer; ErrNotFound if not there.
	RemoveBot(ctx context.Context, computerID, botID string) error

	// AcquireLease takes key's lease for holder until now+ttl, bumping the
	// epoch, if it is free, expired, or already holder's; else ErrBusy.
	AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (Lease, error)
	// RenewLease extends the lease at epoch; ErrStaleEpoch if it moved on.
	RenewLease(ctx context.Context, key string, epoch int64, ttl time.Duration) (Lease, error)
	// ReleaseLease frees the lease at epoch; ErrStaleEpoch if it moved on.
	ReleaseLease(ctx context.Context, key string, epoch int64) error
	GetLease(ctx context.Context, key string) (Lease, error)
	// ListLeases lists the leases whose key starts with prefix (held or
	// not), by key.
	ListLeases(ctx context.Context, prefix string) ([]Lease, error)
	// TakeLease takes key's lease for holder until now+ttl whoever holds
	// it, bumping the epoch, but only while fenceKey's lease is holder's
	// at fenceEpoch (a worker group's new owner of a computer takes over
	// its runs' leases); else ErrStaleEpoch.
	TakeLease(ctx context.Context, key, holder string, ttl time.Duration, fenceKey string, fenceEpoch int64) (Lease, error)

	// CreateRun records a run made under its lease (r.LeaseKey, r.Epoch).
	CreateRun(ctx context.Context, r Run) error
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns lists runs, newest first; computerID and states filter when set.
	ListRuns(ctx context.Context, computerID string, states ...string) ([]Run, error)
	// UpdateRun changes a run; refused with ErrStaleEpoch unless epoch is
	// both the run's and its lease's current epoch.
	UpdateRun(ctx context.Context, id string, epoch int64, u RunUpdate) (Run, error)
	// AppendEvent adds the run's next event under the same fence and
	// returns its sequence number.
	AppendEvent(ctx context.Context, runID string, epoch int64, typ string, data []byte) (int64, error)
	// Events returns the run's events after seq, in order.
	Events(ctx context.Context, runID string, afterSeq int64) ([]Event, error)
	// RecentEvents returns the run's last n events whose type is not
	// skipType, in order (the dashboard reads no more than it shows).
	RecentEvents(ctx context.Context, runID string, n int, skipType string) ([]Event, error)

	PutCheckpoint(ctx context.Context, c Checkpoint) error
	LatestCheckpoint(ctx context.Context, computerID string) (Checkpoint, error)

	// PutSecret adds the computer's secret, or replaces the one of that
	// name (its origin and value); it reports whether it replaced one.
	PutSecret(ctx context.Context, sec Secret) (replaced bool, err error)
	// GetSecret returns one secret; ErrNotFound if there is none.
	GetSecret(ctx context.Context, computerID, name string) (Secret, error)
	// ListSecrets lists the computer's secrets by name (values included:
	// callers show names and origins only).
	ListSecrets(ctx context.Context, computerID string) ([]Secret, error)
	// DeleteSecret removes one secret; ErrNotFound if there is none.
	DeleteSecret(ctx context.Context, computerID, name string) error
}

package homes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Checkpointer moves a computer's portable home between its machine's botd
// and a Store: Checkpoint streams GET /workspace/export into Store.Put,
// Restore streams a verified Store.Open into PUT /workspace/import. Both are
// serialized per home key (one computer: one transfer at a time; botd
// refuses a second with 409 anyway). Callers checkpoint at run completion or
// failure, before an explicit stop and before idle suspension, and restore
// into a new or replacement machine before its first use.
type Checkpointer struct {
	store Store
	locks keyLocks
	// BusyWait bounds how long a transfer waits while botd answers 409
	// (still finishing a transfer whose client went away); default 30 s.
	BusyWait time.Duration
	// MaxBytes caps a checkpoint's tar (COMPUTER_HOME_MAX_BYTES; default
	// DefaultMaxBytes, at most MaxImportBytes). botd is asked to stop at
	// it, and the stream is counted as it arrives and cut one byte past
	// it: a larger checkpoint fails and the previous one is kept.
	MaxBytes int64
	// Recordings carries the screens' recordings in a checkpoint
	// (COMPUTER_HOME_RECORDINGS=1); botd leaves them out by default.
	Recordings bool
}

// DefaultMaxBytes is the default checkpoint cap: 10 GiB.
const DefaultMaxBytes = 10 << 30

// MaxImportBytes is the largest cap allowed: what botd's import accepts
// (its content cap). A checkpoint above it could be stored but never
// restored.
const MaxImportBytes = shared.WorkspaceMaxImportBytes

// NewCheckpointer returns a Checkpointer over store.
func NewCheckpointer(store Store) *Checkpointer {
	return &Checkpointer{store: store, BusyWait: 30 * time.Second, MaxBytes: DefaultMaxBytes}
}

// ValidMaxBytes checks a checkpoint cap: positive and at most
// MaxImportBytes.
func ValidMaxBytes(n int64) error {
	if n <= 0 || n > MaxImportBytes {
		return fmt.Errorf("the checkpoint cap must be between 1 and %d bytes (what an import accepts), not %d", int64(MaxImportBytes), n)
	}
	return nil
}

// Cap is the checkpoint cap in force (MaxBytes, or its default).
func (c *Checkpointer) Cap() int64 { return c.maxBytes() }

func (c *Checkpointer) maxBytes() int64 {
	if c.MaxBytes <= 0 || c.MaxBytes > MaxImportBytes {
		return min(DefaultMaxBytes, MaxImportBytes)
	}
	return c.MaxBytes
}

// whileBusy calls f until it stops failing with botd's 409 conflict (one
// transfer at a time: our own are serialized, so a 409 is botd still
// unwinding an aborted one), at most BusyWait.
func (c *Checkpointer) whileBusy(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(c.BusyWait)
	wait := 100 * time.Millisecond
	for {
		err := f()
		if client.CodeOf(err) != shared.CodeConflict || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// Store is the checkpointer's store.
func (c *Checkpointer) Store() Store { return c.store }

// Checkpoint exports m's portable home and stores it as homeKey's latest
// checkpoint. On any error (export failed or cut off, store full) the
// previous checkpoint stays and the error says so.
func (c *Checkpointer) Checkpoint(ctx context.Context, homeKey string, m providers.Machine) (Revision, error) {
	if err := ValidKey(homeKey); err != nil {
		return Revision{}, err
	}
	unlock, err := c.locks.lock(ctx, homeKey)
	if err != nil {
		return Revision{}, err
	}
	defer unlock()
	max := c.maxBytes()
	if c.Recordings {
		ctx = client.WithExportRecordings(ctx)
	}
	var body io.ReadCloser
	err = c.whileBusy(ctx, func() (err error) {
		body, err = m.ExportWorkspace(ctx, max)
		return err
	})
	if client.CodeOf(err) == shared.CodeTooLarge {
		return Revision{}, fmt.Errorf("checkpoint %s: %w of %d bytes (COMPUTER_HOME_MAX_BYTES), the previous checkpoint is kept: %w", homeKey, ErrTooLarge, max, err)
	}
	if err != nil {
		return Revision{}, fmt.Errorf("checkpoint %s: export (the previous checkpoint is kept): %w", homeKey, err)
	}
	defer body.Close()
	rev, err := c.store.Put(ctx, homeKey, &capReader{r: body, max: max})
	if err != nil {
		if errors.Is(err, client.ErrExportRefused) {
			return Revision{}, fmt.Errorf("checkpoint %s: %w of %d bytes (COMPUTER_HOME_MAX_BYTES), the previous checkpoint is kept: %w", homeKey, ErrTooLarge, max, err)
		}
		if errors.Is(err, ErrTooLarge) {
			return Revision{}, fmt.Errorf("checkpoint %s (the previous checkpoint is kept): %w", homeKey, err)
		}
		if errors.Is(err, client.ErrExportIncomplete) {
			return Revision{}, fmt.Errorf("checkpoint %s: the export was cut off (the previous checkpoint is kept): %w", homeKey, err)
		}
		return Revision{}, fmt.Errorf("checkpoint %s: %w", homeKey, err)
	}
	return rev, nil
}

// Forget removes homeKey's checkpoint and its metadata from the store
// (a destroyed computer's home), after any transfer of that key in this
// process has ended. Forgetting a key with no checkpoint is not an error.
func (c *Checkpointer) Forget(ctx context.Context, homeKey string) error {
	if err := ValidKey(homeKey); err != nil {
		return err
	}
	unlock, err := c.locks.lock(ctx, homeKey)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.store.Delete(ctx, homeKey); err != nil {
		return fmt.Errorf("forget home %s: %w", homeKey, err)
	}
	return nil
}

// Restored reports a restore.
type Restored struct {
	Revision Revision
	Summary  client.WorkspaceSummary
	Elapsed  time.Duration
}

// Restore imports homeKey's latest checkpoint into m. ok is false (and
// nothing is imported) when the key has no checkpoint yet: a new computer
// starts empty. A corrupt checkpoint is refused before a byte reaches m.
func (c *Checkpointer) Restore(ctx context.Context, homeKey string, m providers.Machine) (r Restored, ok bool, err error) {
	if err := ValidKey(homeKey); err != nil {
		return r, false, err
	}
	unlock, err := c.locks.lock(ctx, homeKey)
	if err != nil {
		return r, false, err
	}
	defer unlock()
	start := time.Now()
	rc, rev, err := c.store.Open(ctx, homeKey)
	if errors.Is(err, ErrNotFound) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("restore %s: %w", homeKey, err)
	}
	defer rc.Close()
	var sum client.WorkspaceSummary
	importOnce := func() (err error) {
		sum, err = m.ImportWorkspace(ctx, rc)
		return err
	}
	if sk, ok := rc.(io.Seeker); ok {
		err = c.whileBusy(ctx, func() error {
			if _, err := sk.Seek(0, io.SeekStart); err != nil {
				return err
			}
			return importOnce()
		})
	} else {
		err = importOnce() // a stream cannot be replayed
	}
	if err != nil {
		return r, false, fmt.Errorf("restore %s revision %d: import: %w", homeKey, rev.Number, err)
	}
	return Restored{Revision: rev, Summary: sum, Elapsed: time.Since(start)}, true, nil
}

package homes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers"
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
}

// NewCheckpointer returns a Checkpointer over store.
func NewCheckpointer(store Store) *Checkpointer { return &Checkpointer{store: store} }

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
	body, err := m.Botd().ExportWorkspace(ctx)
	if err != nil {
		return Revision{}, fmt.Errorf("checkpoint %s: export (the previous checkpoint is kept): %w", homeKey, err)
	}
	defer body.Close()
	rev, err := c.store.Put(ctx, homeKey, body)
	if err != nil {
		if errors.Is(err, client.ErrExportIncomplete) {
			return Revision{}, fmt.Errorf("checkpoint %s: the export was cut off (the previous checkpoint is kept): %w", homeKey, err)
		}
		return Revision{}, fmt.Errorf("checkpoint %s: %w", homeKey, err)
	}
	return rev, nil
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
	sum, err := m.Botd().ImportWorkspace(ctx, io.Reader(rc))
	if err != nil {
		return r, false, fmt.Errorf("restore %s revision %d: import: %w", homeKey, rev.Number, err)
	}
	return Restored{Revision: rev, Summary: sum, Elapsed: time.Since(start)}, true, nil
}

package computers

// A scope's checkpoint: a computer destroyed with keepHome=true leaves its
// latest checkpoint in the home store. The next computer made for the same
// scope (pooled or not) starts from it: the newest such checkpoint is
// imported into the new machine before the create answers. The new
// computer keeps its own home key; the old key's checkpoint is only read.

import (
	"context"
	"fmt"

	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// scopeCheckpoint finds the home key of the newest destroyed computer of
// c's scope whose checkpoint the home store still holds.
func (s *Service) scopeCheckpoint(ctx context.Context, c store.Computer) (key string, ok bool, err error) {
	if s.o.Homes == nil || c.Provider == providers.KindAttach {
		return "", false, nil
	}
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return "", false, err
	}
	for i := len(cs) - 1; i >= 0; i-- { // oldest first: newest at the end
		o := cs[i]
		if o.ID == c.ID || o.ScopeKind != c.ScopeKind || o.ScopeID != c.ScopeID ||
			o.ObservedState != store.StateDestroyed || homes.ValidKey(o.HomeKey) != nil {
			continue
		}
		_, has, err := s.o.Homes.Store().Latest(ctx, o.HomeKey)
		if err != nil {
			return "", false, fmt.Errorf("the scope's checkpoint (%s): %w", o.ID, err)
		}
		if has {
			return o.HomeKey, true, nil
		}
	}
	return "", false, nil
}

// restoreScope imports the checkpoint of home key into c's new machine m.
func (s *Service) restoreScope(ctx context.Context, c store.Computer, key string, m providers.Machine) error {
	r, ok, err := s.o.Homes.Restore(ctx, key, m)
	if err != nil {
		return fmt.Errorf("restore the scope's checkpoint: %w", err)
	}
	if ok {
		s.o.Log.Info().Str("computer", c.ID).Str("from", key).Int64("revision", r.Revision.Number).
			Dur("took", r.Elapsed).Msg("restored the scope's latest checkpoint into the new computer")
	}
	return nil
}

// restoreScopeAfterCreate is restoreScope for a computer Create made
// without the pool, once its machine runs.
func (s *Service) restoreScopeAfterCreate(ctx context.Context, c store.Computer, m providers.Machine) {
	key, ok, err := s.scopeCheckpoint(ctx, c)
	if err == nil && ok {
		err = s.restoreScope(ctx, c, key, m)
	}
	if err != nil {
		s.drop(c.ID)
		s.fail(c.ID, err)
	}
}

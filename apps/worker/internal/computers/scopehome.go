package computers

// A scope's kept home: a computer destroyed with keepHome=true leaves its
// checkpoints in the home store. Naming the scope does not reach them
// (issue 36, row 1: scope names are easy to collect, and the home holds the
// team's files, browser profiles and sign-in jar). The destroy answers a
// restore key once, to the capability holder who destroyed the computer;
// the worker keeps only its SHA-256 in memory, bound to the scope and the
// kept home (capability.RestoreKeys). A create for the scope that presents
// it (X-Restore-Key) imports that home's latest checkpoint into the new
// machine before the create answers, pooled or not, and uses the key up; a
// create without one starts empty and leaves the kept home untouched; a
// key that opens no kept home of the scope is 403, whether or not the
// scope has one. A restart forgets every key, as it forgets capabilities:
// the operator mints a fresh one for the scope's newest kept home
// (MintRestoreKey; `worker computers restore-key SCOPE`), as adopt mints a
// capability. The new computer keeps its own home key; the kept home's
// checkpoints are only read.

import (
	"context"
	"fmt"
	"net/http"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

// ErrRestoreKey is the answer to a create whose X-Restore-Key opens no
// kept home of its scope: the same whether the scope has one or not.
var ErrRestoreKey = shared.Errorf(http.StatusForbidden, shared.CodeForbidden,
	"X-Restore-Key does not open a kept home of this scope: a restore key is the one a destroy with keepHome=true answered, for the same scope, and works once; after a worker restart the operator mints a new one (worker computers restore-key SCOPE)")

// claimRestore takes the restore key presented for c's scope (none when
// key is ""): the kept home it opens, which the create gives back unless it
// restored it.
func (s *Service) claimRestore(c store.Computer, key string) (capability.Claim, error) {
	if key == "" {
		return capability.Claim{}, nil
	}
	cl, ok := s.o.RestoreKeys.Take(scopeName(c.ScopeKind, c.ScopeID), key)
	if !ok {
		return capability.Claim{}, ErrRestoreKey
	}
	if c.Provider == providers.KindAttach {
		s.o.RestoreKeys.Release(cl)
		return capability.Claim{}, bad("X-Restore-Key: an attached botd keeps its own home; nothing is restored into it")
	}
	return cl, nil
}

// scopeCheckpoint finds the newest destroyed computer of scope kind/id
// whose checkpoint the home store still holds.
func (s *Service) scopeCheckpoint(ctx context.Context, kind, id string) (store.Computer, bool, error) {
	if s.o.Homes == nil {
		return store.Computer{}, false, nil
	}
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return store.Computer{}, false, err
	}
	for i := len(cs) - 1; i >= 0; i-- { // oldest first: newest at the end
		o := cs[i]
		if o.ScopeKind != kind || o.ScopeID != id || o.Provider == providers.KindAttach ||
			o.ObservedState != store.StateDestroyed || homes.ValidKey(o.HomeKey) != nil {
			continue
		}
		has, err := s.hasCheckpoint(ctx, o.HomeKey)
		if err != nil {
			return store.Computer{}, false, fmt.Errorf("the scope's checkpoint (%s): %w", o.ID, err)
		}
		if has {
			return o, true, nil
		}
	}
	return store.Computer{}, false, nil
}

// hasCheckpoint reports whether the home store holds a checkpoint of home
// key.
func (s *Service) hasCheckpoint(ctx context.Context, key string) (bool, error) {
	_, has, err := s.o.Homes.Store().Latest(ctx, key)
	return has, err
}

// DestroyKeepingHome is DestroyWith KeepHome, and returns the restore key
// of the kept home, shown this once ("" when there is nothing to restore:
// no home store, an attached botd, no checkpoint, or a destroy that did
// not finish).
func (s *Service) DestroyKeepingHome(ctx context.Context, id string) (View, string, error) {
	v, err := s.destroy(ctx, id, false, true)
	if err != nil || v.State != store.StateDestroyed {
		return v, "", err
	}
	c, err := s.o.Store.GetComputer(ctx, id)
	if err != nil {
		return v, "", err
	}
	if s.o.Homes == nil || c.Provider == providers.KindAttach || homes.ValidKey(c.HomeKey) != nil {
		return v, "", nil
	}
	has, err := s.hasCheckpoint(ctx, c.HomeKey)
	if err != nil || !has {
		if err != nil {
			s.o.Log.Warn().Str("computer", id).Err(err).Msg("keepHome: the home store did not say whether it holds a checkpoint; no restore key (the operator can mint one)")
		}
		return v, "", nil
	}
	key, err := s.o.RestoreKeys.Mint(scopeName(c.ScopeKind, c.ScopeID), c.HomeKey)
	return v, key, err
}

// MintRestoreKey is the operator's: a new restore key for the newest kept
// home of scope kind/id (replacing any older key of that home), and the id
// of the destroyed computer it was. 404 when the scope has none.
func (s *Service) MintRestoreKey(ctx context.Context, kind, id string) (key, from string, err error) {
	o, ok, err := s.scopeCheckpoint(ctx, kind, id)
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", "", shared.Errorf(http.StatusNotFound, shared.CodeNotFound,
			"scope %s has no kept home: no computer of it was destroyed with keepHome=true leaving a checkpoint", scopeName(kind, id))
	}
	key, err = s.o.RestoreKeys.Mint(scopeName(kind, id), o.HomeKey)
	return key, o.ID, err
}

// restoreScope imports the checkpoint of home key into c's new machine m;
// false when the home store holds none.
func (s *Service) restoreScope(ctx context.Context, c store.Computer, key string, m providers.Machine) (bool, error) {
	r, ok, err := s.o.Homes.Restore(ctx, key, m)
	if err != nil {
		return false, fmt.Errorf("restore the scope's kept home: %w", err)
	}
	if ok {
		s.o.Log.Info().Str("computer", c.ID).Str("from", key).Int64("revision", r.Revision.Number).
			Dur("took", r.Elapsed).Msg("restored the scope's kept home (its restore key presented) into the new computer")
	}
	return ok, nil
}

// keptVolume is the ref of the destroyed machine of provider kind whose
// home volume was kept for home key (a HomeKeeper kind's destroy with
// keepHome), "" when kind keeps no volumes or the home was of another
// kind.
func (s *Service) keptVolume(ctx context.Context, kind, key string) (string, error) {
	if _, ok := s.o.Providers[kind].(providers.HomeKeeper); !ok {
		return "", nil
	}
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return "", err
	}
	for i := len(cs) - 1; i >= 0; i-- { // newest last
		o := cs[i]
		if o.HomeKey == key && o.Provider == kind && o.ObservedState == store.StateDestroyed && o.ProviderRef != "" {
			return o.ProviderRef, nil
		}
	}
	return "", nil
}

// restoreScopeAfterCreate is restoreScope for a computer Create made
// without the pool, once its machine runs: the kept home claim opens, if
// any. A machine that took over the kept home volume (kept, the destroyed
// machine's ref) has it already: nothing is imported. A failed restore is
// recorded on the computer.
func (s *Service) restoreScopeAfterCreate(ctx context.Context, c store.Computer, m providers.Machine, claim capability.Claim, kept string) bool {
	if claim.Home == "" {
		return false
	}
	if hk, ok := s.o.Providers[c.Provider].(providers.HomeKeeper); ok && kept != "" {
		adopted, err := hk.HomeAdopted(ctx, c.ProviderRef)
		if err != nil {
			s.o.Log.Warn().Str("computer", c.ID).Err(err).Msg("whether the new machine took over the kept home is unknown; importing the checkpoint")
		}
		if adopted {
			s.o.Log.Info().Str("computer", c.ID).Str("from", claim.Home).Msg("the new computer took over the scope's kept home volume (its restore key presented)")
			return true
		}
	}
	if s.o.Homes == nil {
		return false
	}
	ok, err := s.restoreScope(ctx, c, claim.Home, m)
	if err != nil {
		s.drop(c.ID)
		s.fail(c.ID, err)
	}
	return ok
}

package computers

// Worker-owned homes (CONTROL-PLANE.md, Homes; seed 000: "Docker mounts the
// Rakazo-owned home directly and only advances its revision marker at those
// boundaries"). A local or docker machine does not own its home: the worker
// keeps it at
//
//	LiveHomes/<home-key>.<kind>/home
//
// (LiveHomes is WORKER_MACHINES_DIR/homes), the local machine's BOTD_HOME
// and bind-mounted on the docker machine's /home. It lives in the machines
// directory, not in DATA_DIR: DATA_DIR is 0700 and holds the worker's
// secrets, while a local computer's users must traverse to their home (a
// home under a 0700 directory stops Codex), and docker already bind-mounts
// its token files from there. Each home's parent directory is the
// provider's to secure (local: root's, the computer's group, 0710).
//
// Because the home outlives its machine, a checkpoint at a boundary (a
// run's end, before a stop or an idle suspension) with the local home
// store exports nothing: it records the next revision (time and size) and
// no browser is touched. A full export through botd (browsers quiesced one
// at a time) is made only where a copy must leave the machine: with the S3
// home store (every checkpoint uploads), for a move to another kind, and
// for the explicit checkpoint route (POST …/checkpoint), whose tar is what
// restores a worker-owned home that was itself lost.
//
// A home that is missing (lost, or never made for this kind) is made empty
// with a restore-pending marker beside it; the machine then starts on it
// as a new one (the old one destroyed first: two botds never share a home)
// and the latest checkpoint is imported before first use; only then does
// the marker go. A restore a crash cut short is started again from empty.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

const restorePending = "restore-pending"

// direct reports whether machines of kind use a worker-owned home.
func (s *Service) direct(kind string) bool {
	if s.o.LiveHomes == "" || (kind != providers.KindLocal && kind != providers.KindDocker) {
		return false
	}
	// A remote engine cannot mount this host's directories.
	if h, ok := s.o.Providers[kind].(interface{ MountsHostDirs() bool }); ok && !h.MountsHostDirs() {
		return false
	}
	return true
}

// homeParent is the directory holding c's worker-owned home for kind.
func (s *Service) homeParent(c store.Computer, kind string) string {
	return filepath.Join(s.o.LiveHomes, c.HomeKey+"."+kind)
}

// HomeDir is c's worker-owned home for kind ("" when machines of kind
// have their own).
func (s *Service) HomeDir(c store.Computer, kind string) string {
	if !s.direct(kind) || homes.ValidKey(c.HomeKey) != nil {
		return ""
	}
	return filepath.Join(s.homeParent(c, kind), "home")
}

// prepareHome returns c's worker-owned home for kind, making it when it is
// missing, and making it again (empty) when a restore into it did not
// finish or when empty is set. fresh: it is new and empty, and must get
// the latest checkpoint before first use (then homeRestored).
func (s *Service) prepareHome(c store.Computer, kind string, empty bool) (dir string, fresh bool, err error) {
	if err := homes.ValidKey(c.HomeKey); err != nil {
		return "", false, err
	}
	// Others pass through to their own home, never list the homes.
	if err := os.MkdirAll(s.o.LiveHomes, 0o711); err != nil {
		return "", false, err
	}
	if err := os.Chmod(s.o.LiveHomes, 0o711); err != nil {
		return "", false, err
	}
	parent := s.homeParent(c, kind)
	dir = filepath.Join(parent, "home")
	pending := filepath.Join(parent, restorePending)
	if !empty && exists(dir) && !exists(pending) {
		return dir, false, nil
	}
	if err := os.Mkdir(parent, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", false, err
	}
	f, err := os.OpenFile(pending, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return "", false, err
	}
	f.Close()
	if err := os.RemoveAll(dir); err != nil {
		return "", false, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", false, err
	}
	return dir, true, nil
}

// homeRestored records that c's home for kind holds what it should (the
// restore is done, or there was nothing to restore).
func (s *Service) homeRestored(c store.Computer, kind string) error {
	err := os.Remove(filepath.Join(s.homeParent(c, kind), restorePending))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// removeHome removes c's worker-owned home for kind (its machine gone).
func (s *Service) removeHome(c store.Computer, kind string) error {
	if !s.direct(kind) || homes.ValidKey(c.HomeKey) != nil {
		return nil
	}
	return os.RemoveAll(s.homeParent(c, kind))
}

// removeHomes removes every worker-owned home of c (a destroyed computer).
func (s *Service) removeHomes(c store.Computer) error {
	return errors.Join(s.removeHome(c, providers.KindLocal), s.removeHome(c, providers.KindDocker))
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// homeSize is the bytes of the regular files under dir.
func homeSize(ctx context.Context, dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != dir {
				return nil // removed meanwhile
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}

// markerOnly reports whether c's boundary checkpoints only advance the
// revision marker: its machine uses a worker-owned home and the home
// store is this host's (S3 homes upload at every checkpoint).
func (s *Service) markerOnly(c store.Computer) bool {
	if s.o.Homes == nil || !s.direct(c.Provider) {
		return false
	}
	_, local := s.o.Homes.Store().(*homes.Local)
	return local
}

// lockCheckpoints serializes c's checkpoints; the func unlocks.
func (s *Service) lockCheckpoints(id string) func() {
	s.mu.Lock()
	l := s.checkpointing[id]
	if l == nil {
		l = &sync.Mutex{}
		s.checkpointing[id] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// fence checks a run's lease before a checkpoint is written.
func (s *Service) fence(ctx context.Context, cp *store.Checkpoint, f *Fence) error {
	if f == nil {
		return nil
	}
	l, err := s.o.Store.GetLease(ctx, f.LeaseKey)
	if err != nil {
		return err
	}
	if l.Epoch != f.Epoch {
		return fmt.Errorf("checkpoint: %w", store.ErrStaleEpoch)
	}
	cp.LeaseKey, cp.Epoch = f.LeaseKey, f.Epoch
	return nil
}

// nextRevision is the revision after c's latest recorded checkpoint.
func (s *Service) nextRevision(ctx context.Context, id string) (int64, error) {
	latest, err := s.o.Store.LatestCheckpoint(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	return latest.Revision + 1, nil
}

// mark records a checkpoint of c's worker-owned home without exporting it:
// the next revision, now, and the home's size. A home larger than the
// checkpoint cap is refused like an export would be (it could not be
// exported for a move or an upload), the previous checkpoint kept.
func (s *Service) mark(ctx context.Context, c store.Computer, f *Fence) (store.Checkpoint, error) {
	defer s.lockCheckpoints(c.ID)()
	cp := store.Checkpoint{ComputerID: c.ID}
	if err := s.fence(ctx, &cp, f); err != nil {
		return cp, err
	}
	dir := s.HomeDir(c, c.Provider)
	if !exists(dir) {
		return cp, fmt.Errorf("checkpoint %s: the worker-owned home %s is missing (the previous checkpoint is kept)", c.HomeKey, dir)
	}
	size, err := homeSize(ctx, dir)
	if err != nil {
		return cp, fmt.Errorf("checkpoint %s: measure the home (the previous checkpoint is kept): %w", c.HomeKey, err)
	}
	if max := s.o.Homes.Cap(); size > max {
		return cp, fmt.Errorf("checkpoint %s: %w of %d bytes (COMPUTER_HOME_MAX_BYTES): the home holds %d bytes, the previous checkpoint is kept", c.HomeKey, homes.ErrTooLarge, max, size)
	}
	if cp.Revision, err = s.nextRevision(ctx, c.ID); err != nil {
		return cp, err
	}
	cp.Size, cp.At = size, time.Now().UTC().Truncate(time.Millisecond)
	if err := s.o.Store.PutCheckpoint(ctx, cp); err != nil {
		return cp, fmt.Errorf("checkpoint %d: %w", cp.Revision, err)
	}
	s.o.Log.Info().Str("computer", c.ID).Int64("revision", cp.Revision).Int64("size", cp.Size).Msg("checkpoint (revision marker of the worker-owned home)")
	return cp, nil
}

// Export exports computer id's home through its machine's botd into the
// home store now (POST /v1/computers/{id}/checkpoint): a full copy whatever
// the provider, which is what restores a worker-owned home that was itself
// lost. botd quiesces the browsers one at a time meanwhile.
func (s *Service) Export(ctx context.Context, id string) (store.Checkpoint, error) {
	if s.o.Homes == nil {
		return store.Checkpoint{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "this worker keeps no checkpoints")
	}
	c, err := s.Get(ctx, id)
	if err != nil {
		return store.Checkpoint{}, err
	}
	if c.Provider == providers.KindAttach {
		return store.Checkpoint{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "an attached botd is not checkpointed by this worker")
	}
	m, err := s.Machine(ctx, id)
	if err != nil {
		return store.Checkpoint{}, err
	}
	return s.export(ctx, c, m, nil)
}

// leaveOldMachine ends the machine of c (c.ProviderRef) before a new one
// starts on c's new, empty worker-owned home. A machine that used a
// worker-owned home lost it: it is destroyed, so no botd runs on the home
// being restored. A machine with a home of its own (made before homes were
// the worker's) is exported into the home store first, then destroyed;
// when it does not answer or its export fails it is left as it is (its
// home is newer than the home store's copy: the operator can still reach
// it), and the new machine gets the latest checkpoint there is.
func (s *Service) leaveOldMachine(ctx context.Context, c store.Computer, spec providers.Spec) error {
	p := s.o.Providers[c.Provider]
	if p == nil {
		return nil
	}
	if o, ok := p.(interface {
		OwnHome(ctx context.Context, ref string) (bool, error)
	}); ok {
		own, err := o.OwnHome(ctx, c.ProviderRef)
		if err == nil && own {
			var m providers.Machine
			m, err = p.Reconnect(ctx, c.ProviderRef, spec)
			if err == nil && s.o.Homes != nil {
				var cp store.Checkpoint
				if cp, err = s.export(ctx, c, m, nil); err == nil {
					s.o.Log.Info().Str("computer", c.ID).Int64("revision", cp.Revision).Msg("a machine with a home of its own: exported it, a new machine on a worker-owned home takes it over")
				}
			}
			if err != nil {
				s.o.Log.Warn().Str("computer", c.ID).Str("ref", c.ProviderRef).Err(err).
					Msg("a machine with a home of its own could not be exported: left as it is; a new machine on a worker-owned home starts from the latest checkpoint")
				return nil
			}
		}
	}
	if err := p.Destroy(ctx, c.ProviderRef); err != nil {
		return fmt.Errorf("the worker-owned home is new: destroy the machine that used the old one: %w", err)
	}
	s.o.Log.Warn().Str("computer", c.ID).Msg("the worker-owned home was missing: a new machine restores it from the latest checkpoint")
	return nil
}

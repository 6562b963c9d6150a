package computers

// Machine lifecycle through providers: replacement of a gone machine (with
// the latest checkpoint restored before first use), checkpoints of the
// portable home, idle suspension, and reconciling what each provider holds
// with the store.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

// Fence is the run lease a checkpoint is made under: its writes carry the
// epoch and a stale one is refused.
type Fence struct {
	LeaseKey string
	Epoch    int64
}

// ensure returns the computer's machine through providers.Ensure: the
// stored ref goes back only to its own kind; a gone machine (or none)
// makes a replacement that imports the latest checkpoint before anything
// uses it, and the store records the new ref.
func (s *Service) ensure(ctx context.Context, c store.Computer, spec providers.Spec) (providers.Machine, error) {
	prevRef := c.ProviderRef
	// A replacement of a machine with a worker-owned home mounts that home
	// again: nothing to restore, unless the home itself is new.
	fresh := true
	if s.direct(c.Provider) {
		dir, f, err := s.prepareHome(c, c.Provider, false)
		if err != nil {
			return nil, fmt.Errorf("the worker-owned home: %w", err)
		}
		spec.HomeDir, fresh = dir, f
		if fresh && prevRef != "" {
			if err := s.leaveOldMachine(ctx, c, spec); err != nil {
				return nil, err
			}
			prevRef = ""
		}
	}
	var restore providers.RestoreFunc
	if s.o.Homes != nil || s.direct(c.Provider) {
		restore = func(ctx context.Context, m providers.Machine) error {
			if !fresh {
				return nil
			}
			if s.o.Homes != nil {
				r, ok, err := s.o.Homes.Restore(ctx, c.HomeKey, m)
				if err != nil {
					return err
				}
				if ok {
					s.o.Log.Info().Str("computer", c.ID).Int64("revision", r.Revision.Number).
						Dur("took", r.Elapsed).Msg("restored the latest checkpoint into a replacement machine")
				}
			}
			if s.direct(c.Provider) {
				return s.homeRestored(c, c.Provider)
			}
			return nil
		}
	}
	e, err := providers.Ensure(ctx, providers.Registry(s.o.Providers), c.Provider, c.Provider, prevRef, spec, restore)
	if err != nil {
		return nil, err
	}
	if e.Replaced {
		ref := e.Ref
		if _, err := s.o.Store.UpdateComputer(ctx, c.ID, store.StateUpdate{ProviderRef: &ref}); err != nil {
			// The store does not know the new machine: do not leave it behind.
			if p := s.o.Providers[c.Provider]; p != nil {
				_ = p.Destroy(context.WithoutCancel(ctx), e.Ref)
			}
			return nil, err
		}
		s.o.Log.Info().Str("computer", c.ID).Str("provider", c.Provider).Msg("the machine was gone: replaced it")
		if prevRef != "" {
			// Whatever the gone machine left (a volume, a token file) goes.
			if p := s.o.Providers[c.Provider]; p != nil {
				old := c.ProviderRef
				go func() {
					dctx, cancel := context.WithTimeout(context.Background(), TransitionTimeout)
					defer cancel()
					_ = p.Destroy(dctx, old)
				}()
			}
		}
	}
	return e.Machine, nil
}

// Checkpoint checkpoints computer id's portable home at a boundary (a
// run's end) and records its metadata: a worker-owned home with the local
// home store only advances its revision marker (nothing is exported, no
// browser touched); otherwise the home is exported into the home store
// (uploaded, with S3 homes). Made for a run, f carries the run's lease and
// a stale epoch is refused before anything is written. A failed checkpoint
// leaves the previous one intact.
func (s *Service) Checkpoint(ctx context.Context, id string, f *Fence) (store.Checkpoint, error) {
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
	return s.checkpoint(ctx, c, m, f)
}

// checkpoint is a boundary's checkpoint (see Checkpoint).
func (s *Service) checkpoint(ctx context.Context, c store.Computer, m providers.Machine, f *Fence) (cp store.Checkpoint, err error) {
	start := time.Now()
	defer func() { s.o.Metrics.Checkpoint(cp.Size, err == nil, time.Since(start)) }()
	if s.markerOnly(c) {
		return s.mark(ctx, c, f)
	}
	return s.export(ctx, c, m, f)
}

// export exports c's home through m's botd into the home store. Its
// revision follows the latest recorded one (revision markers included).
func (s *Service) export(ctx context.Context, c store.Computer, m providers.Machine, f *Fence) (store.Checkpoint, error) {
	defer s.lockCheckpoints(c.ID)()
	cp := store.Checkpoint{ComputerID: c.ID}
	if err := s.fence(ctx, &cp, f); err != nil {
		return cp, err
	}
	rev, err := s.o.Homes.Checkpoint(ctx, c.HomeKey, m)
	if err != nil {
		return cp, err
	}
	next, err := s.nextRevision(ctx, c.ID)
	if err != nil {
		return cp, err
	}
	cp.Revision, cp.Size, cp.At = max(rev.Number, next), rev.Size, rev.At
	if err := s.o.Store.PutCheckpoint(ctx, cp); err != nil {
		return cp, fmt.Errorf("checkpoint %d stored but not recorded: %w", rev.Number, err)
	}
	s.o.Log.Info().Str("computer", c.ID).Int64("revision", rev.Number).Int64("size", rev.Size).Msg("checkpoint")
	return cp, nil
}

// live returns the machine of a computer this process is connected to, or
// reconnects the same ref (never a replacement); nil when it is not running.
func (s *Service) live(ctx context.Context, c store.Computer) providers.Machine {
	s.mu.Lock()
	m := s.machines[c.ID]
	s.mu.Unlock()
	if m != nil || c.ObservedState != store.StateRunning || c.ProviderRef == "" {
		return m
	}
	p := s.o.Providers[c.Provider]
	spec, err := s.spec(c)
	if p == nil || err != nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	m, err = p.Reconnect(rctx, c.ProviderRef, spec)
	if err != nil {
		return nil
	}
	return m
}

// checkpointBefore checkpoints a running machine before it stops (what);
// a failure is logged and recorded as the computer's last error, and the
// previous checkpoint stays.
func (s *Service) checkpointBefore(ctx context.Context, c store.Computer, what string) {
	if s.o.Homes == nil || c.Provider == providers.KindAttach {
		return
	}
	m := s.live(ctx, c)
	if m == nil {
		return
	}
	if _, err := s.checkpoint(ctx, c, m, nil); err != nil {
		msg := fmt.Sprintf("checkpoint before %s failed (the previous one is kept): %v", what, err)
		_, _ = s.o.Store.UpdateComputer(context.WithoutCancel(ctx), c.ID, store.StateUpdate{LastError: &msg})
		s.o.Log.Warn().Str("computer", c.ID).Err(err).Msg("checkpoint before " + what)
	}
}

// suspended: the computer should run but its machine was stopped for
// being idle; the next use starts it again.
func suspended(c store.Computer) bool {
	return c.DesiredState == store.StateRunning && c.ObservedState == store.StateStopped
}

// SuspendIdle checkpoints and stops every running machine that nobody used
// for idle and that has no live run. The computer stays desired-running:
// its next use starts the machine again.
func (s *Service) SuspendIdle(ctx context.Context, idle time.Duration) error {
	if idle <= 0 {
		return nil
	}
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, c := range cs {
		if c.DesiredState != store.StateRunning || c.ObservedState != store.StateRunning || c.Provider == providers.KindAttach || !s.owns(c.ID) {
			continue
		}
		p := s.o.Providers[c.Provider]
		if p == nil || !p.Describe().Capabilities.Stop {
			continue
		}
		s.mu.Lock()
		last, ok := s.lastUsed[c.ID]
		if !ok {
			s.lastUsed[c.ID] = now // first seen by this process: idle from now
		}
		held := s.inUse[c.ID] > 0
		s.mu.Unlock()
		if held || !ok || now.Sub(last) < idle {
			continue
		}
		live, err := s.o.Store.ListRuns(ctx, c.ID, store.RunQueued, store.RunRunning, store.RunWaitingTakeover)
		if err != nil || len(live) > 0 {
			continue
		}
		s.suspend(ctx, c, p, now.Sub(last))
	}
	return nil
}

func (s *Service) suspend(ctx context.Context, c store.Computer, p providers.Provider, idleFor time.Duration) {
	s.checkpointBefore(ctx, c, "idle suspension")
	s.drop(c.ID)
	dl := time.Now().Add(TransitionTimeout)
	if _, err := s.o.Store.UpdateComputer(ctx, c.ID, store.StateUpdate{Observed: ptr(store.StateStopping), Deadline: &dl}); err != nil {
		return
	}
	if err := p.Stop(ctx, c.ProviderRef); err != nil && !errors.Is(err, providers.ErrGone) {
		s.fail(c.ID, fmt.Errorf("idle suspension: %w", err))
		return
	}
	zero := time.Time{}
	_, _ = s.o.Store.UpdateComputer(ctx, c.ID, store.StateUpdate{Observed: ptr(store.StateStopped), Deadline: &zero})
	s.mu.Lock()
	delete(s.lastUsed, c.ID)
	s.mu.Unlock()
	s.o.Log.Info().Str("computer", c.ID).Dur("idle", idleFor.Round(time.Second)).Msg("suspended an idle computer (checkpoint, then stop)")
}

// lister is a provider that can list the machines it holds.
type lister interface {
	List(ctx context.Context) ([]providers.Listed, error)
}

// ReconcileMachines lists what each provider holds (Docker's labelled
// containers, local's directories) against the store: the machine of a
// destroyed computer (a destroy a crash cut short) is destroyed; a machine
// that is not its computer's current ref, or belongs to a computer this
// store does not know (another worker's), is left alone and logged.
func (s *Service) ReconcileMachines(ctx context.Context) error {
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return err
	}
	known := map[string]store.Computer{}
	for _, c := range cs {
		known[c.ID] = c
	}
	var errs []error
	for kind, p := range s.o.Providers {
		l, ok := p.(lister)
		if !ok || kind == providers.KindSingleScreen {
			continue // single-screen's machines are its inner provider's
		}
		listed, err := l.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s machines: %w", kind, err))
			continue
		}
		for _, m := range listed {
			c, ok := known[m.ComputerID]
			switch {
			case !ok:
				s.o.Log.Debug().Str("provider", kind).Str("computer", m.ComputerID).Msg("a machine of a computer this worker does not know; left alone")
			case c.ObservedState == store.StateDestroyed:
				s.o.Log.Info().Str("provider", kind).Str("computer", c.ID).Msg("the machine of a destroyed computer: destroying it")
				if err := p.Destroy(ctx, m.Ref); err != nil {
					errs = append(errs, fmt.Errorf("destroy the %s machine of destroyed %s: %w", kind, c.ID, err))
				}
			case m.Ref != c.ProviderRef:
				s.o.Log.Warn().Str("provider", kind).Str("computer", c.ID).Msg("a machine that is not the computer's current one; left alone")
			}
		}
	}
	return errors.Join(errs...)
}

// KeepsCheckpoints reports whether this worker checkpoints computer id's
// home (it keeps homes and the machine is its own, not an attached botd).
func (s *Service) KeepsCheckpoints(ctx context.Context, id string) bool {
	if s.o.Homes == nil {
		return false
	}
	c, err := s.Get(ctx, id)
	return err == nil && c.Provider != providers.KindAttach
}

// Move puts computer id on a machine of another provider kind: the current
// machine is checkpointed (when it answers), a machine of kind is made
// through providers.Ensure (a kind change: the old ref never goes to the new
// kind) with the latest checkpoint imported before first use, the store
// records the new kind and ref, and the old machine is destroyed.
func (s *Service) Move(ctx context.Context, id, kind string) (View, error) {
	c, err := s.Get(ctx, id)
	if err != nil {
		return View{}, err
	}
	if _, ok := s.o.Providers[kind]; !ok || kind == providers.KindAttach {
		return View{}, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "provider: %q is not a kind this worker can make machines of", kind)
	}
	if c.Provider == providers.KindAttach {
		return View{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "an attached botd cannot move")
	}
	if kind == c.Provider {
		return s.Start(ctx, id)
	}
	if s.direct(c.Provider) && s.o.Homes != nil {
		// The worker-owned home is newer than any copy in the home store
		// (boundaries only mark it): the move exports it first, or does
		// not happen.
		m, err := s.Machine(ctx, id)
		if err == nil {
			_, err = s.export(ctx, c, m, nil)
		}
		if err != nil {
			return View{}, shared.Errorf(http.StatusBadGateway, shared.CodeUnavailable, "move to %s: the home could not be exported first, nothing was moved: %v", kind, err)
		}
	} else {
		s.checkpointBefore(ctx, c, "a move to "+kind)
	}
	s.drop(id)
	dl := time.Now().Add(TransitionTimeout)
	if _, err := s.o.Store.UpdateComputer(ctx, id, store.StateUpdate{Desired: ptr(store.StateRunning), Observed: ptr(store.StateStarting), Deadline: &dl}); err != nil {
		return View{}, err
	}
	spec, err := s.spec(c)
	if err != nil {
		s.fail(id, err)
		return View{}, err
	}
	// The new kind's machine is made from its default template (the
	// computer's was the old kind's).
	tpl, err := providers.CheckTemplate(s.o.Providers[kind], kind, "")
	if err != nil {
		s.fail(id, err)
		return View{}, err
	}
	spec.Template = tpl
	rctx, cancel := context.WithTimeout(ctx, ReconcileTimeout)
	defer cancel()
	if s.direct(kind) {
		// The new kind's home starts empty and takes the export.
		if spec.HomeDir, _, err = s.prepareHome(c, kind, true); err != nil {
			s.fail(id, fmt.Errorf("move to %s: the worker-owned home: %w", kind, err))
			return View{}, err
		}
	}
	var restore providers.RestoreFunc
	if s.o.Homes != nil || s.direct(kind) {
		restore = func(ctx context.Context, m providers.Machine) error {
			if s.o.Homes != nil {
				if _, _, err := s.o.Homes.Restore(ctx, c.HomeKey, m); err != nil {
					return err
				}
			}
			if s.direct(kind) {
				return s.homeRestored(c, kind)
			}
			return nil
		}
	}
	e, err := providers.Ensure(rctx, providers.Registry(s.o.Providers), kind, c.Provider, c.ProviderRef, spec, restore)
	if err != nil {
		s.fail(id, fmt.Errorf("move to %s: %w", kind, err))
		c, _ = s.o.Store.GetComputer(context.WithoutCancel(ctx), id)
		return ViewOf(c), nil
	}
	zero := time.Time{}
	empty := ""
	if _, err := s.o.Store.UpdateComputer(ctx, id, store.StateUpdate{Provider: &kind, ProviderRef: &e.Ref, Template: &tpl,
		Observed: ptr(store.StateRunning), Deadline: &zero, LastError: &empty}); err != nil {
		_ = s.o.Providers[kind].Destroy(context.WithoutCancel(ctx), e.Ref)
		return View{}, err
	}
	s.mu.Lock()
	s.machines[id] = e.Machine
	s.lastUsed[id] = time.Now()
	s.mu.Unlock()
	if old := s.o.Providers[c.Provider]; old != nil && c.ProviderRef != "" {
		if err := old.Destroy(context.WithoutCancel(ctx), c.ProviderRef); err != nil {
			s.o.Log.Warn().Str("computer", id).Err(err).Msg("destroy the machine left behind by a move")
		} else if err := s.removeHome(c, c.Provider); err != nil {
			s.o.Log.Warn().Str("computer", id).Err(err).Msg("remove the worker-owned home left behind by a move")
		}
	}
	s.o.Log.Info().Str("computer", id).Str("from", c.Provider).Str("to", kind).Msg("moved to another provider")
	c, err = s.o.Store.GetComputer(ctx, id)
	return ViewOf(c), err
}

// CheckMachines asks every machine this process holds for its health; one
// that does not answer is dropped and its computer marked error with the
// reason, so the next use reconnects it — or, when it is gone (removed
// behind the worker's back), replaces it from the latest checkpoint.
func (s *Service) CheckMachines(ctx context.Context) {
	s.mu.Lock()
	held := make(map[string]providers.Machine, len(s.machines))
	for id, m := range s.machines {
		held[id] = m
	}
	s.mu.Unlock()
	for id, m := range held {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := m.Health(hctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		s.mu.Lock()
		if s.machines[id] == m {
			delete(s.machines, id)
		}
		s.mu.Unlock()
		s.fail(id, fmt.Errorf("the machine stopped answering (%v); the next use reconnects or replaces it", err))
	}
}

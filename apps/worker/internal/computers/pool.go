package computers

// The warm pool (WORKER_POOL, issue 24.3): machines provisioned and healthy
// ahead of demand, so a create hands one out instead of waiting for a botd
// (and a container) to start.
//
// What is pooled, and why that much. A local or docker machine uses the
// worker-owned home LiveHomes/<home-key>.<kind>/home (homedirect.go): it
// is local's BOTD_HOME, fixed when botd starts, and docker's /home bind
// mount, fixed when the container is created. Neither can be swapped under
// a running machine. So a pooled machine is made for a computer that does
// not exist yet: the pool draws the computer's id first, and the machine is
// provisioned exactly as Create would provision that computer — its own
// sealed botd token (sealed under that id), its own empty worker-owned home
// (home key = that id), its own users (local) or container (docker) — and
// started until botd answers. A create that takes it becomes that computer:
// the store row gets the pooled id, ref and sealed token, and nothing on the
// machine changes. Nothing of any team was ever on it, and it is handed out
// once: a pooled machine goes back to the pool only when the create that
// took it failed before the store knew it (a scope already taken).
//
// The first screen. botd names a screen, its browser profile, its view
// ports and its leases after the bot that uses it, and the bot is not known
// until it is added. So the pool asks botd for a spare screen (POST
// /screens/spare): the stack of a screen (Xvfb, the session, x11vnc)
// started under no id, which the first screen that starts on the machine
// takes — its profile made and its hooks run then, its session already
// drawn. A browser starts, as always, when the bot first uses one.
//
// A create that presents a restore key of its scope (X-Restore-Key, see
// scopehome.go) restores the kept home it opens into the new machine,
// pooled or not, before the create answers; without one the machine
// starts empty whatever the scope kept.
//
// Health before hand-out: a pooled machine is asked for botd's health (a
// short deadline) when it is taken; one that does not answer ok, or is
// older than MaxAge, is destroyed and replaced, never handed out, and the
// next pooled one is tried (or the create provisions one as without a pool).
// Ready machines are also checked every Check interval.
//
// The ledger (DATA_DIR/pool/<id>.json, written before the machine is
// provisioned) is what a worker that stopped without destroying its pool
// leaves behind: the next start destroys what it names, unless the store
// knows the id (it was handed out just before the worker stopped).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

// PoolKinds are the provider kinds a pool can hold: their machines are made
// and started by this worker (an attached botd is the operator's; a cloud
// sandbox kept idle is billed, and is not pooled here). A kubernetes pool
// is ready pods on the cluster, each with its token in its Secret from the
// start (drawn for a computer id ahead), so a claim pushes nothing into
// the pod's spec: nothing restarts it.
var PoolKinds = []string{providers.KindLocal, providers.KindDocker, providers.KindKubernetes}

// MaxPoolSize caps one kind's pool.
const MaxPoolSize = 16

// refillDelay is how long a refill waits after a hand-out.
const refillDelay = time.Second

// ParsePool reads WORKER_POOL: comma-separated kind=count pairs (e.g.
// "docker=2,local=1"); "" is no pool. Each kind at most once, one of
// PoolKinds, count 0-MaxPoolSize.
func ParsePool(v string) (map[string]int, error) {
	out := map[string]int{}
	v = strings.TrimSpace(v)
	if v == "" {
		return out, nil
	}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		kind, n, ok := strings.Cut(part, "=")
		kind, n = strings.TrimSpace(kind), strings.TrimSpace(n)
		if !ok || kind == "" || n == "" {
			return nil, fmt.Errorf("WORKER_POOL=%q: %q is not kind=count (e.g. WORKER_POOL=docker=2,local=1)", v, part)
		}
		known := false
		for _, k := range PoolKinds {
			known = known || k == kind
		}
		if !known {
			return nil, fmt.Errorf("WORKER_POOL=%q: %q cannot be pooled (pooled kinds: %s)", v, kind, strings.Join(PoolKinds, ", "))
		}
		if _, dup := out[kind]; dup {
			return nil, fmt.Errorf("WORKER_POOL=%q: %s is given twice", v, kind)
		}
		c, err := strconv.Atoi(n)
		if err != nil || c < 0 || c > MaxPoolSize {
			return nil, fmt.Errorf("WORKER_POOL=%q: %s=%s: want a whole number from 0 to %d", v, kind, n, MaxPoolSize)
		}
		out[kind] = c
	}
	return out, nil
}

// PoolOptions configures the warm pool.
type PoolOptions struct {
	// Sizes is how many ready machines to keep per provider kind.
	Sizes map[string]int
	// Dir is the pool's ledger (DATA_DIR/pool).
	Dir string
	// Check is how often ready machines are health-checked (default 20 s).
	Check time.Duration
	// MaxAge is when a pooled machine counts as stale and is replaced
	// (default 1 h).
	MaxAge time.Duration
}

// pooled is one ready machine, made for the computer id it will become.
type pooled struct {
	id, kind, ref string
	sealed        []byte // the botd token, sealed under id
	m             providers.Machine
	born          time.Time
}

// ledgerEntry is DATA_DIR/pool/<id>.json.
type ledgerEntry struct {
	ID   string    `json:"id"`
	Kind string    `json:"kind"`
	Ref  string    `json:"ref,omitempty"`
	At   time.Time `json:"at"`
}

// pool keeps PoolOptions.Sizes machines ready.
type pool struct {
	s   *Service
	o   PoolOptions
	log zerolog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}
	fills  sync.WaitGroup

	// mu guards ready, filling, nextTry, failures, lastErr and handed.
	mu       sync.Mutex
	ready    map[string][]*pooled
	filling  map[string]bool
	nextTry  map[string]time.Time
	failures map[string]int
	lastErr  map[string]string
	handed   map[string]int
}

// StartPool starts the warm pool (no-op for no sizes): leftovers of an
// earlier worker named in the ledger are destroyed first, then machines are
// made in the background, one at a time per kind.
func (s *Service) StartPool(ctx context.Context, o PoolOptions) error {
	total := 0
	for _, n := range o.Sizes {
		total += n
	}
	if o.Dir == "" {
		return errors.New("pool: no ledger directory")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	if o.Check <= 0 {
		o.Check = 20 * time.Second
	}
	if o.MaxAge <= 0 {
		o.MaxAge = time.Hour
	}
	for kind, n := range o.Sizes {
		if _, ok := s.o.Providers[kind]; !ok && n > 0 {
			return fmt.Errorf("WORKER_POOL: this worker has no %s provider", kind)
		}
	}
	p := &pool{s: s, o: o, log: s.o.Log.With().Str("sub", "pool").Logger(),
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		ready: map[string][]*pooled{}, filling: map[string]bool{}, nextTry: map[string]time.Time{},
		failures: map[string]int{}, lastErr: map[string]string{}, handed: map[string]int{}}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	s.pool = p
	s.mu.Unlock()
	if total > 0 {
		var kinds []string
		for k, n := range o.Sizes {
			kinds = append(kinds, k+"="+strconv.Itoa(n))
		}
		sort.Strings(kinds)
		p.log.Info().Str("pool", strings.Join(kinds, ",")).Msg("pool: keeping machines ready ahead of demand")
	}
	go p.run()
	return nil
}

// ClosePool stops refilling and destroys every pooled machine (the worker
// is stopping); safe without a pool and twice.
func (s *Service) ClosePool(ctx context.Context) {
	p := s.thePool()
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
	p.fills.Wait()
	p.mu.Lock()
	var all []*pooled
	for k, l := range p.ready {
		all = append(all, l...)
		delete(p.ready, k)
	}
	p.mu.Unlock()
	for _, pe := range all {
		p.discard(ctx, pe, "the worker is stopping")
	}
	if len(all) > 0 {
		p.log.Info().Int("machines", len(all)).Msg("pool: destroyed the pooled machines at shutdown")
	}
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pool) run() {
	defer close(p.done)
	p.reconcile(p.ctx)
	tick := time.NewTicker(p.o.Check)
	defer tick.Stop()
	for {
		p.top()
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
			p.check(p.ctx)
		}
	}
}

// top starts a fill for every kind below its size (one at a time per
// kind: the machines of a pool start one after the other, not all at once
// on a shared host).
func (p *pool) top() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for kind, want := range p.o.Sizes {
		if p.filling[kind] || len(p.ready[kind]) >= want || now.Before(p.nextTry[kind]) || p.ctx.Err() != nil {
			continue
		}
		p.filling[kind] = true
		p.fills.Add(1)
		go func() {
			defer p.fills.Done()
			err := p.fill(p.ctx, kind)
			p.mu.Lock()
			p.filling[kind] = false
			if err != nil && p.ctx.Err() == nil {
				p.failures[kind]++
				backoff := min(time.Second<<min(p.failures[kind], 6), time.Minute)
				p.nextTry[kind] = time.Now().Add(backoff)
				p.lastErr[kind] = err.Error()
				p.log.Warn().Str("provider", kind).Err(err).Dur("retry_in", backoff).Msg("pool: could not make a machine")
				time.AfterFunc(backoff, p.poke)
			} else if err == nil {
				p.failures[kind] = 0
				p.lastErr[kind] = ""
			}
			p.mu.Unlock()
			p.poke()
		}()
	}
}

// fill makes one machine of kind for a computer id drawn now, and adds it
// to the ready list once its botd answers.
func (p *pool) fill(ctx context.Context, kind string) error {
	s := p.s
	prov := s.o.Providers[kind]
	start := time.Now()
	pe := &pooled{id: newID("c_"), kind: kind}
	var tok [32]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	sealed, err := s.o.Sealer.Seal([]byte(token), pe.id)
	if err != nil {
		return err
	}
	pe.sealed = sealed
	if err := p.writeLedger(ledgerEntry{ID: pe.id, Kind: kind, At: start}); err != nil {
		return fmt.Errorf("pool ledger: %w", err)
	}
	spec := providers.Spec{ComputerID: pe.id, BotdToken: token}
	c := store.Computer{ID: pe.id, HomeKey: pe.id}
	if s.direct(kind) {
		// A new computer's home: empty, nothing to restore.
		dir, _, err := s.prepareHome(c, kind, false)
		if err == nil {
			err = s.homeRestored(c, kind)
		}
		if err != nil {
			p.discard(context.WithoutCancel(ctx), pe, "its home could not be made")
			return fmt.Errorf("home: %w", err)
		}
		spec.HomeDir = dir
	}
	ref, err := prov.Provision(ctx, spec)
	if err != nil {
		p.discard(context.WithoutCancel(ctx), pe, "provision failed")
		return fmt.Errorf("provision: %w", err)
	}
	pe.ref = ref
	if err := p.writeLedger(ledgerEntry{ID: pe.id, Kind: kind, Ref: ref, At: start}); err != nil {
		p.discard(context.WithoutCancel(ctx), pe, "the ledger could not be written")
		return fmt.Errorf("pool ledger: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, ReconcileTimeout)
	defer cancel()
	m, err := prov.Reconnect(rctx, ref, spec)
	if err != nil {
		p.discard(context.WithoutCancel(ctx), pe, "it did not start")
		return fmt.Errorf("start: %w", err)
	}
	// The first screen's stack, started under no id: the computer's first
	// bot takes it (botd's spare screen). Without it (an older botd) that
	// screen starts on demand, as without a pool.
	if sp, ok := m.(interface{ PrepareSpareScreen(context.Context) error }); ok {
		if err := sp.PrepareSpareScreen(rctx); err != nil {
			p.log.Warn().Str("provider", kind).Str("computer", pe.id).Err(err).Msg("pool: no spare screen on this machine; its first screen starts on demand")
		}
	}
	pe.m, pe.born = m, time.Now()
	p.mu.Lock()
	if ctx.Err() != nil {
		p.mu.Unlock()
		p.discard(context.WithoutCancel(ctx), pe, "the worker is stopping")
		return nil
	}
	p.ready[kind] = append(p.ready[kind], pe)
	n := len(p.ready[kind])
	p.mu.Unlock()
	p.log.Info().Str("provider", kind).Str("computer", pe.id).Str("ref", short(ref)).
		Int64("elapsed_ms", time.Since(start).Milliseconds()).Int("ready", n).Int("want", p.o.Sizes[kind]).
		Msg("pool: a machine is ready")
	return nil
}

// discard destroys a pooled machine that will never be handed out, its
// worker-owned home and its ledger entry.
func (p *pool) discard(ctx context.Context, pe *pooled, why string) {
	s := p.s
	dctx, cancel := context.WithTimeout(ctx, TransitionTimeout)
	defer cancel()
	var errs []error
	if pe.ref != "" {
		if prov := s.o.Providers[pe.kind]; prov != nil {
			if err := prov.Destroy(dctx, pe.ref); err != nil && !errors.Is(err, providers.ErrGone) {
				errs = append(errs, err)
			}
		}
	}
	if err := s.removeHome(store.Computer{ID: pe.id, HomeKey: pe.id}, pe.kind); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		// The ledger entry stays: the next start tries again.
		p.log.Warn().Str("provider", pe.kind).Str("computer", pe.id).Str("why", why).Err(err).Msg("pool: destroy a pooled machine")
		return
	}
	_ = os.Remove(p.ledgerPath(pe.id))
	p.log.Info().Str("provider", pe.kind).Str("computer", pe.id).Str("ref", short(pe.ref)).Str("why", why).Msg("pool: destroyed a pooled machine")
}

// healthy is the check before hand-out (and of the periodic sweep).
func (p *pool) healthy(ctx context.Context, pe *pooled) error {
	if age := time.Since(pe.born); age > p.o.MaxAge {
		return fmt.Errorf("stale: pooled %s ago (max %s)", age.Round(time.Second), p.o.MaxAge)
	}
	hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	h, err := pe.m.Health(hctx)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if !h.OK {
		return errors.New("health: ok:false")
	}
	return nil
}

// take hands out a healthy pooled machine of kind, or nil. One that fails
// its health check is replaced, never handed out.
func (p *pool) take(ctx context.Context, kind string) *pooled {
	if p == nil {
		return nil
	}
	for {
		p.mu.Lock()
		l := p.ready[kind]
		if len(l) == 0 {
			p.mu.Unlock()
			return nil
		}
		pe := l[0]
		p.ready[kind] = l[1:]
		// The refill waits a moment: the machine just handed out gets the
		// host's CPU for its first calls.
		p.nextTry[kind] = time.Now().Add(refillDelay)
		p.mu.Unlock()
		time.AfterFunc(refillDelay, p.poke)
		if err := p.healthy(ctx, pe); err != nil {
			p.log.Warn().Str("provider", kind).Str("computer", pe.id).Str("ref", short(pe.ref)).Err(err).
				Msg("pool: a pooled machine failed its check before hand-out; replacing it")
			go p.discard(context.WithoutCancel(p.ctx), pe, "failed its check before hand-out")
			continue
		}
		return pe
	}
}

// giveBack returns an untouched machine (its create failed before the
// store knew it) to the front of the pool.
func (p *pool) giveBack(pe *pooled) {
	p.mu.Lock()
	p.ready[pe.kind] = append([]*pooled{pe}, p.ready[pe.kind]...)
	p.mu.Unlock()
}

// handedOut records that pe is computer pe.id's machine now.
func (p *pool) handedOut(pe *pooled) {
	_ = os.Remove(p.ledgerPath(pe.id))
	p.mu.Lock()
	p.handed[pe.kind]++
	p.mu.Unlock()
}

// check health-checks every ready machine and replaces the failed ones.
func (p *pool) check(ctx context.Context) {
	p.mu.Lock()
	var all []*pooled
	for _, l := range p.ready {
		all = append(all, l...)
	}
	p.mu.Unlock()
	for _, pe := range all {
		err := p.healthy(ctx, pe)
		if err == nil || ctx.Err() != nil {
			continue
		}
		p.mu.Lock()
		l := p.ready[pe.kind]
		found := false
		for i, x := range l {
			if x == pe {
				p.ready[pe.kind] = append(l[:i:i], l[i+1:]...)
				found = true
				break
			}
		}
		p.mu.Unlock()
		if found { // not taken meanwhile
			p.log.Warn().Str("provider", pe.kind).Str("computer", pe.id).Err(err).Msg("pool: a pooled machine failed its check; replacing it")
			p.discard(ctx, pe, "failed its check")
		}
	}
}

func (p *pool) ledgerPath(id string) string { return filepath.Join(p.o.Dir, id+".json") }

func (p *pool) writeLedger(e ledgerEntry) error {
	b, _ := json.Marshal(e)
	tmp := p.ledgerPath(e.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p.ledgerPath(e.ID))
}

// reconcile destroys the pooled machines an earlier worker left (its
// ledger entries), except those the store knows: they were handed out.
func (p *pool) reconcile(ctx context.Context) {
	ents, err := os.ReadDir(p.o.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			_ = os.Remove(filepath.Join(p.o.Dir, e.Name())) // a .tmp a crash left
			continue
		}
		b, err := os.ReadFile(filepath.Join(p.o.Dir, e.Name()))
		var le ledgerEntry
		if err != nil || json.Unmarshal(b, &le) != nil || !ValidID(le.ID) || le.ID+".json" != e.Name() {
			p.log.Warn().Str("file", e.Name()).Msg("pool: an unreadable ledger entry; removed")
			_ = os.Remove(filepath.Join(p.o.Dir, e.Name()))
			continue
		}
		if _, err := p.s.o.Store.GetComputer(ctx, le.ID); err == nil {
			_ = os.Remove(p.ledgerPath(le.ID)) // handed out: the store has it
			continue
		}
		pe := &pooled{id: le.ID, kind: le.Kind, ref: le.Ref}
		if pe.ref == "" {
			// Provisioned, maybe, before its ref was written: find it.
			if l, ok := p.s.o.Providers[le.Kind].(lister); ok {
				if listed, err := l.List(ctx); err == nil {
					for _, m := range listed {
						if m.ComputerID == le.ID {
							pe.ref = m.Ref
						}
					}
				}
			}
		}
		p.discard(ctx, pe, "left by an earlier worker")
	}
}

// PoolMachine is one ready pooled machine, for the operator.
type PoolMachine struct {
	// Computer is the id the machine will have as a computer.
	Computer string `json:"computer"`
	Ref      string `json:"ref"`
	AgeS     int64  `json:"ageSeconds"`
}

// PoolKind is the pool of one provider kind, for the operator.
type PoolKind struct {
	Provider  string        `json:"provider"`
	Want      int           `json:"want"`
	Ready     []PoolMachine `json:"ready"`
	Filling   bool          `json:"filling"`
	HandedOut int           `json:"handedOut"`
	LastError string        `json:"lastError,omitempty"`
}

// Pool reports the warm pool (empty without one).
func (s *Service) Pool() []PoolKind {
	p := s.thePool()
	out := []PoolKind{}
	if p == nil {
		return out
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for kind, want := range p.o.Sizes {
		k := PoolKind{Provider: kind, Want: want, Ready: []PoolMachine{}, Filling: p.filling[kind], HandedOut: p.handed[kind], LastError: p.lastErr[kind]}
		for _, pe := range p.ready[kind] {
			k.Ready = append(k.Ready, PoolMachine{Computer: pe.id, Ref: short(pe.ref), AgeS: int64(time.Since(pe.born).Seconds())})
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Provider < out[j].Provider })
	return out
}

// PooledRef is the provider ref of ready pooled machine id ("" when the
// pool holds no such machine), for the operator and tests.
func (s *Service) PooledRef(id string) string {
	p := s.thePool()
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.ready {
		for _, pe := range l {
			if pe.id == id {
				return pe.ref
			}
		}
	}
	return ""
}

func short(ref string) string {
	if len(ref) > 12 && !strings.Contains(ref, "-") {
		return ref[:12] // a container id
	}
	return ref
}

// thePool is the warm pool (nil: none).
func (s *Service) thePool() *pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool
}

// takePooled is the pool's machine for a create of kind (nil: none).
func (s *Service) takePooled(ctx context.Context, kind string) *pooled {
	return s.thePool().take(ctx, kind)
}

// createPooled makes computer c on the pooled machine pe: the store row
// takes pe's id, ref and sealed token; the kept home claim opens (if any)
// is restored before the create answers.
func (s *Service) createPooled(ctx context.Context, c store.Computer, pe *pooled, claim capability.Claim) (Created, error) {
	start := time.Now()
	c.ID, c.HomeKey, c.BotdToken, c.ProviderRef = pe.id, pe.id, pe.sealed, pe.ref
	p := s.thePool()
	restore, restored := claim.Home != "" && s.o.Homes != nil, false
	if restore {
		c.ObservedState, c.StateDeadline = store.StateStarting, time.Now().Add(TransitionTimeout)
	} else {
		c.ObservedState, c.StateDeadline = store.StateRunning, time.Time{}
	}
	if err := s.o.Store.CreateComputer(ctx, c); err != nil {
		p.giveBack(pe)
		if errors.Is(err, store.ErrScopeTaken) {
			if live, ok, lerr := s.liveIn(ctx, c.ScopeKind, c.ScopeID); lerr == nil && ok {
				return Created{}, scopeTaken(live)
			}
			return Created{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "scope %s has a live computer already", scopeName(c.ScopeKind, c.ScopeID))
		}
		return Created{}, err
	}
	p.handedOut(pe)
	s.mu.Lock()
	s.machines[c.ID] = pe.m
	s.lastUsed[c.ID] = time.Now()
	s.mu.Unlock()
	if restore {
		var err error
		if restored, err = s.restoreScope(ctx, c, claim.Home, pe.m); err != nil {
			s.drop(c.ID)
			s.fail(c.ID, err)
		} else {
			zero := time.Time{}
			if c, err = s.o.Store.UpdateComputer(ctx, c.ID, store.StateUpdate{Observed: ptr(store.StateRunning), Deadline: &zero}); err != nil {
				return Created{}, err
			}
		}
	}
	cap, err := s.o.Caps.Mint(c.ID)
	if err != nil {
		return Created{}, err
	}
	s.o.Log.Info().Str("computer", c.ID).Str("provider", c.Provider).Str("ref", short(pe.ref)).Bool("restored", restored).
		Int64("elapsed_ms", time.Since(start).Milliseconds()).Msg("pool: a create took a pooled machine")
	s.o.Metrics.PoolHandout(c.Provider, time.Since(start))
	if restore {
		c, err = s.o.Store.GetComputer(ctx, c.ID)
	}
	return Created{View: ViewOf(c), Capability: cap, Restored: restored}, err
}

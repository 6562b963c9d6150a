// Package group runs several workers on one Postgres as peers. Each
// computer is owned by one live worker at a time through a fenced
// ownership lease in the store ("owner:<computer>": holder, epoch,
// expiry), renewed every third of its lifetime; the owner's writes for the
// computer carry the epoch (store.WithFence) and are refused once it moved
// on. Any worker takes any request: one for a computer another worker owns
// is relayed to the owner over the group's own listener, which admits only
// the group token (WORKER_GROUP_TOKEN). A computer whose owner stopped
// renewing is claimed by a survivor, which reconnects its machine through
// providerRef and resumes its runs from the store.
//
// Capabilities stay in memory (seed 003): the peers pass each new hash and
// each removal to one another over the group listener, and a worker that
// joins copies them from a live peer. No capability or hash is written to
// the store, a file or a log.
//
// A worker that cannot renew (cut off from Postgres) stops acting for its
// computers two thirds into the lease, before anyone else may claim them:
// two owners never act at once, provided the workers' clocks agree to
// within that third.
package group

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/metrics"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/tracing"
	"github.com/open-bot/computer/pkg/shared"
)

const (
	// OwnerPrefix and MemberPrefix name the group's leases in the store.
	OwnerPrefix  = "owner:"
	MemberPrefix = "member:"
	// TokenHeader carries the group token between peers (never the
	// callers' credentials, which travel as they came).
	TokenHeader = "X-Open-Bot-Group"
	// OperatorHeader tells the owner that the relaying peer admitted the
	// request as the operator's (its operator socket); honoured only with
	// the group token.
	OperatorHeader = "X-Open-Bot-Group-Operator"
	// DefaultTTL is the ownership lease's lifetime.
	DefaultTTL = 9 * time.Second
)

// Options configure a group member.
type Options struct {
	Store store.Store
	// Addr is the base URL peers reach this worker's group listener at.
	Addr string
	// Token is the group token (at least 32 characters).
	Token string
	// TTL is the ownership and membership leases' lifetime (0: DefaultTTL).
	TTL  time.Duration
	Caps *capability.Set
	// RestoreKeys are the kept homes' restore keys, shared like Caps.
	RestoreKeys *capability.RestoreKeys
	Metrics     *metrics.Metrics
	// Tracing makes a span of each relayed request (nil: none).
	Tracing *tracing.Tracing
	Log     zerolog.Logger
	// Gained is told of each computer this worker came to own (not the
	// ones it created): it resumes the computer's runs under the epoch.
	Gained func(ctx context.Context, computerID string, epoch int64)
	// Lost is told of each computer this worker no longer owns: it stops
	// every run and drops the machine, writing nothing.
	Lost func(computerID string)
	// PoolReady counts this worker's ready pooled machines by provider
	// kind, and PoolKind names the kind a create asking for kind gets (""
	// the default); with both set, a create this worker's pool cannot
	// serve goes to a peer whose pool can (nil: no sharing).
	PoolReady func() map[string]int
	PoolKind  func(kind string) string
}

type owned struct {
	epoch int64
	// okAt is when the last acquire or renew that succeeded was sent: the
	// lease runs until okAt+TTL by this worker's clock.
	okAt time.Time
}

// Group is this worker's membership.
type Group struct {
	o      Options
	id     string
	client *http.Client
	// mu guards owns.
	mu   sync.Mutex
	owns map[string]owned
	// claiming serialises claims of one computer.
	claiming sync.Map
	// done is closed when the loop has left the group.
	done chan struct{}
	// dash, when set, is the dashboard whose codes and sessions are shared.
	dash Dashboard
}

// ErrNotOwner answers a write for a computer this worker does not own.
var ErrNotOwner = shared.Errorf(http.StatusServiceUnavailable, shared.CodeUnavailable, "this worker no longer owns the computer (its group moved it); retry")

// New makes a member with a new random id; Start joins.
func New(o Options) (*Group, error) {
	if len(o.Token) < 32 {
		return nil, errors.New("WORKER_GROUP_TOKEN (or WORKER_GROUP_TOKEN_FILE) must be at least 32 characters")
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Group{o: o, id: "w-" + hex.EncodeToString(b[:]), owns: map[string]owned{}, done: make(chan struct{}),
		client: &http.Client{Timeout: 5 * time.Second}}, nil
}

// ID is this member's id (the holder of its ownership leases).
func (g *Group) ID() string { return g.id }

// TTL is the ownership lease's lifetime.
func (g *Group) TTL() time.Duration { return g.o.TTL }

// margin is how long before its lease's end a member stops acting.
func (g *Group) margin() time.Duration { return g.o.TTL / 3 }

// Owns returns the epoch of computer id's ownership lease when this worker
// owns it and may still act: its lease was renewed recently enough.
func (g *Group) Owns(id string) (int64, bool) {
	g.mu.Lock()
	o, ok := g.owns[id]
	g.mu.Unlock()
	if !ok || time.Since(o.okAt) > g.o.TTL-g.margin() {
		return 0, false
	}
	return o.epoch, true
}

// Owned lists the computers this worker owns.
func (g *Group) Owned() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.owns))
	for id := range g.owns {
		out = append(out, id)
	}
	return out
}

func ownerKey(id string) string { return OwnerPrefix + id }

// Fence returns ctx carrying computer id's ownership fence, or ErrNotOwner.
func (g *Group) Fence(ctx context.Context, id string) (context.Context, error) {
	epoch, ok := g.Owns(id)
	if !ok {
		return ctx, ErrNotOwner
	}
	return store.WithFence(ctx, store.Fence{Key: ownerKey(id), Epoch: epoch}), nil
}

// Start joins: it takes this member's lease, learns the capabilities
// from a live peer and keeps renewing and claiming until ctx ends.
func (g *Group) Start(ctx context.Context) error {
	if _, err := g.o.Store.AcquireLease(ctx, MemberPrefix+g.id, g.o.Addr, g.o.TTL); err != nil {
		return fmt.Errorf("join the worker group: %w", err)
	}
	if err := g.learnCaps(ctx); err != nil {
		return err
	}
	g.o.Caps.OnChange(g.announce)
	if g.o.RestoreKeys != nil {
		g.o.RestoreKeys.OnChange(g.announceRestore)
	}
	if g.dash != nil {
		g.dash.OnShared(g.announceShared)
	}
	go func() { defer close(g.done); g.loop(ctx) }()
	return nil
}

// Done is closed once this member has left the group (Start's context
// ended and its leases were freed).
func (g *Group) Done() <-chan struct{} { return g.done }

// loop renews this member's leases and claims computers nobody owns; a
// watch beside it lets go of every computer whose lease was not renewed in
// time, even while the store hangs.
func (g *Group) loop(ctx context.Context) {
	go g.watch(ctx)
	t := time.NewTicker(g.o.TTL / 6)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.leave()
			return
		case <-t.C:
		}
		sent := time.Now()
		mctx, cancel := context.WithTimeout(ctx, g.o.TTL/6)
		if _, err := g.o.Store.AcquireLease(mctx, MemberPrefix+g.id, g.o.Addr, g.o.TTL); err != nil && ctx.Err() == nil {
			g.o.Log.Warn().Err(err).Msg("worker group: renew this member's lease")
		}
		cancel()
		g.renew(ctx, sent)
		cctx, cancel := context.WithTimeout(ctx, g.o.TTL/3)
		g.claimOrphans(cctx)
		cancel()
	}
}

// watch lets go of each computer not renewed within the margin.
func (g *Group) watch(ctx context.Context) {
	t := time.NewTicker(g.o.TTL / 30)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.expire()
		}
	}
}

// expire lets go of every computer whose lease this worker could not renew
// before the margin.
func (g *Group) expire() {
	g.mu.Lock()
	var late []string
	var epochs []int64
	for id, o := range g.owns {
		if time.Since(o.okAt) > g.o.TTL-g.margin() {
			late = append(late, id)
			epochs = append(epochs, o.epoch)
		}
	}
	g.mu.Unlock()
	for i, id := range late {
		g.lose(id, epochs[i], "its lease was not renewed within the margin (the store did not answer)")
	}
}

// renew extends each owned lease; one that moved on is let go.
func (g *Group) renew(ctx context.Context, sent time.Time) {
	g.mu.Lock()
	cur := make(map[string]owned, len(g.owns))
	for id, o := range g.owns {
		cur[id] = o
	}
	g.mu.Unlock()
	for id, o := range cur {
		rctx, cancel := context.WithTimeout(ctx, g.o.TTL/6)
		_, err := g.o.Store.RenewLease(rctx, ownerKey(id), o.epoch, g.o.TTL)
		cancel()
		switch {
		case err == nil:
			g.mu.Lock()
			if now, ok := g.owns[id]; ok && now.epoch == o.epoch && time.Since(now.okAt) <= g.o.TTL-g.margin() {
				g.owns[id] = owned{epoch: o.epoch, okAt: sent}
			}
			g.mu.Unlock()
		case errors.Is(err, store.ErrStaleEpoch):
			g.lose(id, o.epoch, "its lease moved on")
		}
	}
	g.expire()
}

// lose lets computer id go (at epoch: a newer ownership stays).
func (g *Group) lose(id string, epoch int64, why string) {
	g.mu.Lock()
	o, ok := g.owns[id]
	if ok && o.epoch == epoch {
		delete(g.owns, id)
	}
	g.mu.Unlock()
	if !ok || o.epoch != epoch {
		return
	}
	g.o.Log.Warn().Str("computer", id).Int64("epoch", epoch).Str("why", why).Msg("worker group: stopped acting for a computer")
	g.o.Metrics.Ownership("lost")
	if g.o.Lost != nil {
		g.o.Lost(id)
	}
}

// leave frees this member's leases (a clean stop): survivors claim its
// computers at once instead of after the lease.
func (g *Group) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	g.mu.Lock()
	cur := g.owns
	g.owns = map[string]owned{}
	g.mu.Unlock()
	for id, o := range cur {
		if g.o.Lost != nil {
			g.o.Lost(id)
		}
		_ = g.o.Store.ReleaseLease(ctx, ownerKey(id), o.epoch)
	}
	if l, err := g.o.Store.GetLease(ctx, MemberPrefix+g.id); err == nil {
		_ = g.o.Store.ReleaseLease(ctx, l.Key, l.Epoch)
	}
}

// created records that this worker just took computer id's lease for a
// computer it is making (Store's CreateComputer).
func (g *Group) created(id string, l store.Lease, sent time.Time) {
	g.mu.Lock()
	g.owns[id] = owned{epoch: l.Epoch, okAt: sent}
	g.mu.Unlock()
	g.o.Metrics.Ownership("gained")
}

// claimOrphans claims every live computer whose owner's lease ran out.
func (g *Group) claimOrphans(ctx context.Context) {
	cs, err := g.o.Store.ListComputers(ctx)
	if err != nil {
		return
	}
	leases, err := g.o.Store.ListLeases(ctx, OwnerPrefix)
	if err != nil {
		return
	}
	held := map[string]bool{}
	now := time.Now()
	for _, l := range leases {
		if l.Holder != "" && l.ExpiresAt.After(now) {
			held[strings.TrimPrefix(l.Key, OwnerPrefix)] = true
		}
	}
	for _, c := range cs {
		if c.ObservedState == store.StateDestroyed || held[c.ID] {
			continue
		}
		if _, err := g.Claim(ctx, c.ID); err != nil && !errors.Is(err, store.ErrBusy) {
			g.o.Log.Warn().Str("computer", c.ID).Err(err).Msg("worker group: claim a computer")
		}
	}
}

// settled waits for a claim of computer id in progress here: its runs are
// back before a request for it is served.
func (g *Group) settled(id string) {
	if mu, ok := g.claiming.Load(id); ok {
		mu.(*sync.Mutex).Lock()
		mu.(*sync.Mutex).Unlock() //nolint:staticcheck // a barrier, nothing to guard
	}
}

// Claim takes computer id when its owner's lease is free or ran out, and
// tells Gained; ErrBusy when a live worker owns it.
func (g *Group) Claim(ctx context.Context, id string) (int64, error) {
	mu, _ := g.claiming.LoadOrStore(id, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if epoch, ok := g.Owns(id); ok {
		return epoch, nil
	}
	sent := time.Now()
	l, err := g.o.Store.AcquireLease(ctx, ownerKey(id), g.id, g.o.TTL)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	g.owns[id] = owned{epoch: l.Epoch, okAt: sent}
	g.mu.Unlock()
	g.o.Log.Info().Str("computer", id).Int64("epoch", l.Epoch).Msg("worker group: owns a computer")
	g.o.Metrics.Ownership("gained")
	if g.o.Gained != nil {
		g.o.Gained(ctx, id, l.Epoch)
	}
	return l.Epoch, nil
}

// Owner is where a request for computer id goes: "" when this worker
// serves it (it owns the computer, or claimed it now, or the computer does
// not exist), else the owning peer's group address.
func (g *Group) Owner(ctx context.Context, id string) (string, error) {
	if _, ok := g.Owns(id); ok {
		g.settled(id)
		return "", nil
	}
	for range 2 {
		l, err := g.o.Store.GetLease(ctx, ownerKey(id))
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return "", err
		case l.Holder == g.id && l.ExpiresAt.After(time.Now()):
			// Ours in the store but let go here (past the margin): wait
			// for it to run out rather than act on it.
			return "", ErrNotOwner
		case l.Holder != "" && l.ExpiresAt.After(time.Now()):
			m, err := g.o.Store.GetLease(ctx, MemberPrefix+l.Holder)
			if err != nil || m.Holder == "" {
				return "", ErrNotOwner
			}
			return m.Holder, nil
		}
		c, err := g.o.Store.GetComputer(ctx, id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && c.ObservedState == store.StateDestroyed) {
			return "", nil // the handler answers 404 or the destroyed view
		} else if err != nil {
			return "", err
		}
		if _, err := g.Claim(ctx, id); err == nil {
			return "", nil
		} else if !errors.Is(err, store.ErrBusy) {
			return "", err
		}
		// Someone claimed it between the two reads: look again.
	}
	return "", ErrNotOwner
}

// checkToken reports whether r carries the group token.
func (g *Group) checkToken(r *http.Request) bool {
	got := r.Header.Get(TokenHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(g.o.Token)) == 1
}

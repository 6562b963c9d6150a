// Package computers is the control plane's view of computers: it creates
// them through a provider, keeps desired and observed state in the store
// (every transitional state with a deadline), hands out capabilities,
// reconnects machines on demand and reconciles everything at start.
package computers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/metrics"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/tracing"
	"github.com/open-bot/computer/pkg/shared"
)

// Kinds of computer (seed 000).
const (
	KindTeam    = "team"
	KindPrivate = "private"
)

// TransitionTimeout bounds every transitional state.
const TransitionTimeout = 3 * time.Minute

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID reports whether id is a valid computer, team, session or bot id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Options configures the service.
type Options struct {
	Store store.Store
	// Metrics takes the checkpoints, pool hand-outs and tool calls (nil:
	// none).
	Metrics *metrics.Metrics
	// Tracing makes the tool calls' spans (nil: none).
	Tracing *tracing.Tracing
	// Providers maps a kind to its provider; DefaultProvider names the one
	// used when a create request names none.
	Providers       map[string]providers.Provider
	DefaultProvider string
	Sealer          *secret.Sealer
	Caps            *capability.Set
	// RestoreKeys holds the restore keys of kept homes (nil: a new set).
	RestoreKeys *capability.RestoreKeys
	Log         zerolog.Logger
	// Homes checkpoints and restores portable homes (nil: none kept).
	Homes *homes.Checkpointer
	// IdleAfter suspends a running machine nobody used for this long
	// (checkpoint, then stop); 0 never does.
	IdleAfter time.Duration
	// LiveHomes is where the worker keeps the homes its local and docker
	// machines use directly (WORKER_MACHINES_DIR/homes): one directory per
	// computer and kind, kept across machines (see homedirect.go). ""
	// leaves each machine its own home.
	LiveHomes string
	// Owns reports whether this worker acts for computer id (a worker
	// group's owner); nil: every computer is this worker's.
	Owns func(id string) bool
}

// owns reports whether this worker acts for computer id (Options.Owns).
func (s *Service) owns(id string) bool { return s.o.Owns == nil || s.o.Owns(id) }

// Owns reports whether this worker acts for computer id: always, but in a
// worker group, where only the computer's owner does.
func (s *Service) Owns(id string) bool { return s.owns(id) }

// Service manages computers.
type Service struct {
	o Options
	// mu guards machines, lastUsed, inUse and connecting.
	mu       sync.Mutex
	machines map[string]providers.Machine
	lastUsed map[string]time.Time
	// inUse counts what holds each computer in use (Use): idle suspension
	// passes over it whatever its last use.
	inUse map[string]int
	// connecting holds one lock per computer: connecting (and so replacing)
	// its machine is serialized, or two callers that both found the machine
	// gone would each make a replacement and one would be left behind.
	connecting map[string]*sync.Mutex
	// checkpointing holds one lock per computer: its checkpoints are
	// serialized (each takes the next revision).
	checkpointing map[string]*sync.Mutex
	// pool is the warm pool (pool.go; nil: none), guarded by mu.
	pool *pool
	// hooksMu guards removedHooks, the funcs OnBotRemoved registered.
	hooksMu      sync.Mutex
	removedHooks []func(ctx context.Context, computerID, botID string)
}

// New returns the service; it fails for an unknown default provider kind.
func New(o Options) (*Service, error) {
	if _, ok := o.Providers[o.DefaultProvider]; !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", providers.ErrUnknownKind, o.DefaultProvider, kinds(o.Providers))
	}
	if o.Caps == nil {
		o.Caps = capability.NewSet()
	}
	if o.RestoreKeys == nil {
		o.RestoreKeys = capability.NewRestoreKeys()
	}
	return &Service{o: o, machines: map[string]providers.Machine{}, lastUsed: map[string]time.Time{}, inUse: map[string]int{},
		connecting: map[string]*sync.Mutex{}, checkpointing: map[string]*sync.Mutex{}}, nil
}

func kinds(m map[string]providers.Provider) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Caps is the capability set.
func (s *Service) Caps() *capability.Set { return s.o.Caps }

// Scope is a create request's scope: exactly one of the three (seed 003).
// {session} is the default, one computer per conversation; {team} (with
// share: true, which a team scope always is) is the team's one shared
// computer; {account: true} is the deployment's one computer. Each scope has
// at most one live computer.
type Scope struct {
	Session string `json:"session,omitempty"`
	Team    string `json:"team,omitempty"`
	// Share goes with Team only: a team scope is shared by every teammate,
	// so share:false with a team is refused (use {session} instead).
	Share   *bool `json:"share,omitempty"`
	Account bool  `json:"account,omitempty"`
}

// ParseScope reads the scope query form of GET /v1/computers?scope=…:
// "session:<id>", "team:<id>" or "account". It returns the store's scope
// kind and id.
func ParseScope(q string) (kind, id string, err error) {
	if q == store.ScopeAccount {
		return store.ScopeAccount, "", nil
	}
	k, v, ok := strings.Cut(q, ":")
	if !ok || (k != store.ScopeSession && k != store.ScopeTeam) || !ValidID(v) {
		return "", "", bad("scope: want session:<id>, team:<id> or account (ids are [A-Za-z0-9_-]{1,64})")
	}
	return k, v, nil
}

// scopeName is a scope as ParseScope reads it.
func scopeName(kind, id string) string {
	if kind == store.ScopeAccount {
		return store.ScopeAccount
	}
	return kind + ":" + id
}

// ScopeTaken is the answer to a create for a scope that has a live
// computer: 409 with that computer's id (never its capability).
type ScopeTaken struct {
	ComputerID string
	*shared.APIError
}

// Unwrap lets the API render it as any APIError.
func (e *ScopeTaken) Unwrap() error { return e.APIError }

func scopeTaken(c store.Computer) *ScopeTaken {
	return &ScopeTaken{ComputerID: c.ID, APIError: shared.Errorf(http.StatusConflict, shared.CodeConflict,
		"scope %s has a live computer already: %s (%s); use its capability, or the operator can adopt it (POST /v1/computers/%s/adopt) if the capability was lost",
		scopeName(c.ScopeKind, c.ScopeID), c.ID, c.ObservedState, c.ID)}
}

// CreateRequest is POST /v1/computers.
type CreateRequest struct {
	Scope    Scope          `json:"scope"`
	Kind     string         `json:"kind,omitempty"`
	Provider string         `json:"provider,omitempty"`
	Attach   *AttachRequest `json:"attach,omitempty"`
	// Template chooses the provider's template for this computer (e2b:
	// open-bot or desktop; "" the worker's default). Providers without
	// templates refuse one (400 TEMPLATE_UNAVAILABLE). It is kept with the
	// computer: a replacement is made from the same template.
	Template string `json:"template,omitempty"`
	// Evaluation makes an evaluation computer: it serves OSWorld's guest
	// API, whose execute runs code that acts on the bot's screen (an act
	// channel; SECURITY.md says what that gives up). Kept with the computer.
	Evaluation bool `json:"evaluation,omitempty"`
	// RestoreKey is the X-Restore-Key header (never in the body): the
	// restore key of the scope's kept home, which the new computer then
	// starts from. Without it the new computer starts empty.
	RestoreKey string `json:"-"`
}

// Created is a create's answer: the computer, its capability (shown this
// once) and whether a kept home of the scope was restored into it.
type Created struct {
	View       View
	Capability string
	Restored   bool
}

// AttachRequest names an existing botd (the attach provider, an operator
// action): its URL and its token, given by value and sealed like every
// botd token. TokenFile is the old form, refused: the worker reads no file
// a caller names.
type AttachRequest struct {
	URL       string `json:"url"`
	Token     string `json:"token"`
	TokenFile string `json:"tokenFile,omitempty"`
}

// ProviderKind is the provider kind a create request naming kind gets
// ("" is the default provider's).
func (s *Service) ProviderKind(kind string) string {
	if kind == "" {
		return s.o.DefaultProvider
	}
	return kind
}

// View is a computer as callers see it: identity and state, never a
// capability or token.
type View struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Provider  string `json:"provider"`
	Scope     Scope  `json:"scope"`
	State     string `json:"state"`
	Desired   string `json:"desiredState"`
	LastError string `json:"lastError,omitempty"`
	// Template is the provider template the computer is made from (e2b
	// only).
	Template string `json:"template,omitempty"`
	// Evaluation: the computer serves OSWorld's guest API.
	Evaluation bool `json:"evaluation,omitempty"`
}

// ViewOf renders a stored computer.
func ViewOf(c store.Computer) View {
	v := View{ID: c.ID, Kind: c.Kind, Provider: c.Provider, State: c.ObservedState, Desired: c.DesiredState, LastError: c.LastError,
		Template: c.Template, Evaluation: c.Evaluation}
	switch c.ScopeKind {
	case store.ScopeSession:
		v.Scope.Session = c.ScopeID
	case store.ScopeTeam:
		v.Scope.Team, v.Scope.Share = c.ScopeID, ptr(true)
	case store.ScopeAccount:
		v.Scope.Account = true
	}
	return v
}

func bad(format string, args ...any) error {
	return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, format, args...)
}

// ErrNotFound is the one answer for a computer that does not exist or whose
// capability did not match.
var ErrNotFound = shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such computer")

func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Create makes a computer and returns it with its capability (the only time
// the capability is shown). The computer is recorded before the provider
// is asked, so a crash mid-create leaves a row that reconcile finds. With
// req.RestoreKey the scope's kept home that key opens is restored into the
// new machine before the answer (a key that opens none is 403 and nothing
// is made); the key is used up only when the restore succeeds.
func (s *Service) Create(ctx context.Context, req CreateRequest) (out Created, err error) {
	c := store.Computer{ID: newID("c_"), DesiredState: store.StateRunning, ObservedState: store.StateCreating,
		StateDeadline: time.Now().Add(TransitionTimeout)}
	n := 0
	if req.Scope.Session != "" {
		n++
		c.ScopeKind, c.ScopeID = store.ScopeSession, req.Scope.Session
	}
	if req.Scope.Team != "" {
		n++
		c.ScopeKind, c.ScopeID = store.ScopeTeam, req.Scope.Team
	}
	if req.Scope.Account {
		n++
		c.ScopeKind = store.ScopeAccount
	}
	switch {
	case n > 1:
		return Created{}, bad("scope: give one of session, team or account")
	case n == 0:
		c.ScopeKind, c.ScopeID = store.ScopeSession, newID("s_") // one computer per session by default
	case c.ScopeKind != store.ScopeAccount && !ValidID(c.ScopeID):
		return Created{}, bad("scope: ids are [A-Za-z0-9_-]{1,64}")
	}
	if sh := req.Scope.Share; sh != nil {
		switch {
		case c.ScopeKind != store.ScopeTeam:
			return Created{}, bad("scope: share goes with a team ({team, share: true})")
		case !*sh:
			return Created{}, bad("scope: a team scope is the team's shared computer; for a computer of one conversation use {session}")
		}
	}
	c.Kind = req.Kind
	if c.Kind == "" {
		c.Kind = KindTeam
	}
	if c.Kind != KindTeam && c.Kind != KindPrivate {
		return Created{}, bad("kind: want team or private")
	}
	c.Provider = req.Provider
	if c.Provider == "" {
		c.Provider = s.o.DefaultProvider
	}
	p, ok := s.o.Providers[c.Provider]
	if !ok {
		return Created{}, bad("provider: unknown kind %q", c.Provider)
	}
	tpl, err := providers.CheckTemplate(p, c.Provider, req.Template)
	if err != nil {
		return Created{}, err
	}
	c.Template = tpl
	c.Evaluation = req.Evaluation
	spec := providers.Spec{ComputerID: c.ID, Template: tpl}
	if c.Provider == providers.KindAttach {
		switch {
		case req.Attach == nil:
			return Created{}, bad("attach: {url, token} is required for the attach provider")
		case req.Attach.TokenFile != "":
			return Created{}, bad("attach: tokenFile is not accepted (the worker reads no file a caller names): give the botd's token by value as attach.token")
		case !providers.ValidAttachToken(req.Attach.Token):
			return Created{}, bad("attach: token must be the botd's token (16-512 token characters)")
		}
		spec.AttachURL, spec.BotdToken = req.Attach.URL, req.Attach.Token
	} else {
		if req.Attach != nil {
			return Created{}, bad("attach: only for the attach provider")
		}
		var tok [32]byte
		_, _ = rand.Read(tok[:])
		spec.BotdToken = hex.EncodeToString(tok[:])
	}
	claim, err := s.claimRestore(c, req.RestoreKey)
	if err != nil {
		return Created{}, err
	}
	defer func() {
		if !out.Restored {
			s.o.RestoreKeys.Release(claim)
		}
	}()
	if claim.Home != "" {
		if spec.KeptHome, err = s.keptVolume(ctx, c.Provider, claim.Home); err != nil {
			return Created{}, err
		}
	}
	// A kept home volume is taken over by a machine made for it: a pooled
	// one has its own.
	if spec.KeptHome == "" {
		if pe := s.takePooled(ctx, c.Provider); pe != nil {
			return s.createPooled(ctx, c, pe, claim)
		}
	}
	sealed, err := s.o.Sealer.Seal([]byte(spec.BotdToken), c.ID)
	if err != nil {
		return Created{}, err
	}
	c.BotdToken = sealed
	c.HomeKey = c.ID
	if err := s.o.Store.CreateComputer(ctx, c); err != nil {
		if errors.Is(err, store.ErrScopeTaken) {
			if live, ok, lerr := s.liveIn(ctx, c.ScopeKind, c.ScopeID); lerr == nil && ok {
				return Created{}, scopeTaken(live)
			}
			return Created{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "scope %s has a live computer already", scopeName(c.ScopeKind, c.ScopeID))
		}
		return Created{}, err
	}
	if s.direct(c.Provider) {
		// A new computer: its worker-owned home starts empty, with
		// nothing to restore.
		dir, _, err := s.prepareHome(c, c.Provider, false)
		if err == nil {
			err = s.homeRestored(c, c.Provider)
		}
		if err != nil {
			s.fail(c.ID, err)
			return Created{}, fmt.Errorf("home: %w", err)
		}
		spec.HomeDir = dir
	}
	ref, err := p.Provision(ctx, spec)
	if err != nil {
		s.fail(c.ID, err)
		// Attach input errors are the caller's.
		var ae *shared.APIError
		if errors.As(err, &ae) || c.Provider == providers.KindAttach {
			_, _ = s.o.Store.UpdateComputer(context.WithoutCancel(ctx), c.ID, store.StateUpdate{Desired: ptr(store.StateDestroyed), Observed: ptr(store.StateDestroyed)})
			return Created{}, bad("%s", err.Error())
		}
		return Created{}, fmt.Errorf("provision: %w", err)
	}
	dl := time.Now().Add(TransitionTimeout)
	if c, err = s.o.Store.UpdateComputer(ctx, c.ID, store.StateUpdate{ProviderRef: &ref, Observed: ptr(store.StateStarting), Deadline: &dl}); err != nil {
		return Created{}, err
	}
	cap, err := s.o.Caps.Mint(c.ID)
	if err != nil {
		return Created{}, err
	}
	m, err := s.connectWithin(ctx, c, ReconcileTimeout)
	if err != nil {
		c, _ = s.o.Store.GetComputer(context.WithoutCancel(ctx), c.ID)
		return Created{View: ViewOf(c), Capability: cap}, nil // created; the state says what went wrong
	}
	restored := s.restoreScopeAfterCreate(ctx, c, m, claim, spec.KeptHome)
	c, err = s.o.Store.GetComputer(ctx, c.ID)
	return Created{View: ViewOf(c), Capability: cap, Restored: restored}, err
}

func ptr[T any](v T) *T { return &v }

// fail records err as the computer's last error and moves it to error.
func (s *Service) fail(id string, err error) {
	msg := err.Error()
	zero := time.Time{}
	_, _ = s.o.Store.UpdateComputer(context.Background(), id, store.StateUpdate{Observed: ptr(store.StateError), LastError: &msg, Deadline: &zero})
	s.o.Log.Warn().Str("computer", id).Str("error", msg).Msg("computer in error")
}

// spec rebuilds the provider spec of a stored computer (the token opened).
func (s *Service) spec(c store.Computer) (providers.Spec, error) {
	spec := providers.Spec{ComputerID: c.ID, Template: c.Template}
	if len(c.BotdToken) > 0 {
		tok, err := s.o.Sealer.Open(c.BotdToken, c.ID)
		if err != nil {
			return spec, err
		}
		spec.BotdToken = string(tok)
	}
	return spec, nil
}

// ConnectTimeout bounds a reconnect made for a request; Reconcile gives a
// booting machine longer (ReconcileTimeout).
const (
	ConnectTimeout   = 20 * time.Second
	ReconcileTimeout = 90 * time.Second
)

// connectWithin reconnects a computer's machine (replacing a gone one) and
// records it running; d bounds the whole step.
func (s *Service) connectWithin(ctx context.Context, c store.Computer, d time.Duration) (providers.Machine, error) {
	s.mu.Lock()
	l := s.connecting[c.ID]
	if l == nil {
		l = &sync.Mutex{}
		s.connecting[c.ID] = l
	}
	s.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	// Whoever held the lock may have replaced the machine: its new ref is
	// in the store now, and reconnecting to it is all that is left to do.
	// Never go on with the ref read before the wait: it may be the gone
	// machine's.
	fresh, err := s.o.Store.GetComputer(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	c = fresh
	p, ok := s.o.Providers[c.Provider]
	if !ok {
		err := fmt.Errorf("%w %q: this worker has no such provider", providers.ErrUnknownKind, c.Provider)
		s.fail(c.ID, err)
		return nil, err
	}
	spec, err := s.spec(c)
	if err != nil {
		s.fail(c.ID, err)
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var m providers.Machine
	if c.Provider == providers.KindAttach {
		// An attached botd cannot be replaced: reconnect only.
		m, err = p.Reconnect(rctx, c.ProviderRef, spec)
		if errors.Is(err, providers.ErrGone) {
			err = fmt.Errorf("the attached botd is gone (%w)", err)
		}
	} else {
		// A gone machine is replaced, the latest checkpoint restored first.
		m, err = s.ensure(rctx, c, spec)
	}
	if err != nil {
		// A caller that went away (a follower stopped, a request
		// cancelled) says nothing about the machine: the computer's state
		// is not its to set, and may be another caller's replacement.
		if ctx.Err() == nil {
			s.fail(c.ID, err)
		}
		return nil, err
	}
	zero := time.Time{}
	empty := ""
	if _, err := s.o.Store.UpdateComputer(ctx, c.ID, store.StateUpdate{Observed: ptr(store.StateRunning), Deadline: &zero, LastError: &empty}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.machines[c.ID] = m
	s.lastUsed[c.ID] = time.Now()
	s.mu.Unlock()
	return m, nil
}

// Get returns a stored computer.
func (s *Service) Get(ctx context.Context, id string) (store.Computer, error) {
	if !ValidID(id) {
		return store.Computer{}, ErrNotFound
	}
	c, err := s.o.Store.GetComputer(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && c.ObservedState == store.StateDestroyed) {
		return store.Computer{}, ErrNotFound
	}
	return c, err
}

// List returns every computer that is not destroyed.
func (s *Service) List(ctx context.Context) ([]View, error) {
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	out := []View{}
	for _, c := range cs {
		if c.ObservedState != store.StateDestroyed {
			out = append(out, ViewOf(c))
		}
	}
	return out, nil
}

// InScope lists the live computers of one scope (ParseScope's kind and
// id): one, or none (several only for computers made before the rule).
func (s *Service) InScope(ctx context.Context, kind, id string) ([]View, error) {
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	out := []View{}
	for _, c := range cs {
		if c.ObservedState != store.StateDestroyed && c.ScopeKind == kind && c.ScopeID == id {
			out = append(out, ViewOf(c))
		}
	}
	return out, nil
}

// liveIn is the newest live computer of a scope.
func (s *Service) liveIn(ctx context.Context, kind, id string) (store.Computer, bool, error) {
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return store.Computer{}, false, err
	}
	var found store.Computer
	ok := false
	for _, c := range cs { // oldest first: the last match is the newest
		if c.ObservedState != store.StateDestroyed && c.ScopeKind == kind && c.ScopeID == id {
			found, ok = c, true
		}
	}
	return found, ok, nil
}

// Machine returns the running machine of computer id, reconnecting it if
// this process has not yet.
func (s *Service) Machine(ctx context.Context, id string) (providers.Machine, error) {
	s.mu.Lock()
	m := s.machines[id]
	if m != nil {
		s.lastUsed[id] = time.Now()
	}
	s.mu.Unlock()
	if m != nil {
		return m, nil
	}
	if !s.owns(id) {
		return nil, shared.Errorf(http.StatusServiceUnavailable, shared.CodeUnavailable, "another worker of the group owns this computer now; retry")
	}
	c, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.DesiredState != store.StateRunning {
		return nil, shared.Errorf(http.StatusConflict, shared.CodeConflict, "the computer is %s; start it first", c.ObservedState)
	}
	m, err = s.connectWithin(ctx, c, ReconcileTimeout)
	if err != nil {
		return nil, shared.Errorf(http.StatusServiceUnavailable, shared.CodeUnavailable, "the computer's machine does not answer; see its lastError")
	}
	return m, nil
}

// Use holds computer id in use until done is called (once; more calls do
// nothing): idle suspension never stops it meanwhile, however long since
// its last use. Done counts as a use (idle from then). For what stays
// open and silent without calling through the service, such as a CDP
// session.
func (s *Service) Use(id string) (done func()) {
	s.mu.Lock()
	s.inUse[id]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.inUse[id]--; s.inUse[id] <= 0 {
				delete(s.inUse, id)
			}
			if s.machines[id] != nil {
				s.lastUsed[id] = time.Now()
			}
			s.mu.Unlock()
		})
	}
}

// Adopt mints a new capability for computer id; the old one stops working.
func (s *Service) Adopt(ctx context.Context, id string) (string, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return "", err
	}
	return s.o.Caps.Mint(id)
}

// Describe is the description of computer c's provider — its kind and
// what its machines can do (multiScreen, stop, persistent) — or false when
// this worker has no such provider.
func (s *Service) Describe(c store.Computer) (providers.Description, bool) {
	p, ok := s.o.Providers[c.Provider]
	if !ok {
		return providers.Description{}, false
	}
	return p.Describe(), true
}

// Runtimes lists the runtimes computer c's machine offers, its default
// first (providers.Runtimes): nil when this worker lacks its provider.
func (s *Service) Runtimes(c store.Computer) []string {
	p, ok := s.o.Providers[c.Provider]
	if !ok {
		return nil
	}
	return providers.Runtimes(p, c.ProviderRef)
}

func (s *Service) provider(c store.Computer) (providers.Provider, error) {
	p, ok := s.o.Providers[c.Provider]
	if !ok {
		return nil, shared.Errorf(http.StatusConflict, shared.CodeConflict, "this worker has no %q provider", c.Provider)
	}
	return p, nil
}

func (s *Service) drop(id string) {
	s.mu.Lock()
	delete(s.machines, id)
	s.mu.Unlock()
}

// Stop stops the machine, keeping its home.
func (s *Service) Stop(ctx context.Context, id string) (View, error) {
	c, err := s.Get(ctx, id)
	if err != nil {
		return View{}, err
	}
	p, err := s.provider(c)
	if err != nil {
		return View{}, err
	}
	if !p.Describe().Capabilities.Stop {
		return View{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "the %s provider cannot stop a machine", c.Provider)
	}
	s.checkpointBefore(ctx, c, "stop")
	dl := time.Now().Add(TransitionTimeout)
	if _, err := s.o.Store.UpdateComputer(ctx, id, store.StateUpdate{Desired: ptr(store.StateStopped), Observed: ptr(store.StateStopping), Deadline: &dl}); err != nil {
		return View{}, err
	}
	s.drop(id)
	if err := p.Stop(ctx, c.ProviderRef); err != nil {
		s.fail(id, err)
	} else {
		zero := time.Time{}
		_, _ = s.o.Store.UpdateComputer(ctx, id, store.StateUpdate{Observed: ptr(store.StateStopped), Deadline: &zero})
	}
	c, err = s.o.Store.GetComputer(ctx, id)
	return ViewOf(c), err
}

// Start (and Recover) bring the machine back: reconnect, or provision a
// replacement when it is gone.
func (s *Service) Start(ctx context.Context, id string) (View, error) {
	c, err := s.Get(ctx, id)
	if err != nil {
		return View{}, err
	}
	if _, err := s.provider(c); err != nil {
		return View{}, err
	}
	dl := time.Now().Add(TransitionTimeout)
	if c, err = s.o.Store.UpdateComputer(ctx, id, store.StateUpdate{Desired: ptr(store.StateRunning), Observed: ptr(store.StateStarting), Deadline: &dl}); err != nil {
		return View{}, err
	}
	s.drop(id)
	// A gone machine is replaced (the latest checkpoint restored first);
	// any other failure is recorded on the computer.
	_, _ = s.connectWithin(ctx, c, ReconcileTimeout)
	c, err = s.o.Store.GetComputer(ctx, id)
	return ViewOf(c), err
}

// DestroyOptions adjusts a destroy.
type DestroyOptions struct {
	// KeepHome keeps the computer's checkpoints in the home store
	// (DELETE /v1/computers/{id}?keepHome=true); by default they go.
	KeepHome bool
}

// Destroy removes the machine (an attached botd is only detached), the
// computer's checkpoints and their metadata in the home store, and forgets
// the capability.
func (s *Service) Destroy(ctx context.Context, id string) (View, error) {
	return s.DestroyWith(ctx, id, DestroyOptions{})
}

// DestroyWith is Destroy with options. The home store forgets the home
// first: if it cannot, nothing is destroyed and the error says so (the
// operator retries, or keeps the home). It forgets again once the machine
// is gone, in case a checkpoint (a run ending) raced the destroy.
func (s *Service) DestroyWith(ctx context.Context, id string, o DestroyOptions) (View, error) {
	return s.destroy(ctx, id, !o.KeepHome, o.KeepHome)
}

// forgetHome removes c's checkpoints from the home store.
func (s *Service) forgetHome(ctx context.Context, c store.Computer) error {
	if s.o.Homes == nil || c.HomeKey == "" {
		return nil
	}
	s.o.RestoreKeys.Forget(c.HomeKey)
	return s.o.Homes.Forget(ctx, c.HomeKey)
}

// destroy destroys computer id; forget removes its home from the home
// store; keepVolume keeps the machine's home volume where its provider
// has one (providers.HomeKeeper: a kubernetes home claim). A destroy that
// a crash interrupted is finished by Reconcile without forget and without
// keepVolume: the operator's choice is not recorded, a home that was to go
// was forgotten before the destroy began, and a kept home is still in the
// home store.
func (s *Service) destroy(ctx context.Context, id string, forget, keepVolume bool) (View, error) {
	c, err := s.Get(ctx, id)
	if err != nil {
		return View{}, err
	}
	p, err := s.provider(c)
	if err != nil {
		return View{}, err
	}
	if forget {
		if err := s.forgetHome(ctx, c); err != nil {
			return View{}, shared.Errorf(http.StatusBadGateway, shared.CodeUnavailable,
				"nothing was destroyed: the home store could not remove this computer's checkpoints (retry, or keepHome=true keeps them): %v", err)
		}
	}
	dl := time.Now().Add(TransitionTimeout)
	if _, err := s.o.Store.UpdateComputer(ctx, id, store.StateUpdate{Desired: ptr(store.StateDestroyed), Observed: ptr(store.StateDestroying), Deadline: &dl}); err != nil {
		return View{}, err
	}
	s.drop(id)
	s.forgetSecrets(ctx, id)
	destroy := p.Destroy
	if hk, ok := p.(providers.HomeKeeper); ok && keepVolume {
		destroy = hk.DestroyKeepingHome
	}
	if err := destroy(ctx, c.ProviderRef); err != nil && !errors.Is(err, providers.ErrUnsupported) {
		s.fail(id, err)
		c, _ = s.o.Store.GetComputer(ctx, id)
		return ViewOf(c), nil
	}
	if forget {
		if err := s.removeHomes(c); err != nil {
			s.o.Log.Warn().Str("computer", id).Err(err).Msg("remove the destroyed computer's worker-owned home")
		}
		if err := s.forgetHome(context.WithoutCancel(ctx), c); err != nil {
			msg := fmt.Sprintf("the machine is destroyed but a checkpoint made meanwhile could not be removed from the home store: %v", err)
			_, _ = s.o.Store.UpdateComputer(context.WithoutCancel(ctx), id, store.StateUpdate{LastError: &msg})
			s.o.Log.Warn().Str("computer", id).Err(err).Msg("forget the destroyed computer's home")
		}
	}
	zero := time.Time{}
	c, err = s.o.Store.UpdateComputer(ctx, id, store.StateUpdate{Observed: ptr(store.StateDestroyed), Deadline: &zero})
	s.o.Caps.Forget(id)
	return ViewOf(c), err
}

// Reconcile runs at start: every computer that should run is reconnected;
// a transitional state past its deadline becomes error with the reason.
// Failures are recorded on the computer, never fatal to the worker.
func (s *Service) Reconcile(ctx context.Context) error {
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); s.reconcileOne(ctx, c) }()
	}
	wg.Wait()
	return s.ReconcileMachines(ctx)
}

// reconcileOne brings computer c back as Reconcile does: a destroy a crash
// interrupted is finished, a computer that should run is reconnected.
func (s *Service) reconcileOne(ctx context.Context, c store.Computer) {
	switch {
	case c.ObservedState == store.StateDestroyed:
	case c.DesiredState == store.StateDestroyed:
		// A destroy that a crash interrupted: finish it.
		_, _ = s.destroy(ctx, c.ID, false, false)
	case suspended(c):
		// idle-suspended: the next use starts it
	case c.DesiredState == store.StateRunning:
		if c.ProviderRef == "" {
			s.fail(c.ID, errors.New("the worker stopped while this computer was being created; recover makes it"))
			return
		}
		_, _ = s.connectWithin(ctx, c, ReconcileTimeout)
	}
}

// Gained brings back computer id, which this worker just came to own in
// its worker group: its machine is reconnected through providerRef (never
// a second one provisioned), or an interrupted destroy finished.
func (s *Service) Gained(ctx context.Context, id string) {
	c, err := s.o.Store.GetComputer(ctx, id)
	if err != nil {
		s.o.Log.Warn().Str("computer", id).Err(err).Msg("reconnect a computer this worker now owns")
		return
	}
	s.reconcileOne(ctx, c)
}

// Lost drops computer id's machine from this process without touching it:
// another worker of the group owns the computer now.
func (s *Service) Lost(id string) {
	s.mu.Lock()
	delete(s.machines, id)
	delete(s.lastUsed, id)
	s.mu.Unlock()
}

// SweepDeadlines moves every computer whose transitional state outlived its
// deadline to error, with the reason, so nothing stays "starting" forever;
// recover (start) is the way out.
func (s *Service) SweepDeadlines(ctx context.Context) error {
	cs, err := s.o.Store.ListComputers(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, c := range cs {
		if !s.owns(c.ID) {
			continue
		}
		switch c.ObservedState {
		case store.StateCreating, store.StateStarting, store.StateStopping, store.StateDestroying:
			if !c.StateDeadline.IsZero() && now.After(c.StateDeadline) {
				s.fail(c.ID, fmt.Errorf("stuck in %s past its deadline; recover retries", c.ObservedState))
			}
		}
	}
	return nil
}

// Watch sweeps deadlines every interval until ctx ends.
func (s *Service) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.SweepDeadlines(ctx); err != nil {
				s.o.Log.Warn().Err(err).Msg("sweep computer deadlines")
			}
			s.CheckMachines(ctx)
			if err := s.SuspendIdle(ctx, s.o.IdleAfter); err != nil {
				s.o.Log.Warn().Err(err).Msg("suspend idle computers")
			}
		}
	}
}

// Package takeover is the worker's take-control policy (CONTROL-PLANE.md,
// Takeover; seed 000) and the control links it hands to a person.
//
// Take answers 409 "Stop the bot first" while the bot has a live run or
// holds its execution lease, unless that run is waiting_takeover (the model
// called request_takeover). Otherwise it takes botd's user lease on the
// bot's screen and mints a control link: signed by the worker with a key
// that lives only in this process, expiring, and bound to one computer, one
// screen, the control mode and the user-lease holder. The link opens the
// worker's own relay (/control/{link}), which dials botd's RFB websocket
// with a botd control link minted server-side for the link's remaining
// life, so botd's token, address and links never reach the person's
// browser. Both sides close the connection when the link expires; Release
// gives botd's lease back, closes every control connection of the grant,
// and lets a waiting run continue.
package takeover

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Prefix is where the control relay is mounted on the worker.
const Prefix = "/control/"

// DefaultTTL is a control link's life (and the user lease's); botd caps
// its own links at ten minutes.
const DefaultTTL = 10 * time.Minute

// ErrStopFirst is the policy's refusal.
var ErrStopFirst = shared.Errorf(http.StatusConflict, shared.CodeConflict, "Stop the bot first")

// Options configures the service.
type Options struct {
	Computers *computers.Service
	Runs      *runs.Manager
	Store     store.Store
	// TTL of a control link (default DefaultTTL, at most 10 minutes).
	TTL time.Duration
	// Base is the worker's address as a person's browser reaches it (e.g.
	// http://127.0.0.1:7100); links are Base + Prefix + link. When empty,
	// Take uses the request's host and the run event carries a path only.
	Base string
	Now  func() time.Time
	Log  zerolog.Logger
}

// Link is a granted takeover.
type Link struct {
	URL       string    `json:"controlUrl"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Service applies the policy and relays control connections.
type Service struct {
	o   Options
	key []byte

	mu     sync.Mutex
	base   string
	grants map[string]*grant // computer/bot → the person's grant
}

// grant is one person's control of one bot's screen.
type grant struct {
	computer, bot, screen string
	holder, leaseID       string
	expires               time.Time
	// conns closes the grant's open control connections.
	conns map[*struct{}]context.CancelFunc
}

// New returns the service; its signing key is random per process (a worker
// restart invalidates every control link).
func New(o Options) *Service {
	if o.TTL <= 0 || o.TTL > DefaultTTL {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &Service{o: o, key: key, base: strings.TrimRight(o.Base, "/"), grants: map[string]*grant{}}
}

// SetRuns sets the run manager (it is made after the service, which it
// calls back through runs.Options.TakeoverLink).
func (s *Service) SetRuns(m *runs.Manager) {
	s.mu.Lock()
	s.o.Runs = m
	s.mu.Unlock()
}

// SetBase sets the worker's address for links (once the listener is up).
func (s *Service) SetBase(base string) {
	s.mu.Lock()
	s.base = strings.TrimRight(base, "/")
	s.mu.Unlock()
}

func grantKey(computerID, botID string) string { return computerID + "/" + botID }

// Busy reports whether the policy refuses a person the bot's screen now:
// a live run that is not waiting_takeover, or the execution lease held by
// anyone but such a run.
func (s *Service) Busy(ctx context.Context, c store.Computer, botID string) (bool, error) {
	if r, ok := s.o.Runs.BotRun(c.ID, botID); ok {
		return r.Snapshot().Status != runs.StatusWaitingTakeover, nil
	}
	l, err := s.o.Store.GetLease(ctx, computers.LeaseKey(c, botID))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if l.Holder == "" || !s.o.Now().Before(l.ExpiresAt) {
		return false, nil
	}
	// Held by a run this process does not drive (another worker's, or
	// one being resumed): the bot is busy unless that run is waiting.
	if sr, err := s.o.Store.GetRun(ctx, l.Holder); err == nil && sr.State == store.RunWaitingTakeover {
		return false, nil
	}
	return true, nil
}

// Take applies the policy for a person asking to control bot botID's
// screen on computer computerID; base, when not empty, is the address the
// request came to (used when no Base is configured).
func (s *Service) Take(ctx context.Context, computerID, botID, base string) (Link, error) {
	c, err := s.o.Computers.HasBot(ctx, computerID, botID)
	if err != nil {
		return Link{}, err
	}
	busy, err := s.Busy(ctx, c, botID)
	if err != nil {
		return Link{}, err
	}
	if busy {
		return Link{}, ErrStopFirst
	}
	return s.grant(ctx, computerID, botID, botID, base)
}

// ForRun is the runs.Options.TakeoverLink hook: the run already waits for
// a person (so the policy allows it); take screen for them and return the
// link its event carries.
func (s *Service) ForRun(ctx context.Context, computerID, botID, screen string) (string, time.Time, error) {
	l, err := s.grant(ctx, computerID, botID, screen, "")
	return l.URL, l.ExpiresAt, err
}

// grant takes botd's user lease on screen for a new holder and mints the
// link. An earlier grant of the same bot is ended first.
func (s *Service) grant(ctx context.Context, computerID, botID, screen, base string) (Link, error) {
	machine, err := s.o.Computers.Machine(ctx, computerID)
	if err != nil {
		return Link{}, err
	}
	// The backend's screen limit first: a single-screen backend answers
	// MULTI_SCREEN_UNAVAILABLE for any screen but its primary, and no
	// second display is started for a person either.
	if err := machine.CheckScreen(ctx, screen); err != nil {
		return Link{}, err
	}
	s.end(ctx, machine, computerID, botID)
	if _, err := machine.StartScreen(ctx, screen); err != nil {
		return Link{}, upstream(err)
	}
	holder := "person-" + randHex(8)
	l, err := machine.AcquireLease(ctx, screen, "user", holder, s.o.TTL)
	if err != nil {
		return Link{}, upstream(err)
	}
	exp := s.o.Now().Add(s.o.TTL).UTC().Truncate(time.Second)
	if !l.ExpiresAt.IsZero() && l.ExpiresAt.Before(exp) {
		exp = l.ExpiresAt.UTC()
	}
	g := &grant{computer: computerID, bot: botID, screen: screen, holder: holder, leaseID: l.LeaseID, expires: exp, conns: map[*struct{}]context.CancelFunc{}}
	s.mu.Lock()
	s.grants[grantKey(computerID, botID)] = g
	if b := s.base; b != "" {
		base = b
	}
	s.mu.Unlock()
	tok := s.sign(claims{Computer: computerID, Bot: botID, Screen: screen, Mode: "control", Holder: holder, Exp: exp.Unix(), Nonce: randHex(8)})
	s.o.Log.Info().Str("computer", computerID).Str("bot", botID).Str("screen", screen).Time("expires", exp).Msg("takeover granted")
	return Link{URL: strings.TrimRight(base, "/") + Prefix + tok, ExpiresAt: exp}, nil
}

// Done is the runs.Options.TakeoverDone hook: the run stopped waiting, so
// the person's grant on the bot (if any is left) ends.
func (s *Service) Done(ctx context.Context, computerID, botID string) {
	m, err := s.o.Computers.Machine(ctx, computerID)
	if err != nil {
		return
	}
	s.end(ctx, m, computerID, botID)
}

// Release hands bot botID's screen back: botd's user lease is released,
// the grant's control connections close, and a run waiting for a person
// continues. Releasing when nobody holds control still resumes such a run.
func (s *Service) Release(ctx context.Context, computerID, botID string) error {
	if _, err := s.o.Computers.HasBot(ctx, computerID, botID); err != nil {
		return err
	}
	m, err := s.o.Computers.Machine(ctx, computerID)
	if err != nil {
		return err
	}
	s.end(ctx, m, computerID, botID)
	if r, ok := s.o.Runs.BotRun(computerID, botID); ok && r.Snapshot().Status == runs.StatusWaitingTakeover {
		_ = r.Resume()
	}
	s.o.Log.Info().Str("computer", computerID).Str("bot", botID).Msg("takeover released")
	return nil
}

// end drops the bot's grant: its botd lease (m nil: left to lapse) and
// its connections.
func (s *Service) end(ctx context.Context, m machines.Machine, computerID, botID string) {
	s.mu.Lock()
	g := s.grants[grantKey(computerID, botID)]
	delete(s.grants, grantKey(computerID, botID))
	var cancels []context.CancelFunc
	if g != nil {
		for _, c := range g.conns {
			cancels = append(cancels, c)
		}
	}
	s.mu.Unlock()
	if g == nil {
		return
	}
	for _, c := range cancels {
		c()
	}
	if m == nil { // the machine is not reachable: its lease lapses there
		return
	}
	if err := m.ReleaseLease(ctx, g.screen, g.leaseID); err != nil && client.CodeOf(err) != shared.CodeLeaseRequired {
		s.o.Log.Warn().Err(err).Str("screen", g.screen).Msg("release the person's lease")
	}
}

// BotRemoved is the computers.Service OnBotRemoved hook: the person's
// grant on the removed bot ends (its control connections close, botd's
// lease is released), so no control link minted before the removal
// reaches a re-added bot of the same name.
func (s *Service) BotRemoved(ctx context.Context, computerID, botID string) {
	m, err := s.o.Computers.Machine(ctx, computerID)
	if err != nil {
		m = nil
	}
	s.end(ctx, m, computerID, botID)
}

// InControl reports whether a person holds bot botID's screen now.
func (s *Service) InControl(computerID, botID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grants[grantKey(computerID, botID)]
	return g != nil && s.o.Now().Before(g.expires)
}

// upstream keeps botd's answer when it is an API error (its code and
// message are meant for callers) and hides anything else.
func upstream(err error) error {
	var be *client.Error
	if errors.As(err, &be) {
		return shared.Errorf(be.Status, be.Code, "%s", be.Message)
	}
	return shared.Errorf(http.StatusBadGateway, shared.CodeUnavailable, "the computer did not answer")
}

// claims are what a control link binds.
type claims struct {
	Computer string `json:"c"`
	Bot      string `json:"b"`
	Screen   string `json:"s"`
	Mode     string `json:"m"`
	Holder   string `json:"h"`
	Exp      int64  `json:"e"`
	Nonce    string `json:"n"`
}

var b64 = base64.RawURLEncoding

func (s *Service) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("open-bot control link v1\x00" + payload))
	return m.Sum(nil)
}

func (s *Service) sign(c claims) string {
	b, _ := json.Marshal(c)
	p := b64.EncodeToString(b)
	return p + "." + b64.EncodeToString(s.mac(p))
}

// LinkComputer is the computer a control link names, read without
// checking its signature: only to route the link to the computer's owner
// in a worker group, which verifies it ("" when it names none).
func LinkComputer(tok string) string {
	if len(tok) > 2048 {
		return ""
	}
	p, _, ok := strings.Cut(tok, ".")
	if !ok {
		return ""
	}
	b, err := b64.DecodeString(p)
	var c claims
	if err != nil || json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.Computer
}

// Errors of verify.
var (
	errBadLink = errors.New("invalid control link")
	errExpired = errors.New("this control link expired")
)

// verify checks a link's signature and expiry; the claims are trusted only
// after the MAC matched.
func (s *Service) verify(tok string) (claims, error) {
	var c claims
	if len(tok) > 2048 {
		return c, errBadLink
	}
	p, sig, ok := strings.Cut(tok, ".")
	if !ok {
		return c, errBadLink
	}
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(p)) {
		return c, errBadLink
	}
	b, err := b64.DecodeString(p)
	if err != nil || json.Unmarshal(b, &c) != nil || c.Mode != "control" {
		return claims{}, errBadLink
	}
	if !s.o.Now().Before(time.Unix(c.Exp, 0)) {
		return claims{}, errExpired
	}
	return c, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

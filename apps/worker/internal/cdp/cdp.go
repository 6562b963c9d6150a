// Package cdp relays a Chrome DevTools Protocol session between a caller's
// client (Playwright's connectOverCDP, Puppeteer's connect) and a bot's
// Chromium on its computer (issue 34).
//
// The worker holds the screen's agent lease for the session ("cdp-<bot>"),
// so a run's tools and a CDP client never drive one screen at once, and a
// person's takeover ends the session. botd serves the session
// (/screens/{id}/cdp) and applies the browser's security policy there
// (refused methods, tabs sealed after a vault secret, the apply guard): the
// worker only authenticates, leases and relays, carrying botd's close code
// and reason to the client unchanged (4001 a person took over, 4002 the
// lease was lost, 1012 the browser restarted, 1008 a bound exceeded, 1001
// going away). Tickets (tickets.go) let a client without headers in.
package cdp

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/agentlease"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/apps/worker/internal/wsrelay"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// LeaseTTL is the agent lease a session takes; botd renews it while the
// session is open.
const LeaseTTL = 120 * time.Second

// Read limits of the relay's two sides. The machine's answers carry
// screenshots as base64 (a full-page capture is tens of MiB); a client's
// commands are small, and its limit bounds what one caller makes the
// worker read.
const (
	MachineReadLimit = 64 << 20
	ClientReadLimit  = 4 << 20
)

// ErrOutsideNamespace is the answer for a screen that is not the bot's.
var ErrOutsideNamespace = shared.Errorf(http.StatusForbidden, shared.CodeForbidden,
	"that screen is not this bot's: a bot's screens are <bot> and <bot>-<suffix>")

// Options configures the service.
type Options struct {
	Computers *computers.Service
	// Tickets is where tickets are kept (a new set when nil).
	Tickets *Tickets
	// Leases is shared with the OSWorld guest API (nil: the service's
	// own): the bot's outside agents hold the screen under one holder, and
	// the lease goes back only when the last of them lets go.
	Leases *agentlease.Registry
	Log    zerolog.Logger
}

// ErrBusy is the answer for a screen that already has a session here.
var ErrBusy = shared.Errorf(http.StatusConflict, shared.CodeConflict, "this screen already has a CDP session; one at a time")

// Service opens and relays CDP sessions.
type Service struct {
	o Options

	// mu guards open.
	mu sync.Mutex
	// open holds the screens ("computer/screen") with a session opening
	// or open. Every session's lease has the same holder, cdp-<bot>, and
	// botd hands a holder its current lease again: a second session would
	// get the first one's lease, and its refusal's release would end the
	// first. So a second is refused here, before the lease.
	open map[string]bool
}

// New returns the service.
func New(o Options) *Service {
	if o.Tickets == nil {
		o.Tickets = &Tickets{}
	}
	if o.Leases == nil {
		o.Leases = agentlease.New()
	}
	return &Service{o: o, open: map[string]bool{}}
}

// claim marks computer's screen as having a session; false when it has one.
func (s *Service) claim(computer, screen string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := computer + "/" + screen
	if s.open[k] {
		return false
	}
	s.open[k] = true
	return true
}

func (s *Service) unclaim(computer, screen string) {
	s.mu.Lock()
	delete(s.open, computer+"/"+screen)
	s.mu.Unlock()
}

// Tickets is the service's ticket set.
func (s *Service) Tickets() *Tickets { return s.o.Tickets }

// Check answers whether bot may open screen on computer: the screen is in
// the bot's namespace (else 403) and the bot is on the computer (else
// 404).
func (s *Service) Check(ctx context.Context, computer, bot, screen string) error {
	if !tools.InNamespace(bot, screen) {
		return ErrOutsideNamespace
	}
	_, err := s.o.Computers.HasBot(ctx, computer, bot)
	return err
}

// Session is an open CDP session on a screen: the agent lease and botd's
// side of the relay, until Serve ends.
type Session struct {
	s                     *Service
	m                     machines.Machine
	computer, bot, screen string
	leaseID               string
	// letGo gives the session's hold of the lease back (agentlease: the
	// lease itself goes back with the last hold, unless it was held
	// before any).
	letGo func()
	// unuse ends the session's hold of its computer in use (Open takes
	// it): idle suspension (COMPUTER_IDLE_MINUTES) never stops a machine
	// while a session opens or is open, however quiet its client.
	unuse func()
	up    *websocket.Conn
}

// Open checks the bot and screen, starts the screen, takes its agent
// lease and dials botd's CDP endpoint. Every refusal comes before any
// upgrade of the caller's connection, with the machine's code (409
// conflict or user_has_control while another agent or a person holds
// the screen, 409 conflict while it has a CDP session already, 501 on a
// machine without a managed browser).
func (s *Service) Open(ctx context.Context, computer, bot, screen string) (*Session, error) {
	if err := s.Check(ctx, computer, bot, screen); err != nil {
		return nil, err
	}
	if !s.claim(computer, screen) {
		return nil, ErrBusy
	}
	unuse := s.o.Computers.Use(computer)
	sess, err := s.open1(ctx, computer, bot, screen)
	if err != nil {
		unuse()
		s.unclaim(computer, screen)
		return nil, err
	}
	sess.unuse = unuse
	return sess, nil
}

func (s *Service) open1(ctx context.Context, computer, bot, screen string) (*Session, error) {
	m, err := s.o.Computers.Machine(ctx, computer)
	if err != nil {
		return nil, err
	}
	if err := m.CheckScreen(ctx, screen); err != nil {
		return nil, upstream(err)
	}
	sc, err := m.StartScreen(ctx, screen)
	if err != nil {
		return nil, upstream(err)
	}
	holder := agentlease.Holder(bot)
	// The holder may hold the screen already: the OSWorld guest API takes
	// the same one (through the shared registry), so its harness's CDP
	// steps and guest calls do not refuse each other; a lease the screen
	// shows held outside the registry is not the session's to release.
	held := sc.Lease != nil && sc.Lease.Kind == "agent" && sc.Lease.Holder == holder && time.Now().Before(sc.Lease.ExpiresAt)
	id, letGo, err := s.o.Leases.Hold(ctx, m, computer, screen, holder, LeaseTTL, false, held)
	if err != nil {
		return nil, upstream(err)
	}
	sess := &Session{s: s, m: m, computer: computer, bot: bot, screen: screen, leaseID: id, letGo: letGo}
	up, err := m.DialCDP(ctx, screen, id)
	if err != nil {
		sess.release()
		return nil, upstream(err)
	}
	sess.up = up
	return sess, nil
}

// Serve accepts the caller's websocket and relays until either side ends,
// then closes the other side the same way and releases the lease.
func (x *Session) Serve(w http.ResponseWriter, r *http.Request) {
	defer x.s.unclaim(x.computer, x.screen)
	defer x.release()
	// Any origin: the route's credentials are headers or a single-use
	// ticket, never a cookie, so a page of another origin has nothing of
	// anyone's to ride on (a browser client with a ticket is the reason
	// tickets exist).
	down, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		_ = x.up.Close(websocket.StatusGoingAway, "the client's upgrade failed")
		return
	}
	x.up.SetReadLimit(MachineReadLimit)
	down.SetReadLimit(ClientReadLimit)
	start := time.Now()
	log := x.s.o.Log.With().Str("computer", x.computer).Str("bot", x.bot).Str("screen", x.screen).Logger()
	log.Info().Msg("cdp session opened")
	// The session outlives nothing but its two ends: the request's context
	// is the hijacked connection's, and ends with the relay anyway.
	end := wsrelay.Relay(context.WithoutCancel(r.Context()), down, x.up)
	by := "client"
	if end.From == x.up {
		by = "machine"
	}
	log.Info().Str("closed_by", by).Int("code", int(end.Status)).Str("reason", end.Reason).
		Int64("elapsed_ms", time.Since(start).Milliseconds()).Msg("cdp session ended")
}

// release gives the session's hold of the screen's agent lease back
// (agentlease: the last hold gives the lease back, unless it was held
// before any; one botd already dropped, lost or taken over, is no matter)
// and ends its hold of the computer in use (idle from now).
func (x *Session) release() {
	x.letGo()
	if x.unuse != nil {
		x.unuse()
	}
}

// upstream keeps the machine's answer when it is an API error (its code
// and message are meant for callers) and hides anything else.
func upstream(err error) error {
	var be *client.Error
	if errors.As(err, &be) {
		return shared.Errorf(be.Status, be.Code, "%s", be.Message)
	}
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return ae
	}
	return shared.Errorf(http.StatusBadGateway, shared.CodeUnavailable, "the computer did not answer")
}

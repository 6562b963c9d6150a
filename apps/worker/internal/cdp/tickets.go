package cdp

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// TicketTTL is a ticket's life: long enough for a client to be handed the
// URL and dial it, short enough that one found in a log or a history is
// already dead.
const TicketTTL = 60 * time.Second

// MaxTickets bounds the live tickets held in memory: a caller with the
// worker token could otherwise grow the map without end.
const MaxTickets = 1024

// Errors of Redeem and Mint. Redeem's are all the same 401 to the caller:
// which one it was says nothing a guesser could use.
var (
	ErrBadTicket = shared.Errorf(http.StatusUnauthorized, shared.CodeUnauthorized, "invalid, used or expired CDP ticket: mint a new one")
	ErrTooMany   = shared.Errorf(http.StatusServiceUnavailable, shared.CodeUnavailable, "too many live CDP tickets; use one or wait a minute")
)

// ticket is what a ticket binds: only its hash is kept.
type ticket struct {
	hash                  [32]byte
	computer, bot, screen string
	expires               time.Time
}

// Tickets are single-use, short-lived credentials for the CDP route, for a
// client that cannot set headers: a ticket stands for the worker token and
// the capability of one computer, for one bot's screen, once. Only
// SHA-256 hashes are kept, in memory (a worker restart voids them all).
type Tickets struct {
	// TTL is a ticket's life (TicketTTL when zero).
	TTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// mu guards live.
	mu   sync.Mutex
	live []ticket
}

func (t *Tickets) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Tickets) ttl() time.Duration {
	if t.TTL > 0 {
		return t.TTL
	}
	return TicketTTL
}

// Mint makes a ticket for computer, bot and screen; it returns the ticket
// (43 URL-safe characters) and when it expires.
func (t *Tickets) Mint(computer, bot, screen string) (string, time.Time, error) {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	exp := t.now().Add(t.ttl())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked()
	if len(t.live) >= MaxTickets {
		return "", time.Time{}, ErrTooMany
	}
	t.live = append(t.live, ticket{hash: sha256.Sum256([]byte(tok)), computer: computer, bot: bot, screen: screen, expires: exp})
	return tok, exp, nil
}

// Redeem uses up tok for computer, bot and screen. The ticket is consumed
// on its first presentation whatever follows (expired, or bound to
// another computer, bot or screen): a ticket works at most once.
func (t *Tickets) Redeem(tok, computer, bot, screen string) error {
	if len(tok) != 43 {
		return ErrBadTicket
	}
	h := sha256.Sum256([]byte(tok))
	t.mu.Lock()
	found := -1
	// Every live hash is compared, in constant time each: how long this
	// takes says nothing about which one matched.
	for i := range t.live {
		if subtle.ConstantTimeCompare(t.live[i].hash[:], h[:]) == 1 {
			found = i
		}
	}
	var tk ticket
	if found >= 0 {
		tk = t.live[found]
		t.live = append(t.live[:found], t.live[found+1:]...)
	}
	t.mu.Unlock()
	switch {
	case found < 0:
		return ErrBadTicket
	case !t.now().Before(tk.expires):
		return ErrBadTicket
	case tk.computer != computer || tk.bot != bot || tk.screen != screen:
		return ErrBadTicket
	}
	return nil
}

// Live is how many tickets are held (expired ones not yet swept included).
func (t *Tickets) Live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// sweepLocked drops expired tickets.
func (t *Tickets) sweepLocked() {
	now := t.now()
	kept := t.live[:0]
	for _, tk := range t.live {
		if now.Before(tk.expires) {
			kept = append(kept, tk)
		}
	}
	clear(t.live[len(kept):])
	t.live = kept
}

// Package tools is the teammates' tool set: each tool's schema for the model
// and its implementation as operations on the computer's machine, under the
// session's agent lease on the bot's own screen namespace.
package tools

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// LeaseTTL is how long an agent lease lives without use; botd renews it on use.
const LeaseTTL = 120 * time.Second

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID reports whether id is a valid screen id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// BotIDRule is the form of a bot id: no '-', so a screen "<bot>-<suffix>"
// can never be another bot's.
const BotIDRule = `^[a-z0-9][a-z0-9_]{0,62}$`

var botIDPattern = regexp.MustCompile(BotIDRule)

// ValidBotID reports whether id is a valid bot id (BotIDRule).
func ValidBotID(id string) bool { return botIDPattern.MatchString(id) }

// InNamespace is the screen namespace rule: a screen id must equal the bot id
// or start with "<bot-id>-". Anything looser would let a caller address
// another teammate's display. Bot ids have no '-', so no screen is in two
// bots' namespaces.
func InNamespace(botID, screenID string) bool {
	return ValidBotID(botID) && ValidID(screenID) && (screenID == botID || strings.HasPrefix(screenID, botID+"-"))
}

// Session is one caller's use of the tools: a run, or a direct harness.
type Session struct {
	// Machine is the computer the tools act on.
	Machine machines.Machine
	BotID   string
	Holder  string // lease holder name (the run id)
	// Takeover is called by request_takeover and blocks until a person is
	// done (nil: the tool reports that takeover is not available here).
	Takeover func(ctx context.Context, screen, reason string) error
	// CheckScreen, when set, is the backend's screen limit (a single-screen
	// provider answers MULTI_SCREEN_UNAVAILABLE for all screens but one).
	CheckScreen func(ctx context.Context, screen string) error
	// Secret opens the computer's vault entry name (its origin, clear
	// value and whether it may go into a field that shows it) for
	// type_secret; nil: the vault is not available here.
	// SecretNames lists the names the vault holds (for error text).
	Secret      func(ctx context.Context, name string) (origin, value string, visible bool, err error)
	SecretNames func(ctx context.Context) []string
	// Observe, when set, is told of each call's tool, success and time
	// (the worker's metrics).
	Observe func(tool string, ok bool, d time.Duration)
	// Trace, when set, starts each call's span (the worker's traces): the
	// call runs under the context it returns, and end is told its
	// outcome and, failed, its code.
	Trace func(ctx context.Context, tool string) (_ context.Context, end func(ok bool, code string))

	// mu guards leases.
	mu     sync.Mutex
	leases map[string]string // screen id → lease id
}

// NewSession returns a session for botID.
func NewSession(m machines.Machine, botID, holder string) (*Session, error) {
	if !ValidBotID(botID) {
		return nil, fmt.Errorf("invalid bot id %q: want %s (no '-')", botID, BotIDRule)
	}
	return &Session{Machine: m, BotID: botID, Holder: holder, leases: map[string]string{}}, nil
}

// screen resolves the optional screen argument under the namespace rule.
func (s *Session) screen(arg string) (string, error) {
	if arg == "" {
		return s.BotID, nil
	}
	if !InNamespace(s.BotID, arg) {
		return "", &ToolError{Code: shared.CodeForbidden, Msg: fmt.Sprintf("screen %q is not yours: use %q or an id starting with %q", arg, s.BotID, s.BotID+"-")}
	}
	return arg, nil
}

// lease returns the session's agent lease on screen, starting the screen and
// acquiring the lease on first use.
func (s *Session) lease(ctx context.Context, screen string) (string, error) {
	s.mu.Lock()
	id := s.leases[screen]
	s.mu.Unlock()
	if id != "" {
		return id, nil
	}
	if _, err := s.Machine.StartScreen(ctx, screen); err != nil {
		return "", err
	}
	l, err := s.Machine.AcquireLease(ctx, screen, "agent", s.Holder, LeaseTTL)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.leases[screen] = l.LeaseID
	s.mu.Unlock()
	return l.LeaseID, nil
}

// forget drops a lease botd no longer honours, so the next call acquires anew.
func (s *Session) forget(screen string) {
	s.mu.Lock()
	delete(s.leases, screen)
	s.mu.Unlock()
}

// withLease runs fn under the screen's lease; when botd says the lease is
// stale (expired or swept) it acquires a new one and tries once more. A user
// holding the screen is reported, never fought.
func (s *Session) withLease(ctx context.Context, screen string, fn func(leaseID string) error) error {
	for attempt := 0; ; attempt++ {
		id, err := s.lease(ctx, screen)
		if err != nil {
			return err
		}
		err = fn(id)
		if attempt == 0 && client.CodeOf(err) == shared.CodeLeaseRequired {
			s.forget(screen)
			continue
		}
		if client.CodeOf(err) == shared.CodeUserHasControl {
			s.forget(screen)
		}
		return err
	}
}

// Release gives back every lease the session holds.
func (s *Session) Release(ctx context.Context) {
	s.mu.Lock()
	leases := s.leases
	s.leases = map[string]string{}
	s.mu.Unlock()
	for screen, id := range leases {
		_ = s.Machine.ReleaseLease(ctx, screen, id)
	}
}

// HeldLeases lists the screens the session holds a lease on.
func (s *Session) HeldLeases() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.leases))
	for k := range s.leases {
		out = append(out, k)
	}
	return out
}

// ToolError is an error the model can read: a code and a message.
type ToolError struct {
	Code shared.Code
	Msg  string
}

func (e *ToolError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Msg) }

// describe turns any error into the text the model sees: botd's code and
// message when it is a botd error, the tool error's, or a generic line.
func describe(err error) string {
	var te *ToolError
	if errors.As(err, &te) {
		return "error: " + te.Error()
	}
	var be *client.Error
	if errors.As(err, &be) {
		return fmt.Sprintf("error: %s: %s", be.Code, be.Message)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "error: timeout: the computer did not answer in time"
	}
	if errors.Is(err, context.Canceled) {
		return "error: cancelled"
	}
	return "error: " + err.Error()
}

// codeOf is err's stable code, as describe names it.
func codeOf(err error) shared.Code {
	var te *ToolError
	if errors.As(err, &te) {
		return te.Code
	}
	var be *client.Error
	if errors.As(err, &be) && be.Code != "" {
		return be.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return shared.CodeTimeout
	}
	return shared.CodeInternal
}

// status of err for the direct HTTP API.
func statusOf(err error) int {
	var be *client.Error
	if errors.As(err, &be) {
		return be.Status
	}
	var te *ToolError
	if errors.As(err, &te) {
		switch te.Code {
		case shared.CodeForbidden:
			return http.StatusForbidden
		case shared.CodeTooLarge:
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

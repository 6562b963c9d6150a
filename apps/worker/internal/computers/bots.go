package computers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// ErrNoBot: the bot was not added to this computer (it is outside the
// capability's scope).
var ErrNoBot = shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such bot on this computer; add it first (POST /v1/computers/{id}/bots)")

// badBotID is the refusal of a bot id that is not tools.BotIDRule.
func badBotID(field, id string) error {
	return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidID,
		"%s %q: want %s — lowercase letters, digits and _, no '-' (a screen \"<bot>-<suffix>\" is always bot <bot>'s)", field, id, tools.BotIDRule)
}

// legacyBotID refuses to use a bot added before bot ids lost '-'.
func legacyBotID(id string) error {
	return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidID,
		"bot %q was added before bot ids had to match %s (no '-', no capitals), so its screens could be another bot's: "+
			"remove it (DELETE /v1/computers/{id}/bots/%s) and add it again under an id like %q", id, tools.BotIDRule, id, suggestBotID(id))
}

// suggestBotID is a valid id close to a legacy one.
func suggestBotID(id string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	s := strings.TrimLeft(b.String(), "_")
	if s == "" {
		s = "bot"
	}
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// TeamOf is the team a computer's bots belong to: the team of a team scope,
// else the session or the account itself.
func TeamOf(c store.Computer) string {
	if c.ScopeKind == store.ScopeAccount {
		return "account"
	}
	return c.ScopeKind + ":" + c.ScopeID
}

// LeaseKey is the store key of a bot's fenced lease: one computer-use run
// per bot of a team at a time.
func LeaseKey(c store.Computer, botID string) string { return TeamOf(c) + "/" + botID }

// AddBot adds a bot to a computer. On a Team computer its work folder
// bots/<bot-id>/ is made on the machine by the bot user (so bot-owned),
// mode 2775; a Private computer takes exactly one bot, whose home is the
// whole workspace.
func (s *Service) AddBot(ctx context.Context, computerID, botID string) (store.Bot, error) {
	if !tools.ValidBotID(botID) {
		return store.Bot{}, badBotID("bot id", botID)
	}
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return store.Bot{}, err
	}
	b := store.Bot{ComputerID: c.ID, ID: botID, TeamID: TeamOf(c), Sole: c.Kind == KindPrivate}
	if b.Sole {
		if err := s.soleFree(ctx, c.ID, botID); err != nil {
			return store.Bot{}, err
		}
	}
	if c.Kind == KindTeam {
		m, err := s.Machine(ctx, c.ID)
		if err != nil {
			return store.Bot{}, err
		}
		dir := "bots/" + botID
		for _, argv := range [][]string{{"mkdir", "-p", "--", dir}, {"chmod", "2775", "--", dir}} {
			res, err := execIdempotent(ctx, m, argv)
			if err != nil {
				return store.Bot{}, upstreamErr("make "+dir+" on the computer", err)
			}
			if res.ExitCode != 0 {
				return store.Bot{}, shared.Errorf(http.StatusBadGateway, shared.CodeInternal, "make %s on the computer: %s exited %d", dir, argv[0], res.ExitCode)
			}
		}
	}
	if err := s.o.Store.AddBot(ctx, b); err != nil {
		if errors.Is(err, store.ErrExists) {
			if b.Sole {
				// Another bot took the Private computer meanwhile (the
				// store's sole-bot index).
				if err := s.soleFree(ctx, c.ID, botID); err != nil {
					return store.Bot{}, err
				}
			}
			return store.Bot{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "bot %s is already on this computer", botID)
		}
		return store.Bot{}, err
	}
	return b, nil
}

// execIdempotent runs argv, a command that may run twice (mkdir -p,
// chmod), on m: once more after a moment when the machine's answer did not
// come from the command (the way to botd failed: a vendor's proxy, a
// dropped connection, botd busy). A refusal of botd's own is final.
func execIdempotent(ctx context.Context, m interface {
	Exec(context.Context, client.ExecRequest) (client.ExecResult, error)
}, argv []string) (client.ExecResult, error) {
	res, err := m.Exec(ctx, client.ExecRequest{Argv: argv})
	if err == nil || !transientExec(err) {
		return res, err
	}
	select {
	case <-ctx.Done():
		return res, err
	case <-time.After(300 * time.Millisecond):
	}
	return m.Exec(ctx, client.ExecRequest{Argv: argv})
}

// transientExec: err says nothing ran (502, 503 or 504 on the way, or no
// answer at all), not that botd refused the command.
func transientExec(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var be *client.Error
	if errors.As(err, &be) {
		return be.Status == http.StatusBadGateway || be.Status == http.StatusServiceUnavailable || be.Status == http.StatusGatewayTimeout
	}
	return true
}

// soleFree refuses a second bot on a Private computer.
func (s *Service) soleFree(ctx context.Context, computerID, botID string) error {
	bots, err := s.o.Store.ListBots(ctx, computerID)
	if err != nil {
		return err
	}
	for _, o := range bots {
		if o.ID != botID {
			return shared.Errorf(http.StatusConflict, shared.CodeConflict,
				"a Private computer has exactly one bot (%s), whose home is the whole workspace; remove it first, or use a Team computer for several bots", o.ID)
		}
	}
	return nil
}

// Bots lists a computer's bots.
func (s *Service) Bots(ctx context.Context, computerID string) ([]store.Bot, error) {
	return s.o.Store.ListBots(ctx, computerID)
}

// HasBot returns the computer if botID was added to it, else ErrNoBot. A
// bot added before bot ids lost '-' is refused with what to do.
func (s *Service) HasBot(ctx context.Context, computerID, botID string) (store.Computer, error) {
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return c, err
	}
	if !ValidID(botID) {
		return c, badBotID("botId", botID)
	}
	bots, err := s.o.Store.ListBots(ctx, computerID)
	if err != nil {
		return c, err
	}
	for _, b := range bots {
		if b.ID == botID {
			if !tools.ValidBotID(botID) {
				return c, legacyBotID(botID)
			}
			return c, nil
		}
	}
	if !tools.ValidBotID(botID) {
		return c, badBotID("botId", botID)
	}
	return c, ErrNoBot
}

// OnBotRemoved registers f, called when RemoveBot takes a bot off a
// computer: before its screens are forgotten, and again once it is gone
// (whatever was granted on the bot's screen ends with the bot: takeover's
// grants and their control links, which must never reach a re-added bot of
// the same name). f must not block for long.
func (s *Service) OnBotRemoved(f func(ctx context.Context, computerID, botID string)) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.removedHooks = append(s.removedHooks, f)
}

// botRemoved calls the OnBotRemoved funcs.
func (s *Service) botRemoved(ctx context.Context, computerID, botID string) {
	s.hooksMu.Lock()
	fs := s.removedHooks
	s.hooksMu.Unlock()
	for _, f := range fs {
		f(ctx, computerID, botID)
	}
}

// RemoveBotLeaseTTL bounds how long a removal holds the bot's lease.
const RemoveBotLeaseTTL = 2 * time.Minute

// RemoveBot takes bot botID off the computer: refused (409) while the bot
// has a run (its fenced lease is held; the removal holds it meanwhile, so
// no run starts), then the bot's screens — its id and every "<bot>-…"
// screen no longer-named bot owns — are stopped and their browser profiles
// deleted (botd's DELETE /screens/{id}), and the bot is forgotten. Its
// folder bots/<bot-id>/ stays unless purge (a Private computer's bot owns
// the whole workspace, so purge is refused there). Bots added before bot
// ids lost '-' can be removed too.
func (s *Service) RemoveBot(ctx context.Context, computerID, botID string, purge bool) ([]string, error) {
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return nil, err
	}
	if !ValidID(botID) {
		return nil, badBotID("bot", botID)
	}
	bots, err := s.o.Store.ListBots(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	var bot *store.Bot
	for i := range bots {
		if bots[i].ID == botID {
			bot = &bots[i]
		}
	}
	if bot == nil {
		return nil, ErrNoBot
	}
	if purge && c.Kind != KindTeam {
		return nil, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest,
			"purge: a Private computer's bot has the whole workspace as its home; destroy the computer to remove its files")
	}
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	key := LeaseKey(c, botID)
	l, err := s.o.Store.AcquireLease(ctx, key, "remove-bot-"+hex.EncodeToString(nb[:]), RemoveBotLeaseTTL)
	if errors.Is(err, store.ErrBusy) {
		return nil, shared.Errorf(http.StatusConflict, shared.CodeConflict, "bot %s has a run; stop it first", botID)
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.o.Store.ReleaseLease(context.WithoutCancel(ctx), key, l.Epoch) }()
	m, err := s.Machine(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	// A person's control of the bot's screen ends first (its connections
	// close, its lease is released), and again once the bot is gone.
	s.botRemoved(ctx, c.ID, botID)
	defer s.botRemoved(context.WithoutCancel(ctx), c.ID, botID)
	list, err := m.Screens(ctx)
	if err != nil {
		return nil, upstreamErr("list the computer's screens", err)
	}
	screens := []string{botID} // forgotten even when botd has not started it since a restart
	for _, sc := range list {
		if sc.ID != botID && owner(bots, sc.ID) == botID {
			screens = append(screens, sc.ID)
		}
	}
	for _, id := range screens {
		if err := m.ForgetScreen(ctx, id); err != nil {
			return nil, upstreamErr("forget screen "+id, err)
		}
	}
	if purge {
		res, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"rm", "-rf", "--", "bots/" + botID}})
		if err != nil {
			return nil, upstreamErr("remove bots/"+botID, err)
		}
		if res.ExitCode != 0 {
			return nil, shared.Errorf(http.StatusBadGateway, shared.CodeInternal, "remove bots/%s on the computer: rm exited %d", botID, res.ExitCode)
		}
	}
	if err := s.o.Store.RemoveBot(ctx, c.ID, botID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	s.o.Log.Info().Str("computer", c.ID).Str("bot", botID).Strs("screens", screens).Bool("purge", purge).Msg("bot removed")
	return screens, nil
}

// owner is the bot whose namespace screen is in: the bot of that id, or
// the longest bot id b with screen starting "b-" (only bots added before
// bot ids lost '-' can make that ambiguous).
func owner(bots []store.Bot, screen string) string {
	best := ""
	for _, b := range bots {
		if (screen == b.ID || strings.HasPrefix(screen, b.ID+"-")) && len(b.ID) > len(best) {
			best = b.ID
		}
	}
	return best
}

// upstreamErr keeps botd's API error (meant for callers) and hides others.
func upstreamErr(what string, err error) error {
	var be *client.Error
	if errors.As(err, &be) {
		return shared.Errorf(be.Status, be.Code, "%s: %s", what, be.Message)
	}
	return shared.Errorf(http.StatusBadGateway, shared.CodeUnavailable, "%s: the computer did not answer", what)
}

// LatestCheckpoint is the computer's latest checkpoint metadata.
func (s *Service) LatestCheckpoint(ctx context.Context, computerID string) (store.Checkpoint, error) {
	return s.o.Store.LatestCheckpoint(ctx, computerID)
}

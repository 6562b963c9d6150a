package computers

import (
	"context"
	"errors"
	"net/http"

	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// ErrNoBot: the bot was not added to this computer (it is outside the
// capability's scope).
var ErrNoBot = shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such bot on this computer; add it first (POST /v1/computers/{id}/bots)")

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
// mode 2775; on a Private computer the whole workspace is its home.
func (s *Service) AddBot(ctx context.Context, computerID, botID string) (store.Bot, error) {
	if !ValidID(botID) {
		return store.Bot{}, shared.Errorf(http.StatusBadRequest, shared.CodeInvalidID, "bot id: want [A-Za-z0-9_-]{1,64}")
	}
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return store.Bot{}, err
	}
	b := store.Bot{ComputerID: c.ID, ID: botID, TeamID: TeamOf(c)}
	if c.Kind == KindTeam {
		botd, _, err := s.Botd(ctx, c.ID)
		if err != nil {
			return store.Bot{}, err
		}
		dir := "bots/" + botID
		for _, argv := range [][]string{{"mkdir", "-p", "--", dir}, {"chmod", "2775", "--", dir}} {
			res, err := botd.Exec(ctx, client.ExecRequest{Argv: argv})
			if err != nil {
				return store.Bot{}, err
			}
			if res.ExitCode != 0 {
				return store.Bot{}, shared.Errorf(http.StatusBadGateway, shared.CodeInternal, "make %s on the computer: %s exited %d", dir, argv[0], res.ExitCode)
			}
		}
	}
	if err := s.o.Store.AddBot(ctx, b); err != nil {
		if errors.Is(err, store.ErrExists) {
			return store.Bot{}, shared.Errorf(http.StatusConflict, shared.CodeConflict, "bot %s is already on this computer", botID)
		}
		return store.Bot{}, err
	}
	return b, nil
}

// Bots lists a computer's bots.
func (s *Service) Bots(ctx context.Context, computerID string) ([]store.Bot, error) {
	return s.o.Store.ListBots(ctx, computerID)
}

// HasBot returns the computer if botID was added to it, else ErrNoBot.
func (s *Service) HasBot(ctx context.Context, computerID, botID string) (store.Computer, error) {
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return c, err
	}
	if !ValidID(botID) {
		return c, shared.Errorf(http.StatusBadRequest, shared.CodeInvalidID, "botId: want [A-Za-z0-9_-]{1,64}")
	}
	bots, err := s.o.Store.ListBots(ctx, computerID)
	if err != nil {
		return c, err
	}
	for _, b := range bots {
		if b.ID == botID {
			return c, nil
		}
	}
	return c, ErrNoBot
}

// LatestCheckpoint is the computer's latest checkpoint metadata.
func (s *Service) LatestCheckpoint(ctx context.Context, computerID string) (store.Checkpoint, error) {
	return s.o.Store.LatestCheckpoint(ctx, computerID)
}

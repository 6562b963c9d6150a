package main

import (
	"context"
	"net/http"
	"os"
	"strconv"

	"github.com/open-bot/computer/apps/botd/internal/actchan"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
)

// screenActs is an act channel's screen: screen id of sm under one lease;
// every request goes through the lease like the act route's.
type screenActs struct {
	sm    *screen.Manager
	id    string
	lease string
}

func (a screenActs) Act(ctx context.Context, actions []shared.Action) error {
	return a.sm.WithLease(ctx, a.id, a.lease, func(ctx context.Context, s *screen.Screen) error {
		res, err := s.RunActions(ctx, actions)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Error != nil {
				return shared.Errorf(http.StatusConflict, r.Error.Code, "actions[%d] (%s): %s", r.Index, r.Type, r.Error.Message)
			}
		}
		return nil
	})
}

func (a screenActs) Pointer(ctx context.Context) (p shared.Point, err error) {
	err = a.sm.WithLease(ctx, a.id, a.lease, func(ctx context.Context, s *screen.Screen) error {
		p, err = s.Pointer(ctx)
		return err
	})
	return p, err
}

func (a screenActs) Size() (int, int) { return screen.Width, screen.Height }

func (a screenActs) Clipboard(ctx context.Context) (string, error) {
	return a.sm.Clipboard(ctx, a.id, a.lease)
}

func (a screenActs) SetClipboard(ctx context.Context, text string) error {
	return a.sm.SetClipboard(ctx, a.id, a.lease, text)
}

// actChannels is execsvc's ActChannel: a command's channel to a screen of
// sm under a lease it holds now, with the Python modules at pyPath.
func actChannels(sm func() *screen.Manager, pyPath string) func(ctx context.Context, id, lease string) (*os.File, []string, func(), error) {
	return func(ctx context.Context, id, lease string) (*os.File, []string, func(), error) {
		m := sm()
		if m == nil || pyPath == "" {
			return nil, nil, nil, actchan.ErrNoScreen
		}
		if err := screen.ValidID(id); err != nil {
			return nil, nil, nil, err
		}
		if _, err := m.Leases().Check(id, lease); err != nil {
			return nil, nil, nil, err
		}
		child, stop, err := actchan.Open(ctx, screenActs{sm: m, id: id, lease: lease})
		if err != nil {
			return nil, nil, nil, err
		}
		return child, []string{actchan.EnvFD + "=" + strconv.Itoa(3), "PYTHONPATH=" + pyPath}, stop, nil
	}
}

package group

import (
	"context"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/store"
)

// fenced is the store as a group member uses it: every write that acts for
// a computer carries the computer's ownership fence, and making a computer
// takes its ownership first.
type fenced struct {
	store.Store
	g *Group
}

// Store wraps inner for this member.
func (g *Group) Store(inner store.Store) store.Store { return &fenced{Store: inner, g: g} }

func (f *fenced) CreateComputer(ctx context.Context, c store.Computer) error {
	sent := time.Now()
	l, err := f.Store.AcquireLease(ctx, ownerKey(c.ID), f.g.id, f.g.o.TTL)
	if err != nil {
		return err
	}
	if err := f.Store.CreateComputer(ctx, c); err != nil {
		_ = f.Store.ReleaseLease(context.WithoutCancel(ctx), ownerKey(c.ID), l.Epoch)
		return err
	}
	f.g.created(c.ID, l, sent)
	return nil
}

func (f *fenced) UpdateComputer(ctx context.Context, id string, u store.StateUpdate) (store.Computer, error) {
	ctx, err := f.g.Fence(ctx, id)
	if err != nil {
		return store.Computer{}, err
	}
	return f.Store.UpdateComputer(ctx, id, u)
}

func (f *fenced) AddBot(ctx context.Context, b store.Bot) error {
	ctx, err := f.g.Fence(ctx, b.ComputerID)
	if err != nil {
		return err
	}
	return f.Store.AddBot(ctx, b)
}

func (f *fenced) RemoveBot(ctx context.Context, computerID, botID string) error {
	ctx, err := f.g.Fence(ctx, computerID)
	if err != nil {
		return err
	}
	return f.Store.RemoveBot(ctx, computerID, botID)
}

func (f *fenced) PutCheckpoint(ctx context.Context, c store.Checkpoint) error {
	if c.LeaseKey == "" { // a run's checkpoint carries the run's own fence
		var err error
		if ctx, err = f.g.Fence(ctx, c.ComputerID); err != nil {
			return err
		}
	}
	return f.Store.PutCheckpoint(ctx, c)
}

func (f *fenced) PutSecret(ctx context.Context, sec store.Secret) (bool, error) {
	ctx, err := f.g.Fence(ctx, sec.ComputerID)
	if err != nil {
		return false, err
	}
	return f.Store.PutSecret(ctx, sec)
}

func (f *fenced) DeleteSecret(ctx context.Context, computerID, name string) error {
	ctx, err := f.g.Fence(ctx, computerID)
	if err != nil {
		return err
	}
	return f.Store.DeleteSecret(ctx, computerID, name)
}

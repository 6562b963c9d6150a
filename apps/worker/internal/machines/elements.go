package machines

import (
	"context"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// ElementsMachine is a Machine that reads a screen's elements (issue 23):
// the visible, interactive or labelled things on it with boxes in screen
// pixels, and acts that target an element instead of a point. botd
// machines are; a machine that is not answers point actions only (the
// tools say so to the model).
type ElementsMachine interface {
	// ObserveElements is Observe plus the screen's elements.
	ObserveElements(ctx context.Context, id, leaseID string) (client.Observation, error)
	// ActElements is Act whose actions may target elements and whose
	// final observation carries the elements.
	ActElements(ctx context.Context, id, leaseID string, actions []shared.Action) (client.ActResult, error)
}

var _ ElementsMachine = (*Botd)(nil)

// ElementsOf is m's ElementsMachine (looking through wrappers that Unwrap,
// like the single-screen one), or nil when m cannot list elements.
func ElementsOf(m Machine) ElementsMachine {
	if e, ok := m.(ElementsMachine); ok {
		return e
	}
	if u, ok := m.(interface{ Unwrap() Machine }); ok {
		return ElementsOf(u.Unwrap())
	}
	return nil
}

// ObserveElements implements ElementsMachine.
func (b *Botd) ObserveElements(ctx context.Context, id, leaseID string) (client.Observation, error) {
	return b.c.ObserveElements(ctx, id, leaseID)
}

// ActElements implements ElementsMachine.
func (b *Botd) ActElements(ctx context.Context, id, leaseID string, actions []shared.Action) (client.ActResult, error) {
	return b.c.ActElements(ctx, id, leaseID, actions)
}

package providers

import (
	"context"
	"errors"
	"fmt"
)

// Registry is the providers this worker runs, by kind.
type Registry map[string]Provider

// Get returns the provider of kind, or ErrUnknownKind.
func (r Registry) Get(kind string) (Provider, error) {
	if p, ok := r[kind]; ok && p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
}

// RestoreFunc imports the computer's latest checkpoint into a replacement
// machine before anything else uses it. nil: the replacement starts fresh.
type RestoreFunc func(ctx context.Context, m Machine) error

// Ensured is the machine Ensure returns and the ref the caller must store.
type Ensured struct {
	Machine Machine
	Kind    string
	Ref     string
	// Replaced: Ref is a new machine (the old one was gone, of another kind,
	// or there was none), restored by the RestoreFunc when there was one.
	Replaced bool
}

// Ensure returns a running machine of kind for a computer whose stored
// machine is (prevKind, prevRef). prevRef goes back only to the provider of
// prevKind and only when that is kind; a machine that is gone (ErrGone), a
// changed kind or no ref at all makes a replacement: Provision, Reconnect,
// then restore before first use. Any other Reconnect error is returned as
// is: a slow or stopped engine is no reason to abandon a machine. A
// replacement that fails to start or restore is destroyed again. The
// machine of another kind is left to the caller (its provider may be gone).
func Ensure(ctx context.Context, reg Registry, kind, prevKind, prevRef string, spec Spec, restore RestoreFunc) (Ensured, error) {
	p, err := reg.Get(kind)
	if err != nil {
		return Ensured{}, err
	}
	if prevRef != "" && prevKind == kind {
		m, err := p.Reconnect(ctx, prevRef, spec)
		if err == nil {
			return Ensured{Machine: m, Kind: kind, Ref: prevRef}, nil
		}
		if !errors.Is(err, ErrGone) {
			return Ensured{}, err
		}
	}
	ref, err := p.Provision(ctx, spec)
	if err != nil {
		return Ensured{}, fmt.Errorf("provision a %s machine: %w", kind, err)
	}
	undo := func(cause error) (Ensured, error) {
		if derr := p.Destroy(context.WithoutCancel(ctx), ref); derr != nil {
			cause = errors.Join(cause, fmt.Errorf("and destroying it failed: %w", derr))
		}
		return Ensured{}, cause
	}
	m, err := p.Reconnect(ctx, ref, spec)
	if err != nil {
		return undo(fmt.Errorf("start the new %s machine: %w", kind, err))
	}
	if restore != nil {
		if err := restore(ctx, m); err != nil {
			return undo(fmt.Errorf("restore the latest checkpoint: %w", err))
		}
	}
	return Ensured{Machine: m, Kind: kind, Ref: ref, Replaced: true}, nil
}

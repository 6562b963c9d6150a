package providers

// The box kind: the glue between the Provider interface and the adapter in
// its own room (providers/box, which does not import this package). Box has
// one desktop stream per box, so the kind is the adapter behind the
// single-screen wrapper: the first bot's screen is the box's display :0,
// and every other bot's graphical tools answer MULTI_SCREEN_UNAVAILABLE
// while its shell and file tools work.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/providers/box"
)

// KindBox is Box's boxes (or the emulator of its API).
const KindBox = box.Kind

// Box is the box kind.
type Box struct {
	p      *box.Provider
	single *SingleScreen
}

// NewBox wraps the adapter; stateDir keeps which screen came first on
// each box (across worker restarts).
func NewBox(p *box.Provider, stateDir string) (*Box, error) {
	s, err := NewSingleScreen(&boxInner{p: p}, stateDir)
	if err != nil {
		return nil, err
	}
	return &Box{p: p, single: s}, nil
}

// Adapter is the adapter behind the kind.
func (x *Box) Adapter() *box.Provider { return x.p }

// Describe: one screen; stop archives the box (its filesystem kept) and
// resume brings the same box back.
func (x *Box) Describe() Description {
	return Description{Kind: KindBox, Capabilities: Capabilities{MultiScreen: false, Stop: true, Persistent: true}}
}

// Provision implements Provider.
func (x *Box) Provision(ctx context.Context, spec Spec) (string, error) {
	return x.single.Provision(ctx, spec)
}

// Reconnect implements Provider.
func (x *Box) Reconnect(ctx context.Context, ref string, spec Spec) (Machine, error) {
	return x.single.Reconnect(ctx, ref, spec)
}

// Stop implements Provider (archive).
func (x *Box) Stop(ctx context.Context, ref string) error { return x.single.Stop(ctx, ref) }

// Destroy implements Provider (delete); a box already gone is fine.
func (x *Box) Destroy(ctx context.Context, ref string) error { return x.single.Destroy(ctx, ref) }

// List returns the account's boxes, for reconcile (Box has no labels: a
// box is matched by its ref).
func (x *Box) List(ctx context.Context) ([]Listed, error) {
	ls, err := x.p.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(ls))
	for _, l := range ls {
		out = append(out, Listed{Ref: l.Ref, Running: l.Running})
	}
	return out, nil
}

// Close ends the adapter's sessions.
func (x *Box) Close() { x.p.Close() }

// boxInner is the adapter as a Provider, under the single-screen wrapper.
type boxInner struct{ p *box.Provider }

func boxGone(err error) error {
	if err != nil && errors.Is(err, box.ErrNotFound) && !errors.Is(err, ErrGone) {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return err
}

func (x *boxInner) Describe() Description {
	return Description{Kind: KindBox, Capabilities: Capabilities{MultiScreen: false, Stop: true, Persistent: true}}
}

func (x *boxInner) Provision(ctx context.Context, _ Spec) (string, error) {
	return x.p.Provision(ctx)
}

func (x *boxInner) Reconnect(ctx context.Context, ref string, _ Spec) (Machine, error) {
	m, err := x.p.Reconnect(ctx, ref)
	if err != nil {
		return nil, boxGone(err)
	}
	return m, nil
}

func (x *boxInner) Stop(ctx context.Context, ref string) error { return boxGone(x.p.Stop(ctx, ref)) }

func (x *boxInner) Destroy(ctx context.Context, ref string) error {
	err := x.p.Destroy(ctx, ref)
	if errors.Is(err, box.ErrNotFound) {
		return nil // already gone: the wrapper forgets its first screen
	}
	return err
}

// boxFromEnv makes the box kind when a key is configured (nil, nil when
// not):
//
//	BOX_API_KEY / BOX_API_KEY_FILE  the key, box_… (the file: the worker's, 0600); sealed in memory
//	BOX_API_URL                     Box's URL (the API at …/api/box/v1)
//	BOX_TTL_SECONDS                 7200: a box's life after its last refresh (refreshed while in use)
func boxFromEnv(getenv func(string) string, dataDir string, env []string, log *zerolog.Logger) (*Box, error) {
	k, err := sealedKey(getenv, dataDir, "box", box.KeyFromEnv, box.NewKey)
	if err != nil || k == nil {
		return nil, err
	}
	o := box.Options{APIURL: strings.TrimSpace(getenv("BOX_API_URL")), Key: k, Env: env, Log: log, NoHeldStream: noHeldStream(getenv)}
	if v := strings.TrimSpace(getenv("BOX_TTL_SECONDS")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 60 || n > 86400 {
			return nil, fmt.Errorf("BOX_TTL_SECONDS: want a whole number of seconds 60..86400, got %q", v)
		}
		o.TTL = time.Duration(n) * time.Second
	}
	p, err := box.New(o)
	if err != nil {
		return nil, err
	}
	return NewBox(p, filepath.Join(dataDir, "box", "single-screen"))
}

// boxConfigured says whether the environment names a Box key.
func boxConfigured(getenv func(string) string) bool {
	return strings.TrimSpace(getenv("BOX_API_KEY")) != "" || strings.TrimSpace(getenv("BOX_API_KEY_FILE")) != ""
}

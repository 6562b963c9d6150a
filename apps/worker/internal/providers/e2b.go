package providers

// The e2b kind: the glue between the Provider interface and the adapter in
// its own room (providers/e2b, which does not import this package).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/pkg/shared/client"
)

// KindE2B is E2B's sandboxes (or any cloud or emulator speaking its API).
const KindE2B = e2b.Kind

// E2B is the e2b kind.
type E2B struct{ p *e2b.Provider }

// NewE2B wraps the adapter.
func NewE2B(p *e2b.Provider) *E2B { return &E2B{p: p} }

// Adapter is the adapter behind the kind.
func (x *E2B) Adapter() *e2b.Provider { return x.p }

// Describe: open-bot mode runs botd in the sandbox (its own screens), and
// desktop mode the command-driven desktop machine (displays :0, :1, … started
// through envd); pause keeps memory and disk in both.
func (x *E2B) Describe() Description {
	return Description{Kind: KindE2B, Capabilities: Capabilities{MultiScreen: true, Stop: true, Persistent: true}}
}

// gone turns the adapter's "no such sandbox" into ErrGone.
func gone(err error) error {
	if err != nil && errors.Is(err, e2b.ErrNotFound) && !errors.Is(err, ErrGone) {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return err
}

// Provision implements Provider.
func (x *E2B) Provision(ctx context.Context, spec Spec) (string, error) {
	return x.p.Provision(ctx, e2b.Spec{ComputerID: spec.ComputerID, BotdToken: spec.BotdToken, Template: spec.Template})
}

// Reconnect implements Provider.
func (x *E2B) Reconnect(ctx context.Context, ref string, spec Spec) (Machine, error) {
	if r, err := e2b.ParseRef(ref); err == nil && e2b.Desktop(r.Template) {
		// The vendor's desktop: the command-driven desktop machine on envd.
		m, err := x.p.ReconnectDesktop(ctx, ref)
		if err != nil {
			return nil, gone(err)
		}
		return m, nil
	}
	c, err := x.p.Reconnect(ctx, ref, e2b.Spec{ComputerID: spec.ComputerID, BotdToken: spec.BotdToken})
	if err != nil {
		return nil, gone(err)
	}
	return e2bMachine(c), nil
}

// e2bMachine is the machine an open-bot sandbox is: its botd (reached
// through the adapter's forwarder, whose base URL the client holds).
func e2bMachine(c *client.Client) Machine { return machines.BotdOf(c) }

// Stop implements Provider (pause).
func (x *E2B) Stop(ctx context.Context, ref string) error { return gone(x.p.Stop(ctx, ref)) }

// Destroy implements Provider (kill).
func (x *E2B) Destroy(ctx context.Context, ref string) error { return gone(x.p.Destroy(ctx, ref)) }

// List returns the sandboxes marked as open-bot computers, for reconcile.
func (x *E2B) List(ctx context.Context) ([]Listed, error) {
	ls, err := x.p.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(ls))
	for _, l := range ls {
		out = append(out, Listed{Ref: l.Ref, ComputerID: l.ComputerID, Running: l.Running})
	}
	return out, nil
}

// Close ends the adapter's forwarders and refreshers.
func (x *E2B) Close() { x.p.Close() }

// e2bFromEnv makes the e2b kind when a key is configured (nil, nil when
// not):
//
//	E2B_API_KEY / E2B_API_KEY_FILE  the key (the file: the worker's, 0600); sealed in memory
//	E2B_API_URL                     https://api.e2b.app
//	E2B_DOMAIN                      e2b.app (when an answer names none)
//	E2B_SANDBOX_URL                 one URL for every sandbox port (E2b-Sandbox-Id/-Port headers)
//	E2B_TEMPLATE                    open-bot (a template built from the computer image)
//	E2B_TIMEOUT_SECONDS             600: a sandbox's life after its last use
func e2bFromEnv(getenv func(string) string, dataDir string, env []string, log *zerolog.Logger) (*E2B, error) {
	k, err := sealedKey(getenv, dataDir, "e2b", e2b.KeyFromEnv, e2b.NewKey)
	if err != nil || k == nil {
		return nil, err
	}
	o := e2b.Options{
		APIURL: strings.TrimSpace(getenv("E2B_API_URL")), Domain: strings.TrimSpace(getenv("E2B_DOMAIN")),
		SandboxURL: strings.TrimSpace(getenv("E2B_SANDBOX_URL")), Template: strings.TrimSpace(getenv("E2B_TEMPLATE")),
		Key: k, Env: env, Log: log, NoHeldStream: noHeldStream(getenv),
	}
	if v := strings.TrimSpace(getenv("E2B_TIMEOUT_SECONDS")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 30 {
			return nil, fmt.Errorf("E2B_TIMEOUT_SECONDS: want a whole number of seconds ≥ 30, got %q", v)
		}
		o.Timeout = time.Duration(n) * time.Second
	}
	p, err := e2b.New(o)
	if err != nil {
		return nil, err
	}
	return NewE2B(p), nil
}

// e2bConfigured says whether the environment names an E2B key.
func e2bConfigured(getenv func(string) string) bool {
	return strings.TrimSpace(getenv("E2B_API_KEY")) != "" || strings.TrimSpace(getenv("E2B_API_KEY_FILE")) != ""
}

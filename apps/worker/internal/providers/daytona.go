package providers

// The daytona kind: the glue between the Provider interface and the adapter
// in its own room (providers/daytona, which does not import this package).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
)

// KindDaytona is Daytona's sandboxes (or the emulator of its API).
const KindDaytona = daytona.Kind

// Daytona is the daytona kind.
type Daytona struct{ p *daytona.Provider }

// NewDaytona wraps the adapter.
func NewDaytona(p *daytona.Provider) *Daytona { return &Daytona{p: p} }

// Adapter is the adapter behind the kind.
func (x *Daytona) Adapter() *daytona.Provider { return x.p }

// Describe: the open-bot snapshot runs botd in the sandbox (its own
// screens), the desktop snapshot the command-driven desktop machine
// (display :0 the vendor's computer-use desktop, :1, … started through
// commands); stop keeps the disk (not memory: botd or the desktop
// restarts, and the workspace, home and browser profiles are on that disk).
func (x *Daytona) Describe() Description {
	return Description{Kind: KindDaytona, Capabilities: Capabilities{MultiScreen: true, Stop: true, Persistent: true}}
}

// daytonaGone turns the adapter's "no such sandbox" into ErrGone.
func daytonaGone(err error) error {
	if err != nil && errors.Is(err, daytona.ErrNotFound) && !errors.Is(err, ErrGone) {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return err
}

// Provision implements Provider.
func (x *Daytona) Provision(ctx context.Context, spec Spec) (string, error) {
	return x.p.Provision(ctx, daytona.Spec{ComputerID: spec.ComputerID, BotdToken: spec.BotdToken, Snapshot: spec.Template})
}

// Reconnect implements Provider.
func (x *Daytona) Reconnect(ctx context.Context, ref string, spec Spec) (Machine, error) {
	if r, err := daytona.ParseRef(ref); err == nil && daytona.Desktop(r.Snapshot) {
		// The vendor's computer-use desktop: the command-driven desktop
		// machine on the toolbox.
		m, err := x.p.ReconnectDesktop(ctx, ref)
		if err != nil {
			return nil, daytonaGone(err)
		}
		return m, nil
	}
	c, err := x.p.Reconnect(ctx, ref, daytona.Spec{ComputerID: spec.ComputerID, BotdToken: spec.BotdToken})
	if err != nil {
		return nil, daytonaGone(err)
	}
	return machines.BotdOf(c), nil
}

// Stop implements Provider.
func (x *Daytona) Stop(ctx context.Context, ref string) error {
	return daytonaGone(x.p.Stop(ctx, ref))
}

// Destroy implements Provider.
func (x *Daytona) Destroy(ctx context.Context, ref string) error {
	return daytonaGone(x.p.Destroy(ctx, ref))
}

// List returns the sandboxes labelled as open-bot computers, for reconcile.
func (x *Daytona) List(ctx context.Context) ([]Listed, error) {
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
func (x *Daytona) Close() { x.p.Close() }

// daytonaFromEnv makes the daytona kind when a key is configured (nil, nil
// when not):
//
//	DAYTONA_API_KEY / DAYTONA_API_KEY_FILE  the key (the file: the worker's, 0600); sealed in memory
//	DAYTONA_API_URL                         https://app.daytona.io/api
//	DAYTONA_TARGET                          the region ("" the organisation's default)
//	DAYTONA_SNAPSHOT                        open-bot (a snapshot built from the computer image)
//	DAYTONA_AUTO_STOP_MINUTES               15: idle minutes before Daytona stops a sandbox (0 never);
//	                                        a computer in use is marked active well within it
func daytonaFromEnv(getenv func(string) string, dataDir string, env []string, log *zerolog.Logger) (*Daytona, error) {
	k, err := sealedKey(getenv, dataDir, "daytona", daytona.KeyFromEnv, daytona.NewKey)
	if err != nil || k == nil {
		return nil, err
	}
	o := daytona.Options{
		APIURL: strings.TrimSpace(getenv("DAYTONA_API_URL")), Target: strings.TrimSpace(getenv("DAYTONA_TARGET")),
		Snapshot: strings.TrimSpace(getenv("DAYTONA_SNAPSHOT")), AutoStop: daytona.DefaultAutoStop,
		Key: k, Env: env, Log: log, NoHeldStream: noHeldStream(getenv),
	}
	if v := strings.TrimSpace(getenv("DAYTONA_AUTO_STOP_MINUTES")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("DAYTONA_AUTO_STOP_MINUTES: want a whole number of minutes ≥ 0, got %q", v)
		}
		o.AutoStop = n
		if n > 0 {
			o.ActivityEvery = min(5*time.Minute, time.Duration(n)*time.Minute/3)
		}
	}
	p, err := daytona.New(o)
	if err != nil {
		return nil, err
	}
	return NewDaytona(p), nil
}

// daytonaConfigured says whether the environment names a Daytona key.
func daytonaConfigured(getenv func(string) string) bool {
	return strings.TrimSpace(getenv("DAYTONA_API_KEY")) != "" || strings.TrimSpace(getenv("DAYTONA_API_KEY_FILE")) != ""
}

// Templates: open-bot (botd in the sandbox, a snapshot built from the
// computer image), desktop (the vendor's stock computer-use desktop) and
// the worker's DAYTONA_SNAPSHOT, its default. A computer's template is the
// snapshot its sandbox is made from.
func (x *Daytona) Templates() ([]string, string) {
	def := x.p.DefaultSnapshot()
	names := []string{daytona.DefaultSnapshot, daytona.DesktopSnapshot}
	if def != daytona.DefaultSnapshot && def != daytona.DesktopSnapshot {
		names = append(names, def)
	}
	return names, def
}

var _ Templater = (*Daytona)(nil)

package providers

// The worker's providers: FromEnv plus attach.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rs/zerolog"
)

// KnownKinds is every provider kind this worker can run.
var KnownKinds = []string{KindAttach, KindBox, KindDaytona, KindDocker, KindE2B, KindKubernetes, KindLocal, KindSingleScreen}

// DefaultMachinesDir is where local computers' homes and docker token files
// live: it must be traversable by botd's users (a home under a 0700
// directory such as /root breaks Codex), so not under a 0700 DATA_DIR.
func DefaultMachinesDir(dataDir string) string {
	if os.Geteuid() == 0 {
		return "/var/lib/open-bot/machines"
	}
	return filepath.Join(dataDir, "machines")
}

// CheckKind refuses a provider kind this worker does not have ("" is
// FromEnv's choice).
func CheckKind(kind string) error {
	for _, k := range KnownKinds {
		if k == kind {
			return nil
		}
	}
	if kind == "" {
		return nil
	}
	return fmt.Errorf("WORKER_PROVIDER=%q: unknown provider kind (this worker has: %s)", kind, strings.Join(KnownKinds, ", "))
}

// WorkerOptions is what the worker's configuration says about providers.
type WorkerOptions struct {
	// Provider is the default kind for new computers ("": FromEnv's probe
	// chooses).
	Provider string
	// MachinesDir holds local computers and docker's token files (""
	// picks DefaultMachinesDir(DataDir)).
	MachinesDir, DataDir string
	// Getenv reads the providers' env (nil: os.Getenv).
	Getenv func(string) string
	Log    zerolog.Logger
}

// ForWorker builds the worker's registry: FromEnv (local, docker,
// single-screen; its probe picks the default) plus attach, and returns the
// default kind. Provider "" lets FromEnv choose; attach makes attach the
// default, and then a host where local/docker cannot be set up still
// serves attach (with a warning).
func ForWorker(ctx context.Context, c WorkerOptions) (Registry, string, *Setup, error) {
	log := c.Log
	if err := CheckKind(c.Provider); err != nil {
		return nil, "", nil, err
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	machines := c.MachinesDir
	if machines == "" {
		machines = DefaultMachinesDir(c.DataDir)
	}
	want := c.Provider
	if want == KindAttach {
		want = ""
	}
	env := func(k string) string {
		switch k {
		case "DATA_DIR":
			return machines
		case "WORKER_PROVIDER":
			return want
		}
		return getenv(k)
	}
	plog := log.With().Str("sub", "providers").Logger()
	setup, err := FromEnv(ctx, env, &plog)
	reg := Registry{}
	def := c.Provider
	switch {
	case err != nil && c.Provider == KindAttach:
		log.Warn().Err(err).Msg("local and docker providers unavailable; serving attach only")
		setup = nil
	case err != nil:
		return nil, "", nil, fmt.Errorf("providers (machines under %s): %w", machines, err)
	default:
		for k, p := range setup.Registry {
			reg[k] = p
		}
		if def == "" {
			def = setup.Default
		}
		log.Info().Str("default", def).Str("why", setup.Why).Str("machines", machines).Msg("providers")
	}
	reg[KindAttach] = NewAttach()
	if _, ok := reg[def]; !ok {
		var have []string
		for k := range reg {
			have = append(have, k)
		}
		sort.Strings(have)
		if setup != nil {
			setup.Close(context.Background())
		}
		return nil, "", nil, fmt.Errorf("WORKER_PROVIDER=%q: unknown provider kind (this worker has: %s)", def, strings.Join(have, ", "))
	}
	return reg, def, setup, nil
}

package main

// The worker's providers (providers.FromEnv plus attach) and its home store
// (homes.Local under DATA_DIR, or S3 by env).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// knownKinds is every provider kind this worker can run.
var knownKinds = []string{providers.KindAttach, providers.KindDocker, providers.KindE2B, providers.KindLocal, providers.KindSingleScreen}

// defaultMachinesDir is where local computers' homes and docker token files
// live: it must be traversable by botd's users (a home under a 0700
// directory such as /root breaks Codex), so not under a 0700 DATA_DIR.
func defaultMachinesDir(dataDir string) string {
	if os.Geteuid() == 0 {
		return "/var/lib/open-bot/machines"
	}
	return filepath.Join(dataDir, "machines")
}

// idleMinutes reads COMPUTER_IDLE_MINUTES (default 30; 0 never suspends).
func idleMinutes(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv("COMPUTER_IDLE_MINUTES"))
	if v == "" {
		return 30 * time.Minute, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("COMPUTER_IDLE_MINUTES: want a whole number of minutes (0: never), got %q", v)
	}
	return time.Duration(n) * time.Minute, nil
}

// checkKind refuses a provider kind this worker does not have ("" is
// FromEnv's choice).
func checkKind(kind string) error {
	for _, k := range knownKinds {
		if k == kind {
			return nil
		}
	}
	if kind == "" {
		return nil
	}
	return fmt.Errorf("WORKER_PROVIDER=%q: unknown provider kind (this worker has: %s)", kind, strings.Join(knownKinds, ", "))
}

// providerSetup builds the registry: providers.FromEnv (local, docker,
// single-screen; its probe picks the default) plus attach. c.Provider ""
// lets FromEnv choose; attach makes attach the default, and then a host
// where local/docker cannot be set up still serves attach (with a warning).
func providerSetup(ctx context.Context, c serveConfig, log zerolog.Logger) (providers.Registry, string, *providers.Setup, error) {
	if err := checkKind(c.Provider); err != nil {
		return nil, "", nil, err
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	machines := c.MachinesDir
	if machines == "" {
		machines = defaultMachinesDir(c.DataDir)
	}
	want := c.Provider
	if want == providers.KindAttach {
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
	setup, err := providers.FromEnv(ctx, env, &plog)
	reg := providers.Registry{}
	def := c.Provider
	switch {
	case err != nil && c.Provider == providers.KindAttach:
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
	reg[providers.KindAttach] = providers.NewAttach()
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

// homeStore is the AgentHomeStore: homes.Local under DATA_DIR (homes/,
// home-revisions/) by default, or an S3-compatible bucket when
// WORKER_HOMES_S3_ENDPOINT is set:
//
//	WORKER_HOMES_S3_ENDPOINT         host:port
//	WORKER_HOMES_S3_BUCKET           bucket (made if missing)
//	WORKER_HOMES_S3_ACCESS_KEY_FILE  file holding the access key id
//	WORKER_HOMES_S3_SECRET_KEY_FILE  file holding the secret key
//	WORKER_HOMES_S3_REGION           region (optional)
//	WORKER_HOMES_S3_PREFIX           object name prefix (optional)
//	WORKER_HOMES_S3_INSECURE         "true": plain http (loopback only)
func homeStore(ctx context.Context, c serveConfig) (homes.Store, string, error) {
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ep := strings.TrimSpace(getenv("WORKER_HOMES_S3_ENDPOINT"))
	if ep == "" {
		l, err := homes.NewLocal(c.DataDir)
		return l, "local " + filepath.Join(c.DataDir, "homes"), err
	}
	readKey := func(name string) (string, error) {
		f := strings.TrimSpace(getenv(name))
		if f == "" {
			return "", fmt.Errorf("%s is required with WORKER_HOMES_S3_ENDPOINT", name)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	ak, err := readKey("WORKER_HOMES_S3_ACCESS_KEY_FILE")
	if err != nil {
		return nil, "", err
	}
	sk, err := readKey("WORKER_HOMES_S3_SECRET_KEY_FILE")
	if err != nil {
		return nil, "", err
	}
	bucket := strings.TrimSpace(getenv("WORKER_HOMES_S3_BUCKET"))
	if bucket == "" {
		return nil, "", errors.New("WORKER_HOMES_S3_BUCKET is required with WORKER_HOMES_S3_ENDPOINT")
	}
	o := homes.S3Options{Endpoint: ep, Bucket: bucket, AccessKey: ak, SecretKey: sk,
		Region: getenv("WORKER_HOMES_S3_REGION"), Prefix: getenv("WORKER_HOMES_S3_PREFIX"),
		Secure: getenv("WORKER_HOMES_S3_INSECURE") != "true", SpoolDir: c.DataDir}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := homes.NewS3(sctx, o)
	if err != nil {
		return nil, "", err
	}
	return s, "s3 " + ep + "/" + bucket, nil
}

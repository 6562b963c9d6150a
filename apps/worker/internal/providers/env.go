package providers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/rs/zerolog"
)

// Setup is the providers a worker runs, made from its environment.
type Setup struct {
	Registry Registry
	// Default is the kind new computers get: WORKER_PROVIDER when set, else
	// docker where an engine answers with the image present, else local.
	Default string
	// Why says how Default was chosen (for the start-up log).
	Why    string
	Local  *Local
	Docker *Docker
	// E2B is the e2b kind, made when an E2B key is configured.
	E2B *E2B
	// Daytona is the daytona kind, made when a Daytona key is configured.
	Daytona *Daytona
	// Box is the box kind, made when a Box key is configured.
	Box *Box
	// Kubernetes is the kubernetes kind, made when KUBERNETES_NAMESPACE is
	// set or WORKER_PROVIDER=kubernetes.
	Kubernetes *Kubernetes
}

// FromEnv builds the providers from the environment (os.Getenv when getenv
// is nil); ctx bounds the probe of the Docker engine.
//
//	DATA_DIR                  /var/lib/open-bot   computers/, docker/, single-screen/
//	WORKER_PROVIDER           (auto)              local, docker, e2b, daytona, box, kubernetes or single-screen (wraps the auto choice)
//	WORKER_BOTD_BIN           botd next to the worker, else /opt/botd/botd
//	WORKER_IMAGE              open-bot/computer:dev
//	DOCKER_HOST               the engine (Docker's own variable)
//	WORKER_LOCAL_DISPLAY_BASE 100, WORKER_LOCAL_PORT_BASE 20000, WORKER_LOCAL_SLOTS 32
//	WORKER_LOCAL_ID_BASE      61000 (each local computer's users: ids 61000-62999)
//
// Every machine's botd also gets the model and egress settings the worker
// has (MachineEnv: MODEL_UPSTREAM_URL, MODEL_API_KEY or the contents of
// MODEL_API_KEY_FILE, EGRESS_ALLOW; local machines also
// CODEX_CONFIG_EXTRA_FILE and CODEX_BIN, which name host paths), plus any
// names listed in WORKER_MACHINE_ENV (comma-separated).
//
// The e2b kind is there when E2B_API_KEY or E2B_API_KEY_FILE is set
// (e2bFromEnv lists its settings); WORKER_PROVIDER=e2b requires one. The
// daytona kind likewise with DAYTONA_API_KEY(_FILE) (daytonaFromEnv), and
// the box kind with BOX_API_KEY(_FILE) (boxFromEnv). The kubernetes kind
// is there when KUBERNETES_NAMESPACE is set or WORKER_PROVIDER=kubernetes
// (kubernetesFromEnv lists its settings).
func FromEnv(ctx context.Context, getenv func(string) string, log *zerolog.Logger) (*Setup, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	str := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	var errs []error
	num := func(k string) int {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive integer, got %q", k, v))
		}
		return n
	}
	dataDir := str("DATA_DIR", "/var/lib/open-bot")
	lo := LocalOptions{
		DataDir: dataDir, BotdBin: str("WORKER_BOTD_BIN", defaultBotdBin()),
		DisplayBase: num("WORKER_LOCAL_DISPLAY_BASE"), PortBase: num("WORKER_LOCAL_PORT_BASE"),
		Slots: num("WORKER_LOCAL_SLOTS"), IDBase: num("WORKER_LOCAL_ID_BASE"), Log: log,
	}
	common, localOnly, err := machineEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	lo.Env = append(append(lo.Env, common...), localOnly...)
	want := str("WORKER_PROVIDER", "")
	switch want {
	case "", KindLocal, KindDocker, KindSingleScreen:
	case KindE2B:
		if !e2bConfigured(getenv) {
			errs = append(errs, errors.New("WORKER_PROVIDER=e2b: set E2B_API_KEY or E2B_API_KEY_FILE (and E2B_API_URL for anything but E2B's own cloud)"))
		}
	case KindDaytona:
		if !daytonaConfigured(getenv) {
			errs = append(errs, errors.New("WORKER_PROVIDER=daytona: set DAYTONA_API_KEY or DAYTONA_API_KEY_FILE (and DAYTONA_API_URL for anything but Daytona's own cloud)"))
		}
	case KindKubernetes:
	case KindBox:
		if !boxConfigured(getenv) {
			errs = append(errs, errors.New("WORKER_PROVIDER=box: set BOX_API_KEY or BOX_API_KEY_FILE (and BOX_API_URL for anything but Box's own service)"))
		}
	default:
		errs = append(errs, fmt.Errorf("WORKER_PROVIDER: %w: %q (want local, docker, e2b, daytona, box, kubernetes or single-screen)", ErrUnknownKind, want))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	s := &Setup{Registry: Registry{}}
	if s.Docker, err = NewDocker(DockerOptions{Image: str("WORKER_IMAGE", DefaultImage), Host: getenv("DOCKER_HOST"), DataDir: dataDir, Log: log, Env: common}); err != nil {
		return nil, err
	}
	s.Registry[KindDocker] = s.Docker
	if s.Local, err = NewLocal(lo); err != nil {
		s.Docker.Close()
		return nil, err
	}
	s.Registry[KindLocal] = s.Local
	if s.E2B, err = e2bFromEnv(getenv, dataDir, common, log); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	if s.E2B != nil {
		s.Registry[KindE2B] = s.E2B
	}
	if s.Daytona, err = daytonaFromEnv(getenv, dataDir, common, log); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	if s.Daytona != nil {
		s.Registry[KindDaytona] = s.Daytona
	}
	if s.Box, err = boxFromEnv(getenv, dataDir, common, log); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	if s.Box != nil {
		s.Registry[KindBox] = s.Box
	}
	if s.Kubernetes, err = kubernetesFromEnv(getenv, want == KindKubernetes, common, log); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	if s.Kubernetes != nil {
		s.Registry[KindKubernetes] = s.Kubernetes
	}

	auto, why := s.probe(ctx)
	single, err := NewSingleScreen(s.Registry[auto], filepath.Join(dataDir, "single-screen"))
	if err != nil {
		s.Close(context.Background())
		return nil, err
	}
	s.Registry[KindSingleScreen] = single
	switch want {
	case "":
		s.Default, s.Why = auto, why
	case KindSingleScreen:
		s.Default, s.Why = want, "WORKER_PROVIDER=single-screen, over "+auto+" ("+why+")"
	default:
		s.Default, s.Why = want, "WORKER_PROVIDER="+want
	}
	return s, nil
}

// probe picks docker when an engine answers and has the image, else local.
func (s *Setup) probe(ctx context.Context) (kind, why string) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Docker.Ping(pctx); err != nil {
		return KindLocal, "no Docker engine answers"
	}
	if _, err := s.Docker.cli.ImageInspect(pctx, s.Docker.o.Image); err != nil {
		return KindLocal, "a Docker engine answers but image " + s.Docker.o.Image + " is missing (make image)"
	}
	return KindDocker, "a Docker engine answers and has " + s.Docker.o.Image
}

// Close stops the local computers and releases the engine client.
func (s *Setup) Close(ctx context.Context) error {
	var errs []error
	if s.Local != nil {
		errs = append(errs, s.Local.Close(ctx))
	}
	if s.Docker != nil {
		errs = append(errs, s.Docker.Close())
	}
	if s.E2B != nil {
		s.E2B.Close()
	}
	if s.Daytona != nil {
		s.Daytona.Close()
	}
	if s.Box != nil {
		s.Box.Close()
	}
	if s.Kubernetes != nil {
		s.Kubernetes.Close()
	}
	return errors.Join(errs...)
}

// defaultBotdBin is botd next to the running worker (make build puts both in
// bin/), else where scripts/run.sh installs it.
func defaultBotdBin() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "botd")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return "/opt/botd/botd"
}

// machineEnv is the environment every machine's botd gets from the worker's
// (see FromEnv); localOnly holds settings that name host paths.
func machineEnv(getenv func(string) string) (common, localOnly []string, err error) {
	add := func(to *[]string, k string) {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			*to = append(*to, k+"="+v)
		}
	}
	add(&common, "MODEL_UPSTREAM_URL")
	if k := strings.TrimSpace(getenv("MODEL_API_KEY")); k != "" {
		common = append(common, "MODEL_API_KEY="+k)
	} else if f := strings.TrimSpace(getenv("MODEL_API_KEY_FILE")); f != "" {
		b, rerr := os.ReadFile(f)
		if rerr != nil {
			return nil, nil, fmt.Errorf("MODEL_API_KEY_FILE: %w", rerr)
		}
		common = append(common, "MODEL_API_KEY="+strings.TrimSpace(string(b)))
	}
	add(&common, "EGRESS_ALLOW")
	for _, k := range strings.Split(getenv("WORKER_MACHINE_ENV"), ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if strings.HasPrefix(k, "BOTD_") || strings.Contains(k, "=") {
			return nil, nil, fmt.Errorf("WORKER_MACHINE_ENV: %q cannot be passed to a machine", k)
		}
		add(&common, k)
	}
	add(&localOnly, "CODEX_CONFIG_EXTRA_FILE")
	add(&localOnly, "CODEX_BIN")
	return common, localOnly, nil
}

// sealedKey reads a vendor's API key with fromEnv (its KEY or KEY_FILE
// variable) and seals it with the sealing key DATA_DIR/<vendor>/secret.key
// (made on first use); nil when no key is configured.
func sealedKey[K any](getenv func(string) string, dataDir, vendor string,
	fromEnv func(func(string) string) (string, error), seal func(string, *secret.Sealer) (*K, error)) (*K, error) {
	key, err := fromEnv(getenv)
	if err != nil || key == "" {
		return nil, err
	}
	sealer, err := secret.LoadOrCreate(filepath.Join(dataDir, vendor, "secret.key"))
	if err != nil {
		return nil, fmt.Errorf("%s: the sealing key: %w", vendor, err)
	}
	return seal(key, sealer)
}

// noHeldStream says whether the environment turns the desktop machines'
// held streams off (WORKER_DESKTOP_HELD_STREAM=0).
func noHeldStream(getenv func(string) string) bool {
	return strings.TrimSpace(getenv(desktop.HeldStreamEnv)) == "0"
}

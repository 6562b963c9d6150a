package providers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	dockerclient "github.com/moby/moby/client"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/machines"
)

// Labels on the containers and volumes the docker provider makes.
const (
	// LabelComputer marks a container or volume as ours; its value is the
	// worker's computer id.
	LabelComputer = "dev.open-bot.computer"
	// LabelMachine is the incarnation's name (container, volume and token
	// directory are named after it).
	LabelMachine = "dev.open-bot.machine"
)

// DefaultImage is the computer image `make image` builds.
const DefaultImage = "open-bot/computer:dev"

// In the computer image (images/computer/Dockerfile).
const (
	containerAPIPort   = 7000
	containerViewBase  = 6080
	containerTokenPath = "/run/secrets/botd_token"
	// containerModelKeyPath is where the model provider's key is mounted
	// (root's 0600 file, MODEL_API_KEY_FILE), never an env var.
	containerModelKeyPath = "/run/secrets/model_api_key"
)

// DockerOptions configures the docker provider.
type DockerOptions struct {
	// Image is the computer image (WORKER_IMAGE, default open-bot/computer:dev).
	Image string
	// Host is the engine address (DOCKER_HOST); "" uses the environment or
	// the default socket.
	Host string
	// DataDir holds docker/<machine>/token, the root-only token files
	// bind-mounted read-only into the containers.
	DataDir string
	// CallTimeout bounds every engine call (default 30 s): a hung engine is
	// an error that says so, not a hung worker.
	CallTimeout time.Duration
	// ReadyTimeout bounds the wait for botd's health after a start (default 120 s).
	ReadyTimeout time.Duration
	// MaxScreens is botd's MAX_SCREENS (default 4); the view ports of that
	// many screens are published.
	MaxScreens int
	// Env is extra environment for the containers (never BOTD_TOKEN).
	Env []string
	// Log is the provider's logger (nop when nil).
	Log *zerolog.Logger
}

// Docker is the docker provider: a container of the computer image per
// machine, /home on the worker-owned home (Spec.HomeDir, bind-mounted) or
// else a named volume, ports published on 127.0.0.1 only.
// Its refs are container ids.
type Docker struct {
	o   DockerOptions
	cli *dockerclient.Client
	log zerolog.Logger

	// mu serializes Provision's and Destroy's token-dir bookkeeping.
	mu sync.Mutex
}

// NewDocker returns the docker provider. It does not dial the engine.
func NewDocker(o DockerOptions) (*Docker, error) {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.DataDir == "" || !filepath.IsAbs(o.DataDir) {
		return nil, fmt.Errorf("docker provider: DATA_DIR must be an absolute path, got %q", o.DataDir)
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 120 * time.Second
	}
	if o.MaxScreens <= 0 {
		o.MaxScreens = 4
	}
	opts := []dockerclient.Opt{dockerclient.FromEnv}
	if o.Host != "" {
		opts = append(opts, dockerclient.WithHost(o.Host))
	}
	cli, err := dockerclient.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	d := &Docker{o: o, cli: cli, log: zerolog.Nop()}
	if o.Log != nil {
		d.log = o.Log.With().Str("component", "provider_docker").Logger()
	}
	return d, nil
}

// MountsHostDirs reports whether the engine runs on this host (a unix
// socket), so a host directory (a worker-owned home) can be bind-mounted;
// a remote engine gets volumes.
func (d *Docker) MountsHostDirs() bool {
	return strings.HasPrefix(d.cli.DaemonHost(), "unix://")
}

// Close releases the engine client.
func (d *Docker) Close() error { return d.cli.Close() }

// Describe: botd's own screens inside the container; the volume keeps /home.
func (d *Docker) Describe() Description {
	return Description{Kind: KindDocker, Capabilities: Capabilities{MultiScreen: true, Stop: true, Persistent: true}}
}

// call runs one engine call under CallTimeout and turns an engine that is
// down or too slow into an error that says so.
func (d *Docker) call(ctx context.Context, what string, f func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, d.o.CallTimeout)
	defer cancel()
	err := f(cctx)
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return err
	case ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("docker provider: %s: the Docker engine at %s did not answer within %s", what, d.cli.DaemonHost(), d.o.CallTimeout)
	case dockerclient.IsErrConnectionFailed(err):
		return fmt.Errorf("docker provider: %s: no Docker engine answers at %s: %w", what, d.cli.DaemonHost(), err)
	}
	return fmt.Errorf("docker provider: %s: %w", what, err)
}

// Ping says whether an engine answers (within CallTimeout).
func (d *Docker) Ping(ctx context.Context) error {
	return d.call(ctx, "ping", func(ctx context.Context) error {
		_, err := d.cli.Ping(ctx, dockerclient.PingOptions{NegotiateAPIVersion: true})
		return err
	})
}

func (d *Docker) tokenDir(machine string) string {
	return filepath.Join(d.o.DataDir, "docker", machine)
}

func volumeName(machine string) string    { return "open-bot-" + machine + "-home" }
func containerName(machine string) string { return "open-bot-" + machine }

// Provision creates the volume and the container (not started: the first
// Reconnect starts it).
func (d *Docker) Provision(ctx context.Context, spec Spec) (string, error) {
	if err := checkComputerID(spec.ComputerID); err != nil {
		return "", err
	}
	if len(spec.BotdToken) < 16 {
		return "", errors.New("docker provider: botd token must be at least 16 characters")
	}
	if err := checkHomeDir(spec.HomeDir); err != nil {
		return "", fmt.Errorf("docker provider: %w", err)
	}
	if err := d.Ping(ctx); err != nil {
		return "", err
	}
	err := d.call(ctx, "inspect image", func(ctx context.Context) error {
		_, err := d.cli.ImageInspect(ctx, d.o.Image)
		return err
	})
	if cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("docker provider: image %s is missing: build it with `make image`", d.o.Image)
	}
	if err != nil {
		return "", err
	}

	machine := machineName(spec.ComputerID)
	labels := map[string]string{LabelComputer: spec.ComputerID, LabelMachine: machine}
	d.mu.Lock()
	defer d.mu.Unlock()
	dir := d.tokenDir(machine)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("docker provider: %w", err)
	}
	undo := func(err error) (string, error) {
		bg := context.WithoutCancel(ctx)
		_ = d.call(bg, "remove volume", func(ctx context.Context) error {
			_, err := d.cli.VolumeRemove(ctx, volumeName(machine), dockerclient.VolumeRemoveOptions{Force: true})
			return err
		})
		_ = os.RemoveAll(dir)
		return "", err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := writeSecret(tokenFile, spec.BotdToken); err != nil {
		return undo(fmt.Errorf("docker provider: %w", err))
	}
	home := mount.Mount{Type: mount.TypeVolume, Source: volumeName(machine), Target: "/home"}
	if spec.HomeDir != "" {
		// The worker's home, mounted directly: it outlives the container.
		home = mount.Mount{Type: mount.TypeBind, Source: spec.HomeDir, Target: "/home"}
	} else if err := d.call(ctx, "create volume", func(ctx context.Context) error {
		_, err := d.cli.VolumeCreate(ctx, dockerclient.VolumeCreateOptions{Name: volumeName(machine), Labels: labels})
		return err
	}); err != nil {
		return undo(err)
	}

	loopback := netip.MustParseAddr("127.0.0.1")
	exposed := network.PortSet{}
	bindings := network.PortMap{}
	publish := func(port int) {
		p := network.MustParsePort(strconv.Itoa(port) + "/tcp")
		exposed[p] = struct{}{}
		// HostPort "": the engine picks a free port, so a taken port never
		// blocks a start; Reconnect reads the binding back.
		bindings[p] = []network.PortBinding{{HostIP: loopback, HostPort: ""}}
	}
	publish(containerAPIPort)
	for i := 0; i < 2*d.o.MaxScreens; i++ {
		publish(containerViewBase + i)
	}
	env := []string{
		"BOTD_TOKEN_FILE=" + containerTokenPath,
		"MAX_SCREENS=" + strconv.Itoa(d.o.MaxScreens),
	}
	mounts := []mount.Mount{
		home,
		{Type: mount.TypeBind, Source: tokenFile, Target: containerTokenPath, ReadOnly: true},
	}
	for _, kv := range d.o.Env {
		switch {
		case strings.HasPrefix(kv, "BOTD_TOKEN="):
		case strings.HasPrefix(kv, "MODEL_API_KEY="):
			// The provider's key goes in as a root-only file like the
			// token: a container's environment is shown by `docker
			// inspect` to anyone who may use the engine.
			keyFile := filepath.Join(dir, "model_api_key")
			if err := writeSecret(keyFile, strings.TrimPrefix(kv, "MODEL_API_KEY=")); err != nil {
				return undo(fmt.Errorf("docker provider: %w", err))
			}
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: keyFile, Target: containerModelKeyPath, ReadOnly: true})
			env = append(env, "MODEL_API_KEY_FILE="+containerModelKeyPath)
		default:
			env = append(env, kv)
		}
	}
	var id string
	err = d.call(ctx, "create container", func(ctx context.Context) error {
		r, err := d.cli.ContainerCreate(ctx, dockerclient.ContainerCreateOptions{
			Name: containerName(machine),
			Config: &container.Config{
				Image: d.o.Image, Env: env, Labels: labels, ExposedPorts: exposed,
				Hostname: "computer",
				// Not the image's HEALTHCHECK: the worker asks botd for its
				// health itself (Machine.Health), and Docker runs each check
				// as an exec (runc, the shim, a shell and curl), about 0.13 s
				// of CPU every 5 s (measured: 3.8 s for 30 checks), 2.5 % of a
				// core per computer, for a status nothing here reads.
				Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
			},
			HostConfig: &container.HostConfig{
				PortBindings: bindings,
				Mounts:       mounts,
				// A fresh /tmp at every start: no X lock or socket of the last
				// run survives a stop, and the X socket dir is 1777 whatever
				// the image's botd makes of it.
				Tmpfs:         map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777", "/tmp/.X11-unix": "rw,nosuid,nodev,mode=1777"},
				ShmSize:       1 << 30,
				RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
			},
		})
		id = r.ID
		return err
	})
	if err != nil {
		return undo(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "container"), []byte(id), 0o600); err != nil {
		_ = d.call(context.WithoutCancel(ctx), "remove container", func(ctx context.Context) error {
			_, err := d.cli.ContainerRemove(ctx, id, dockerclient.ContainerRemoveOptions{Force: true})
			return err
		})
		return undo(fmt.Errorf("docker provider: %w", err))
	}
	d.log.Info().Str("ref", shortID(id)).Str("machine", machine).Msg("provisioned")
	return id, nil
}

var containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// inspect returns our container ref, ErrGone when it is not there (or not
// one of ours).
func (d *Docker) inspect(ctx context.Context, ref string) (container.InspectResponse, error) {
	if !containerID.MatchString(ref) {
		return container.InspectResponse{}, fmt.Errorf("%w: malformed ref", ErrGone)
	}
	var c container.InspectResponse
	err := d.call(ctx, "inspect container", func(ctx context.Context) error {
		r, err := d.cli.ContainerInspect(ctx, ref, dockerclient.ContainerInspectOptions{})
		c = r.Container
		return err
	})
	if cerrdefs.IsNotFound(err) {
		return c, ErrGone
	}
	if err != nil {
		return c, err
	}
	if c.Config == nil || c.Config.Labels[LabelComputer] == "" || c.Config.Labels[LabelMachine] == "" {
		return c, fmt.Errorf("%w: container %s is not an open-bot computer", ErrGone, shortID(ref))
	}
	return c, nil
}

// Reconnect starts the container when it is not running and waits until its
// botd is healthy. ErrGone when the container is gone.
func (d *Docker) Reconnect(ctx context.Context, ref string, _ Spec) (Machine, error) {
	c, err := d.inspect(ctx, ref)
	if err != nil {
		return nil, err
	}
	machine := c.Config.Labels[LabelMachine]
	tokenB, err := os.ReadFile(filepath.Join(d.tokenDir(machine), "token"))
	if err != nil {
		return nil, fmt.Errorf("docker provider: the token file of %s: %w", shortID(ref), err)
	}
	if c.State == nil || !c.State.Running {
		if err := d.call(ctx, "start container", func(ctx context.Context) error {
			_, err := d.cli.ContainerStart(ctx, ref, dockerclient.ContainerStartOptions{})
			return err
		}); err != nil {
			if cerrdefs.IsNotFound(err) {
				return nil, ErrGone
			}
			return nil, err
		}
		if c, err = d.inspect(ctx, ref); err != nil {
			return nil, err
		}
	}
	addr, err := hostPort(c, containerAPIPort)
	if err != nil && c.State != nil && (!c.State.Running || c.State.Restarting) {
		// botd died at once: the engine publishes no port for a container
		// that is not running, and its log says why.
		return nil, fmt.Errorf("docker provider: computer %s: container exited (code %d): %s", shortID(ref), c.State.ExitCode, d.lastLog(ctx, ref))
	}
	if err != nil {
		return nil, fmt.Errorf("docker provider: %s: %w", shortID(ref), err)
	}
	cl := machines.NewBotd("http://"+addr, strings.TrimSpace(string(tokenB)))
	var lastCheck time.Time
	exited := func() error {
		if time.Since(lastCheck) < time.Second {
			return nil
		}
		lastCheck = time.Now()
		c, err := d.inspect(ctx, ref)
		if errors.Is(err, ErrGone) {
			return fmt.Errorf("container %s was removed while starting: %w", shortID(ref), ErrGone)
		}
		if err != nil || c.State == nil || (c.State.Running && !c.State.Restarting) {
			return nil
		}
		// Exited, or restarting after an exit (the restart policy): botd
		// died while starting.
		return fmt.Errorf("container exited (code %d): %s", c.State.ExitCode, d.lastLog(ctx, ref))
	}
	if err := awaitHealthy(ctx, cl, d.o.ReadyTimeout, exited); err != nil {
		return nil, fmt.Errorf("docker provider: computer %s: %w", shortID(ref), err)
	}
	return cl, nil
}

// hostPort is where the engine published the container's port on 127.0.0.1.
func hostPort(c container.InspectResponse, port int) (string, error) {
	if c.NetworkSettings == nil {
		return "", errors.New("no network settings")
	}
	for _, b := range c.NetworkSettings.Ports[network.MustParsePort(strconv.Itoa(port)+"/tcp")] {
		if b.HostIP.IsLoopback() && b.HostPort != "" {
			return "127.0.0.1:" + b.HostPort, nil
		}
	}
	return "", fmt.Errorf("port %d is not published on 127.0.0.1", port)
}

// lastLog is the container's last output line that says most (botd never
// logs its token).
func (d *Docker) lastLog(ctx context.Context, ref string) string {
	var out bytes.Buffer
	_ = d.call(ctx, "container logs", func(ctx context.Context) error {
		r, err := d.cli.ContainerLogs(ctx, ref, dockerclient.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = stdcopy.StdCopy(&out, &out, io.LimitReader(r, 64<<10))
		return err
	})
	var t tailLines
	t.write(append(out.Bytes(), '\n'))
	return t.reason()
}

// Stop stops the container (SIGTERM, SIGKILL after 20 s); the volume stays.
func (d *Docker) Stop(ctx context.Context, ref string) error {
	if _, err := d.inspect(ctx, ref); err != nil {
		return err
	}
	timeout := 20
	err := d.call(ctx, "stop container", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(timeout+10)*time.Second)
		defer cancel()
		_, err := d.cli.ContainerStop(ctx, ref, dockerclient.ContainerStopOptions{Timeout: &timeout})
		return err
	})
	if cerrdefs.IsNotFound(err) {
		return ErrGone
	}
	return err
}

// Destroy removes the container, its volume and its token file. Destroying
// a gone machine is fine; a container deleted behind the worker's back
// still has its volume and token removed.
func (d *Docker) Destroy(ctx context.Context, ref string) error {
	if !containerID.MatchString(ref) {
		return nil
	}
	machine := ""
	c, err := d.inspect(ctx, ref)
	switch {
	case err == nil:
		machine = c.Config.Labels[LabelMachine]
		if err := d.call(ctx, "remove container", func(ctx context.Context) error {
			_, err := d.cli.ContainerRemove(ctx, ref, dockerclient.ContainerRemoveOptions{Force: true})
			return err
		}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	case errors.Is(err, ErrGone):
		machine = d.machineOf(ref)
	default:
		return err
	}
	if machine == "" {
		return nil
	}
	if err := d.call(ctx, "remove volume", func(ctx context.Context) error {
		_, err := d.cli.VolumeRemove(ctx, volumeName(machine), dockerclient.VolumeRemoveOptions{Force: true})
		return err
	}); err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.RemoveAll(d.tokenDir(machine)); err != nil {
		return fmt.Errorf("docker provider: %w", err)
	}
	d.log.Info().Str("ref", shortID(ref)).Str("machine", machine).Msg("destroyed")
	return nil
}

// machineOf finds the machine a container id belonged to from the token
// directories ("" when none recorded it).
func (d *Docker) machineOf(ref string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := os.ReadDir(filepath.Join(d.o.DataDir, "docker"))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(d.o.DataDir, "docker", e.Name(), "container"))
		if err == nil && string(b) == ref {
			return e.Name()
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue
		}
	}
	return ""
}

// Listed is one machine a provider holds, for reconciling with the store.
type Listed struct {
	Ref        string `json:"ref"`
	ComputerID string `json:"computerId"`
	// Running: the machine runs now (local: this worker's child; docker: the
	// container's state).
	Running bool `json:"running"`
}

// List returns every container labelled as ours, running or not.
func (d *Docker) List(ctx context.Context) ([]Listed, error) {
	var items []container.Summary
	err := d.call(ctx, "list containers", func(ctx context.Context) error {
		r, err := d.cli.ContainerList(ctx, dockerclient.ContainerListOptions{
			All: true, Filters: dockerclient.Filters{}.Add("label", LabelComputer),
		})
		items = r.Items
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(items))
	for _, c := range items {
		out = append(out, Listed{Ref: c.ID, ComputerID: c.Labels[LabelComputer], Running: c.State == container.StateRunning})
	}
	return out, nil
}

package providers

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dockerclient "github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
)

// testImage is the computer image the docker tests run (WORKER_IMAGE).
func testImage() string {
	if v := os.Getenv("WORKER_IMAGE"); v != "" {
		return v
	}
	return DefaultImage
}

// testEngine is a docker provider on the real engine; without one it skips
// (fails under CI=true).
func testEngine(t *testing.T) *Docker {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (the token files are root-only)")
	}
	d, err := NewDocker(DockerOptions{Image: testImage(), DataDir: filepath.Join(tmpRoot, "docker-data"), ReadyTimeout: 4 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	if err := d.Ping(testCtx(t, 30*time.Second)); err != nil {
		unavailable(t, "no Docker engine answers: %v", err)
	}
	return d
}

// testDocker is testEngine with the computer image present.
func testDocker(t *testing.T) *Docker {
	t.Helper()
	d := testEngine(t)
	if _, err := d.cli.ImageInspect(testCtx(t, 30*time.Second), d.o.Image); err != nil {
		unavailable(t, "image %s missing (make image): %v", d.o.Image, err)
	}
	return d
}

func TestConformanceDocker(t *testing.T) {
	d := testDocker(t)
	var remains dockerRemains
	conform(t, backend{
		kind: KindDocker, p: d, multiScreen: true,
		reopen: func(t *testing.T) Provider {
			// A restarted worker: a new engine client over the same DATA_DIR.
			d2, err := NewDocker(d.o)
			require.NoError(t, err)
			t.Cleanup(func() { d2.Close() })
			return d2
		},
		beforeDestroy: func(t *testing.T, ref string) { remains = dockerMachineRemains(t, d, ref) },
		gone:          func(t *testing.T, ref string) { requireDockerGone(t, d, remains) },
	})
}

// dockerRemains is what a docker machine has on the host besides its
// container: its home volume and its token directory.
type dockerRemains struct {
	ref, volume, tokenDir string
}

// dockerMachineRemains reads a live machine's volume and token directory
// from its container (before anything destroys it) and checks that they
// exist now, so that requireDockerGone's "gone" means removed.
func dockerMachineRemains(t *testing.T, d *Docker, ref string) dockerRemains {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	c, err := d.cli.ContainerInspect(ctx, ref, dockerclient.ContainerInspectOptions{})
	require.NoError(t, err)
	machine := c.Container.Config.Labels[LabelMachine]
	require.NotEmpty(t, machine, "the container names its machine")
	r := dockerRemains{ref: ref, volume: volumeName(machine), tokenDir: d.tokenDir(machine)}
	var home string
	for _, m := range c.Container.HostConfig.Mounts {
		if m.Target == "/home" {
			home = m.Source
		}
	}
	require.Equal(t, r.volume, home, "/home is on the machine's volume")
	_, err = d.cli.VolumeInspect(ctx, r.volume, dockerclient.VolumeInspectOptions{})
	require.NoError(t, err, "the machine's volume %s exists before the destroy", r.volume)
	require.DirExists(t, r.tokenDir)
	return r
}

// requireDockerGone: no container, no volume, no token directory of the
// machine r was read from.
func requireDockerGone(t *testing.T, d *Docker, r dockerRemains) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	_, err := d.cli.ContainerInspect(ctx, r.ref, dockerclient.ContainerInspectOptions{})
	require.True(t, cerrdefs.IsNotFound(err), "container must be removed: %v", err)
	_, err = d.cli.VolumeInspect(ctx, r.volume, dockerclient.VolumeInspectOptions{})
	require.True(t, cerrdefs.IsNotFound(err), "the destroyed machine's volume %s is left (%v)", r.volume, err)
	_, err = os.Stat(r.tokenDir)
	require.True(t, errors.Is(err, os.ErrNotExist), "the token directory %s must be removed (%v)", r.tokenDir, err)
}

// The shape of a docker machine: ports on 127.0.0.1 only, the token
// a read-only root-only file (never in the environment), /home on a volume,
// the label marking it ours, no Docker health check; List reconciles it.
func TestDockerMachineShapeAndList(t *testing.T) {
	d := testDocker(t)
	ctx := testCtx(t, 2*time.Minute)
	spec := Spec{ComputerID: "shape", BotdToken: testToken()}
	ref, err := d.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Destroy(context.Background(), ref) })

	c, err := d.cli.ContainerInspect(ctx, ref, dockerclient.ContainerInspectOptions{})
	require.NoError(t, err)
	cfg := c.Container
	require.Equal(t, "shape", cfg.Config.Labels[LabelComputer])
	for _, kv := range cfg.Config.Env {
		require.NotContains(t, kv, spec.BotdToken, "the token must never be in the environment")
	}
	for port, bs := range cfg.HostConfig.PortBindings {
		for _, b := range bs {
			require.Equal(t, "127.0.0.1", b.HostIP.String(), "port %s published beyond loopback", port)
		}
	}
	var home, secret bool
	for _, m := range cfg.HostConfig.Mounts {
		switch m.Target {
		case "/home":
			home = m.Type == "volume" && m.Source == volumeName(cfg.Config.Labels[LabelMachine])
		case containerTokenPath:
			secret = m.ReadOnly
			st, err := os.Stat(m.Source)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		}
	}
	require.True(t, home, "/home on the machine's named volume")
	require.True(t, secret, "the token file is mounted read-only")
	// The image's HEALTHCHECK is off: the worker checks botd itself, and
	// Docker's check is an exec every 5 s.
	require.NotNil(t, cfg.Config.Healthcheck, "the image's health check is left on")
	require.Equal(t, []string{"NONE"}, cfg.Config.Healthcheck.Test, "the image's health check is left on")

	list, err := d.List(ctx)
	require.NoError(t, err)
	require.Contains(t, list, Listed{Ref: ref, ComputerID: "shape", Running: false})
}

// A container deleted behind the worker's back is gone; destroying it
// still removes its volume and token file.
func TestDockerContainerDeletedBehindOurBack(t *testing.T) {
	d := testDocker(t)
	ctx := testCtx(t, 2*time.Minute)
	spec := Spec{ComputerID: "deleted", BotdToken: testToken()}
	ref, err := d.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Destroy(context.Background(), ref) })
	remains := dockerMachineRemains(t, d, ref)
	_, err = d.cli.ContainerRemove(ctx, ref, dockerclient.ContainerRemoveOptions{Force: true})
	require.NoError(t, err)

	_, err = d.Reconnect(ctx, ref, spec)
	require.ErrorIs(t, err, ErrGone)
	require.ErrorIs(t, d.Stop(ctx, ref), ErrGone)
	require.NoError(t, d.Destroy(ctx, ref))
	requireDockerGone(t, d, remains)
}

// botd refusing to start inside the container: the error carries its
// reason from the container's log, before the ready deadline.
func TestDockerBotdExitsWithReason(t *testing.T) {
	d := testDocker(t)
	o := d.o
	o.Env = []string{"EGRESS_MODE=bogus"}
	o.ReadyTimeout = 3 * time.Minute
	d2, err := NewDocker(o)
	require.NoError(t, err)
	defer d2.Close()
	ctx := testCtx(t, 3*time.Minute)
	spec := Spec{ComputerID: "exits", BotdToken: testToken()}
	ref, err := d2.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d2.Destroy(context.Background(), ref) })
	start := time.Now()
	_, err = d2.Reconnect(ctx, ref, spec)
	require.ErrorContains(t, err, "EGRESS_MODE: want direct or tunnel")
	require.NotContains(t, err.Error(), spec.BotdToken)
	require.Less(t, time.Since(start), 2*time.Minute)
	remains := dockerMachineRemains(t, d2, ref)
	require.NoError(t, d2.Destroy(ctx, ref))
	requireDockerGone(t, d2, remains)
}

// The seed's acceptance pattern on Docker: a machine's container is deleted
// behind the worker's back; Ensure through the stale ref boots a
// replacement and restores the last checkpoint (the old machine's export)
// into it before first use.
func TestDockerReplacementRestoresCheckpoint(t *testing.T) {
	d := testDocker(t)
	ctx := testCtx(t, 5*time.Minute)
	reg := Registry{KindDocker: d}
	spec := Spec{ComputerID: "replace", BotdToken: testToken()}
	first, err := Ensure(ctx, reg, KindDocker, "", "", spec, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Destroy(context.Background(), first.Ref) })
	require.NoError(t, first.Machine.WriteFile(ctx, "model-made.txt", []byte("made before the loss")))
	checkpoint := exportTar(t, ctx, first.Machine)

	_, err = d.cli.ContainerRemove(ctx, first.Ref, dockerclient.ContainerRemoveOptions{Force: true})
	require.NoError(t, err)
	second, err := Ensure(ctx, reg, KindDocker, KindDocker, first.Ref, spec, func(ctx context.Context, m Machine) error {
		return importTar(ctx, m, checkpoint)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Destroy(context.Background(), second.Ref) })
	require.True(t, second.Replaced)
	require.NotEqual(t, first.Ref, second.Ref)
	got, err := second.Machine.ReadFile(ctx, "model-made.txt", 100)
	require.NoError(t, err)
	require.Equal(t, "made before the loss", string(got))
	require.NoError(t, d.Destroy(ctx, first.Ref), "the lost machine's volume and token are cleaned up")
}

func TestDockerImageMissing(t *testing.T) {
	d := testEngine(t)
	d2, err := NewDocker(DockerOptions{Image: "open-bot/computer:no-such-tag", DataDir: d.o.DataDir})
	require.NoError(t, err)
	defer d2.Close()
	_, err = d2.Provision(testCtx(t, time.Minute), Spec{ComputerID: "noimage", BotdToken: testToken()})
	require.ErrorContains(t, err, "image open-bot/computer:no-such-tag is missing: build it with `make image`")
}

// An engine that is not there, and one that accepts and never answers:
// both are errors that say so, within the call deadline.
func TestDockerEngineDownOrSlow(t *testing.T) {
	dir := t.TempDir()
	down, err := NewDocker(DockerOptions{Host: "unix://" + filepath.Join(dir, "none.sock"), DataDir: dir})
	require.NoError(t, err)
	defer down.Close()
	ctx := testCtx(t, time.Minute)
	_, err = down.Provision(ctx, Spec{ComputerID: "down", BotdToken: testToken()})
	require.ErrorContains(t, err, "no Docker engine answers at unix://")

	sock := filepath.Join(dir, "slow.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, never answer
		}
	}()
	slow, err := NewDocker(DockerOptions{Host: "unix://" + sock, DataDir: dir, CallTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	defer slow.Close()
	start := time.Now()
	_, err = slow.Provision(ctx, Spec{ComputerID: "slow", BotdToken: testToken()})
	require.ErrorContains(t, err, "did not answer within 500ms")
	require.Less(t, time.Since(start), 30*time.Second)
	_, err = slow.Reconnect(ctx, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Spec{})
	require.ErrorContains(t, err, "did not answer within 500ms")
	require.NotErrorIs(t, err, ErrGone, "a slow engine is no reason to replace a machine")
}

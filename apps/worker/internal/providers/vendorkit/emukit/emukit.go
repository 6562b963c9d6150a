// Package emukit is what the vendor emulators (e2b, daytona and box under
// internal/providers/*/emulator) share: a sandbox as a container on the
// local Docker engine (its ports reached at its address on the engine's
// bridge: nothing published), the URL
// clients reach the emulator at, JSON answers, ids and secret comparison.
// Each emulator keeps its own API, states and answers (the vendor's).
package emukit

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	dockerclient "github.com/moby/moby/client"
)

// KeepAlive is the entrypoint of a sandbox whose image's own is not used:
// it idles until the container is stopped.
const KeepAlive = `trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done`

// DefaultPorts: botd's API (7000), 8080, and the viewer ports 6080–6099.
func DefaultPorts() []int {
	ports := []int{7000, 8080}
	for p := 6080; p <= 6099; p++ {
		ports = append(ports, p)
	}
	return ports
}

// Container is one sandbox's container.
type Container struct {
	Name     string // the container's name ("e2b-emu-<id>")
	Image    string
	Hostname string
	Env      []string
	// Label and ID: the label (Label=ID) that marks it as the sandbox's.
	Label, ID string
	// Ports are the sandbox's ports the emulator reaches, at the
	// container's address on the engine's bridge network. None is
	// published: the engine runs a docker-proxy and a set of iptables
	// commands for each published port, at every start and stop, and
	// with the 22 default ports that came to about 16,000 iptables runs
	// in one `make test` (rehearsal 36; 2 % of its CPU samples).
	Ports []int
	// ImageEntrypoint keeps the image's entrypoint; otherwise KeepAlive.
	ImageEntrypoint bool
}

// Create creates and starts c; on a failed start the container is removed.
// It returns the container's id and where its ports are reached
// (container port → "containerIP:port").
func Create(ctx context.Context, d *dockerclient.Client, c Container) (string, map[int]string, error) {
	exposed := network.PortSet{}
	for _, port := range c.Ports {
		exposed[network.MustParsePort(strconv.Itoa(port)+"/tcp")] = struct{}{}
	}
	opts := dockerclient.ContainerCreateOptions{
		Name: c.Name,
		Config: &container.Config{
			Image: c.Image, Env: c.Env, ExposedPorts: exposed, Hostname: c.Hostname,
			Labels: map[string]string{c.Label: c.ID},
			// A vendor's sandbox has no Docker health check, and the
			// computer image's (an exec every 5 s) would only cost CPU.
			Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
		},
		HostConfig: &container.HostConfig{
			Tmpfs:   map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777", "/tmp/.X11-unix": "rw,nosuid,nodev,mode=1777"},
			ShmSize: 1 << 30,
		},
	}
	if !c.ImageEntrypoint {
		opts.Config.Entrypoint = []string{"/bin/sh", "-c", KeepAlive}
		opts.Config.Cmd = []string{}
	}
	r, err := d.ContainerCreate(ctx, opts)
	if err != nil {
		return "", nil, err
	}
	ports, err := Start(ctx, d, r.ID)
	if err != nil {
		_ = Remove(context.WithoutCancel(ctx), d, r.ID)
		return "", nil, err
	}
	return r.ID, ports, nil
}

// Start starts container id (again) and returns where its ports are
// reached: its address on the engine's bridge, which a restart may change.
func Start(ctx context.Context, d *dockerclient.Client, id string) (map[int]string, error) {
	if _, err := d.ContainerStart(ctx, id, dockerclient.ContainerStartOptions{}); err != nil {
		return nil, err
	}
	c, err := d.ContainerInspect(ctx, id, dockerclient.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	var ip netip.Addr
	if ns := c.Container.NetworkSettings; ns != nil {
		if ep := ns.Networks["bridge"]; ep != nil && ep.IPAddress.IsValid() {
			ip = ep.IPAddress
		}
		for _, ep := range ns.Networks {
			if !ip.IsValid() && ep != nil && ep.IPAddress.IsValid() {
				ip = ep.IPAddress
			}
		}
	}
	if !ip.IsValid() {
		return nil, fmt.Errorf("container %s has no address on a network of the engine", id)
	}
	ports := map[int]string{}
	if c.Container.Config != nil {
		for p := range c.Container.Config.ExposedPorts {
			ports[int(p.Num())] = netip.AddrPortFrom(ip, p.Num()).String()
		}
	}
	return ports, nil
}

// Remove removes container id and its volumes; one already gone is not an
// error.
func Remove(ctx context.Context, d *dockerclient.Client, id string) error {
	_, err := d.ContainerRemove(ctx, id, dockerclient.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && strings.Contains(err.Error(), "No such container") {
		return nil
	}
	return err
}

// RemoveAll removes every container of ids.
func RemoveAll(ctx context.Context, d *dockerclient.Client, ids []string) error {
	var errs []error
	for _, id := range ids {
		if err := Remove(ctx, d, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Base is the URL clients reach the emulator at: set, or else made from a
// request's Host.
type Base struct {
	mu  sync.Mutex
	url string
}

// Set sets the URL (a trailing slash dropped).
func (b *Base) Set(u string) {
	b.mu.Lock()
	b.url = strings.TrimRight(u, "/")
	b.mu.Unlock()
}

// For is the URL as a client that sent r reaches the emulator.
func (b *Base) For(r *http.Request) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.url != "" {
		return b.url
	}
	return "http://" + r.Host
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// RandomHex is n hex digits from crypto/rand.
func RandomHex(n int) string {
	buf := make([]byte, n/2)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)
}

// EqualSecret compares a presented secret with the expected one in constant
// time; an empty expected secret matches nothing.
func EqualSecret(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Package emukit is what the vendor emulators (e2b, daytona and box under
// internal/providers/*/emulator) share: a sandbox as a container on the
// local Docker engine (its ports published on 127.0.0.1 only), the URL
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
	// Ports are published on 127.0.0.1 (the engine picks the host port).
	Ports []int
	// ImageEntrypoint keeps the image's entrypoint; otherwise KeepAlive.
	ImageEntrypoint bool
}

// Create creates and starts c; on a failed start the container is removed.
// It returns the container's id and its published ports (container port →
// "127.0.0.1:hostport").
func Create(ctx context.Context, d *dockerclient.Client, c Container) (string, map[int]string, error) {
	loopback := netip.MustParseAddr("127.0.0.1")
	exposed := network.PortSet{}
	bindings := network.PortMap{}
	for _, port := range c.Ports {
		p := network.MustParsePort(strconv.Itoa(port) + "/tcp")
		exposed[p] = struct{}{}
		bindings[p] = []network.PortBinding{{HostIP: loopback, HostPort: ""}}
	}
	opts := dockerclient.ContainerCreateOptions{
		Name: c.Name,
		Config: &container.Config{
			Image: c.Image, Env: c.Env, ExposedPorts: exposed, Hostname: c.Hostname,
			Labels: map[string]string{c.Label: c.ID},
		},
		HostConfig: &container.HostConfig{
			PortBindings: bindings,
			Tmpfs:        map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777", "/tmp/.X11-unix": "rw,nosuid,nodev,mode=1777"},
			ShmSize:      1 << 30,
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

// Start starts container id (again) and returns its published ports, which
// a restart may change.
func Start(ctx context.Context, d *dockerclient.Client, id string) (map[int]string, error) {
	if _, err := d.ContainerStart(ctx, id, dockerclient.ContainerStartOptions{}); err != nil {
		return nil, err
	}
	c, err := d.ContainerInspect(ctx, id, dockerclient.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	ports := map[int]string{}
	if c.Container.NetworkSettings != nil {
		for p, bs := range c.Container.NetworkSettings.Ports {
			for _, hb := range bs {
				if hb.HostIP.IsLoopback() && hb.HostPort != "" {
					ports[int(p.Num())] = "127.0.0.1:" + hb.HostPort
				}
			}
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

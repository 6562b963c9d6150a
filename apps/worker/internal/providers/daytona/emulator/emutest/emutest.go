// Package emutest starts the Daytona emulator for tests: on 127.0.0.1, on
// the real Docker engine, with every exchange through a spec.Checker.
package emutest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/spec"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit/proxytest"
)

// Server is a running emulator.
type Server struct {
	// URL is the emulator's address: DAYTONA_API_URL.
	URL string
	// APIKey is the key it accepts (DAYTONA_API_KEY).
	APIKey   string
	Emulator *emulator.Emulator
	Docker   *dockerclient.Client
	// Checker holds every exchange of Client to the vendor's spec; a
	// violation fails the test.
	Checker *spec.Checker
	// ProxyURL is the address of the Checker's proxy in front of the
	// emulator, set by Proxy: what a test hands a worker.
	ProxyURL string

	violations atomic.Int64
}

// Image is the computer image (WORKER_IMAGE, default open-bot/computer:dev).
func Image() string {
	if v := os.Getenv("WORKER_IMAGE"); v != "" {
		return v
	}
	return "open-bot/computer:dev"
}

// DesktopImage is the stand-in for a desktop snapshot (E2B_DESKTOP_IMAGE,
// default open-bot/e2b-desktop:dev: Xvfb :0 and XFCE from its entrypoint).
func DesktopImage() string {
	if v := os.Getenv("E2B_DESKTOP_IMAGE"); v != "" {
		return v
	}
	return "open-bot/e2b-desktop:dev"
}

// Unavailable skips, or fails under CI=true.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but integration prerequisite missing: "+format, args...)
	}
	t.Skipf("integration prerequisite missing: "+format, args...)
}

// DefaultSnapshots maps open-bot to the computer image (root is the
// sandbox's user there).
func DefaultSnapshots() map[string]emulator.Snapshot {
	return map[string]emulator.Snapshot{"open-bot": {Image: Image(), User: "root"}}
}

// DesktopSnapshot is a desktop snapshot: the stand-in image run as its own
// keeper, as user `user`.
func DesktopSnapshot() emulator.Snapshot {
	return emulator.Snapshot{Image: DesktopImage(), User: "user", ImageEntrypoint: true}
}

// Options are Start's knobs.
type Options struct {
	Snapshots map[string]emulator.Snapshot
	Ports     []int
	// Minute shortens the emulator's minute (auto-stop tests).
	Minute time.Duration
}

// Start starts an emulator and removes its sandboxes when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		Unavailable(t, "docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, dockerclient.PingOptions{NegotiateAPIVersion: true}); err != nil {
		Unavailable(t, "no Docker engine answers (bash scripts/docker-engine.sh start): %v", err)
	}
	if o.Snapshots == nil {
		o.Snapshots = DefaultSnapshots()
	}
	for _, s := range o.Snapshots {
		if _, err := cli.ImageInspect(ctx, s.Image); err != nil {
			Unavailable(t, "image %s missing (make image): %v", s.Image, err)
		}
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := "dtn_" + hex.EncodeToString(buf)
	emu, err := emulator.New(emulator.Config{APIKey: key, Snapshots: o.Snapshots, Ports: o.Ports, Docker: cli, Minute: o.Minute, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	emu.SetBase(srv.URL)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := emu.Close(ctx); err != nil {
			t.Errorf("emulator: removing sandboxes: %v", err)
		}
	})
	s := &Server{URL: srv.URL, APIKey: key, Emulator: emu, Docker: cli}
	s.Checker, err = spec.NewChecker(http.DefaultTransport, func(err error) {
		s.violations.Add(1)
		t.Errorf("SPEC VIOLATION: %v", err)
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Client is an HTTP client whose every exchange the Checker validates.
func (s *Server) Client() *http.Client { return &http.Client{Transport: s.Checker} }

// Proxy puts the Checker between a worker and the emulator: a reverse proxy
// on 127.0.0.1 whose every exchange the Checker holds to the vendor's spec.
// It sets ProxyURL (what the test hands the worker as DAYTONA_API_URL) and
// returns it. The URLs the emulator hands out (the toolbox proxy's and
// previews') point at the proxy too. When the test ends (after the cleanups
// registered later, the worker's among them) it logs the exchanges checked
// per kind and fails the test if the Checker reported a violation or no api
// exchange went through it.
func (s *Server) Proxy(t testing.TB) string {
	t.Helper()
	s.ProxyURL = proxytest.Serve(t, "daytona", s.URL, s.Checker, s.violations.Load, "api")
	// The URLs it hands out go through the proxy too.
	s.Emulator.SetBase(s.ProxyURL)
	return s.ProxyURL
}

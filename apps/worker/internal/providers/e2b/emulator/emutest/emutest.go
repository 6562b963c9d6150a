// Package emutest starts the E2B emulator for tests: on 127.0.0.1, on the
// real Docker engine, with every exchange through a spec.Checker.
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

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/spec"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit/proxytest"
)

// Server is a running emulator.
type Server struct {
	// URL is the emulator's address: E2B_API_URL and E2B_SANDBOX_URL.
	URL string
	// APIKey is the key it accepts (E2B_API_KEY).
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

// Unavailable skips, or fails under CI=true.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but integration prerequisite missing: "+format, args...)
	}
	t.Skipf("integration prerequisite missing: "+format, args...)
}

// DefaultTemplates maps open-bot and base to the computer image (root is
// envd's default user there).
func DefaultTemplates() map[string]emulator.Template {
	return map[string]emulator.Template{
		"open-bot": {Image: Image(), User: "root"},
		"base":     {Image: Image(), User: "root"},
	}
}

// DesktopImage is the stand-in for E2B's stock desktop template
// (E2B_DESKTOP_IMAGE, default open-bot/e2b-desktop:dev, `make image`).
func DesktopImage() string {
	if v := os.Getenv("E2B_DESKTOP_IMAGE"); v != "" {
		return v
	}
	return "open-bot/e2b-desktop:dev"
}

// DesktopTemplate is the `desktop` template: the stand-in image, run as
// its own keeper, with `user` as envd's default user (as E2B's).
func DesktopTemplate() emulator.Template {
	return emulator.Template{Image: DesktopImage(), User: "user", ImageEntrypoint: true}
}

// Start starts an emulator (templates nil: DefaultTemplates) and removes
// its sandboxes when the test ends.
func Start(t testing.TB, templates map[string]emulator.Template, ports []int) *Server {
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
	if templates == nil {
		templates = DefaultTemplates()
	}
	for _, tpl := range templates {
		if _, err := cli.ImageInspect(ctx, tpl.Image); err != nil {
			Unavailable(t, "image %s missing (make image): %v", tpl.Image, err)
		}
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := "e2b_" + hex.EncodeToString(buf)
	emu, err := emulator.New(emulator.Config{APIKey: key, Templates: templates, Ports: ports, Docker: cli, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
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
// It sets ProxyURL (what the test hands the worker as E2B_API_URL and
// E2B_SANDBOX_URL) and returns it. When the test ends (after the cleanups
// registered later, the worker's among them) it logs the exchanges checked
// per kind and fails the test if the Checker reported a violation or no
// control-plane exchange went through it.
func (s *Server) Proxy(t testing.TB) string {
	t.Helper()
	s.ProxyURL = proxytest.Serve(t, "e2b", s.URL, s.Checker, s.violations.Load, "control-plane")
	return s.ProxyURL
}

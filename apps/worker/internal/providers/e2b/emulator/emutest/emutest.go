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
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/spec"
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
	checker, err := spec.NewChecker(http.DefaultTransport, func(err error) {
		t.Errorf("SPEC VIOLATION: %v", err)
	})
	if err != nil {
		t.Fatal(err)
	}
	return &Server{URL: srv.URL, APIKey: key, Emulator: emu, Docker: cli, Checker: checker}
}

// Client is an HTTP client whose every exchange the Checker validates.
func (s *Server) Client() *http.Client { return &http.Client{Transport: s.Checker} }

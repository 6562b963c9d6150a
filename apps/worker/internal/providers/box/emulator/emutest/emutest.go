// Package emutest starts the Box emulator for tests: on 127.0.0.1, on the
// real Docker engine, with every exchange through a spec.Checker, for an
// account that has dashboard secrets (AccountSecret: what a box made
// without noEnv would hold).
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

	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/box/spec"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit/proxytest"
)

// Server is a running emulator.
type Server struct {
	// URL is the emulator's address: BOX_API_URL.
	URL string
	// APIKey is the key it accepts (BOX_API_KEY).
	APIKey string
	// AccountSecret is the value of the account's dashboard secrets: env
	// var AccountSecretEnv, and the secret file AccountSecretFile (under
	// the box user's home, holding AccountSecretEnv=AccountSecret). A box
	// created or resumed without noEnv gets both; with noEnv, neither.
	AccountSecret string
	Emulator      *emulator.Emulator
	Docker        *dockerclient.Client
	// Checker holds every exchange of Client to box-openapi.yaml; a
	// violation fails the test.
	Checker *spec.Checker
	// ProxyURL is the address of the Checker's proxy in front of the
	// emulator, set by Proxy: what a test hands a worker.
	ProxyURL string

	violations atomic.Int64
}

// AccountSecretEnv is the name of the account's dashboard env var.
const AccountSecretEnv = "BOX_ACCOUNT_SECRET"

// AccountSecretFile is the account's dashboard secret file, relative to
// the box user's home.
const AccountSecretFile = ".config/box-account/secrets.env"

// Image is the box image (BOX_IMAGE, else E2B_DESKTOP_IMAGE, default
// open-bot/e2b-desktop:dev: the stock desktop image).
func Image() string {
	if v := os.Getenv("BOX_IMAGE"); v != "" {
		return v
	}
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

// Start starts an emulator and removes its boxes when the test ends.
func Start(t testing.TB) *Server {
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
	if _, err := cli.ImageInspect(ctx, Image()); err != nil {
		Unavailable(t, "image %s missing (scripts/build-image.sh): %v", Image(), err)
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := "box_" + hex.EncodeToString(buf)
	_, _ = rand.Read(buf)
	acct := "box-account-secret-" + hex.EncodeToString(buf)
	emu, err := emulator.New(emulator.Config{APIKey: key, Image: Image(), Docker: cli, Logf: t.Logf,
		AccountEnv:   map[string]string{AccountSecretEnv: acct},
		AccountFiles: map[string]string{AccountSecretFile: AccountSecretEnv + "=" + acct + "\n"}})
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
			t.Errorf("emulator: removing boxes: %v", err)
		}
	})
	s := &Server{URL: srv.URL, APIKey: key, AccountSecret: acct, Emulator: emu, Docker: cli}
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
// It sets ProxyURL (what the test hands the worker as BOX_API_URL) and
// returns it. The URLs the emulator hands out (a box's desktopUrl) point at
// the proxy too. When the test ends (after the cleanups registered later,
// the worker's among them) it logs the exchanges checked per kind and fails
// the test if the Checker reported a violation or no api exchange went
// through it.
func (s *Server) Proxy(t testing.TB) string {
	t.Helper()
	s.ProxyURL = proxytest.Serve(t, "box", s.URL, s.Checker, s.violations.Load, "api")
	// The URLs it hands out go through the proxy too.
	s.Emulator.SetBase(s.ProxyURL)
	return s.ProxyURL
}

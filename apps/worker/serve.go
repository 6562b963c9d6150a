package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/httpapi"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/takeover"
)

// serveConfig is the worker's configuration (flags default to the env).
type serveConfig struct {
	Listen, DataDir, DatabaseURL    string
	Provider                        string // default provider kind
	Model, ModelProvider, Approvals string
	Token                           string
	// TokenFile is where the token came from (shown to people, never the token).
	TokenFile string
}

func envOr(k, def string) string {
	if v := strings.TrimSpace(os.Getenv(k)); v != "" {
		return v
	}
	return def
}

// secretEnv reads a secret from the env var name, or from the file named by
// name_FILE; it is never printed.
func secretEnv(name string) (val, file string, err error) {
	if v := os.Getenv(name); v != "" {
		return v, "", nil
	}
	if f := os.Getenv(name + "_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", "", fmt.Errorf("%s_FILE: %w", name, err)
		}
		return strings.TrimSpace(string(b)), f, nil
	}
	return "", "", nil
}

func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".open-bot", "worker")
	}
	return "/var/lib/open-bot/worker"
}

// workerToken returns WORKER_TOKEN(_FILE), or the token in
// DATA_DIR/worker-token, made (0600) on first start.
func workerToken(dataDir string) (tok, file string, err error) {
	if tok, file, err = secretEnv("WORKER_TOKEN"); err != nil || tok != "" {
		return tok, file, err
	}
	file = filepath.Join(dataDir, "worker-token")
	if b, err := os.ReadFile(file); err == nil {
		return strings.TrimSpace(string(b)), file, nil
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok = hex.EncodeToString(b[:])
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		return "", "", err
	}
	return tok, file, nil
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c serveConfig
	fs.StringVar(&c.Listen, "listen", envOr("WORKER_LISTEN", "127.0.0.1:7100"), "API listen address (WORKER_LISTEN)")
	fs.StringVar(&c.DataDir, "data-dir", envOr("DATA_DIR", defaultDataDir()), "state directory: worker.db, secret.key, worker-token (DATA_DIR)")
	fs.StringVar(&c.Provider, "provider", envOr("WORKER_PROVIDER", providers.KindAttach), "default provider kind for new computers (WORKER_PROVIDER)")
	fs.StringVar(&c.Model, "model", envOr("WORKER_MODEL", "gpt-6.1-sol"), "default model (WORKER_MODEL)")
	fs.StringVar(&c.ModelProvider, "model-provider", envOr("WORKER_MODEL_PROVIDER", ""), "Codex model provider id (WORKER_MODEL_PROVIDER)")
	fs.StringVar(&c.Approvals, "approvals", envOr("WORKER_APPROVALS", "decline"), "answer to Codex approval requests: decline|accept (WORKER_APPROVALS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.DatabaseURL = os.Getenv("WORKER_DATABASE_URL")
	var err error
	if c.Token, c.TokenFile, err = workerToken(c.DataDir); err != nil {
		return err
	}
	if len(c.Token) < 16 {
		return errors.New("WORKER_TOKEN (or WORKER_TOKEN_FILE) must be at least 16 characters")
	}
	if c.Approvals != "decline" && c.Approvals != "accept" {
		return fmt.Errorf("approvals: want decline or accept, got %q", c.Approvals)
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("component", "worker").Logger()
	w, err := newWorker(ctx, c, log)
	if err != nil {
		return err
	}
	defer w.Close()
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: w.Handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	where := "from WORKER_TOKEN"
	if c.TokenFile != "" {
		where = "in " + c.TokenFile
	}
	fmt.Fprintf(os.Stderr, "worker: serving http://%s (store: %s; bearer token %s)\n", ln.Addr(), w.Store.Engine(), where)
	base := "http://" + ln.Addr().String()
	w.People.Takeover.SetBase(base)
	// The sign-in link is a secret for the person at this terminal: printed
	// here, never logged.
	if link, err := w.People.LoginLink(base); err == nil {
		fmt.Fprintf(os.Stderr, "worker: dashboard (one-time sign-in link, valid 10 minutes): %s\n", link)
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// registry is every provider kind this worker can use, by kind. New kinds
// (local, docker, single-screen) register here.
func registry(c serveConfig) map[string]providers.Provider {
	return map[string]providers.Provider{
		providers.KindAttach: providers.NewAttach(),
	}
}

// worker is the wired control plane.
type worker struct {
	Store     store.Store
	Computers *computers.Service
	Runs      *runs.Manager
	Handler   http.Handler
	// People serves takeover links, the dashboard and botd's events.
	People *people
	// stop ends the background reconcile/sweep loop.
	stop context.CancelFunc
}

// Close stops the background loop and closes the store.
func (w *worker) Close() error {
	w.stop()
	return w.Store.Close()
}

// newWorker wires the control plane in one place: store, secrets,
// providers, computers (reconciled), runs (recovered), API.
func newWorker(ctx context.Context, c serveConfig, log zerolog.Logger) (*worker, error) {
	reg := registry(c)
	if _, ok := reg[c.Provider]; !ok {
		var known []string
		for k := range reg {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("WORKER_PROVIDER=%q: unknown provider kind (this worker has: %s)", c.Provider, strings.Join(known, ", "))
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, err
	}
	var st store.Store
	var err error
	if c.DatabaseURL != "" {
		st, err = store.OpenPostgres(ctx, c.DatabaseURL)
	} else {
		st, err = store.OpenSQLite(ctx, filepath.Join(c.DataDir, "worker.db"))
	}
	if err != nil {
		return nil, err
	}
	sealer, err := secret.LoadOrCreate(filepath.Join(c.DataDir, "secret.key"))
	if err != nil {
		st.Close()
		return nil, err
	}
	comps, err := computers.New(computers.Options{Store: st, Providers: reg, DefaultProvider: c.Provider, Sealer: sealer,
		Caps: capability.NewSet(), Log: log.With().Str("sub", "computers").Logger()})
	if err != nil {
		st.Close()
		return nil, err
	}
	tk := takeover.New(takeover.Options{Computers: comps, Store: st, Log: log.With().Str("sub", "takeover").Logger()})
	m := runs.NewManager(runs.Options{Store: st, Computers: comps, Model: c.Model, ModelProvider: c.ModelProvider,
		Approvals: runs.ApprovalPolicy(c.Approvals), Log: log.With().Str("sub", "runs").Logger(), TakeoverLink: tk.ForRun, TakeoverDone: tk.Done})
	tk.SetRuns(m)
	// Runs first: none a previous worker left may stay running; then
	// machines are reconnected (in the background: a slow provider must not
	// hold the API back).
	if err := m.Recover(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("recover runs: %w", err)
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		if err := comps.Reconcile(bg); err != nil {
			log.Warn().Err(err).Msg("reconcile computers")
		}
		comps.Watch(bg, 30*time.Second)
	}()
	ppl, err := newPeople(st, comps, m, tk, log)
	if err != nil {
		stop()
		st.Close()
		return nil, err
	}
	go ppl.Events.run(bg)
	h := httpapi.Handler(httpapi.Options{Token: c.Token, Computers: comps, Runs: m, Log: log.With().Str("sub", "api").Logger(),
		Mount: func(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc) {
			httpapi.MountTakeover(mux, gate, tk)
			ppl.mountLogin(mux)
		}})
	return &worker{Store: st, Computers: comps, Runs: m, Handler: ppl.handler(h), People: ppl, stop: stop}, nil
}

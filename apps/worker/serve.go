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
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/worker/internal/agentlease"
	"github.com/open-bot/computer/apps/worker/internal/capability"
	cdpsession "github.com/open-bot/computer/apps/worker/internal/cdp"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/group"
	"github.com/open-bot/computer/apps/worker/internal/homes"
	"github.com/open-bot/computer/apps/worker/internal/httpapi"
	"github.com/open-bot/computer/apps/worker/internal/mcp"
	"github.com/open-bot/computer/apps/worker/internal/metrics"
	"github.com/open-bot/computer/apps/worker/internal/osworld"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/takeover"
	"github.com/open-bot/computer/apps/worker/internal/tracing"
)

// serveConfig is the worker's configuration (flags default to the env).
type serveConfig struct {
	Listen, DataDir, DatabaseURL    string
	Provider                        string // default provider kind
	Model, ModelProvider, Approvals string
	// AskFor is Codex's approval policy for the worker's threads
	// (WORKER_APPROVAL_POLICY): when Codex asks; Approvals answers.
	AskFor string
	Token  string
	// OperatorToken is WORKER_OPERATOR_TOKEN(_FILE): the operator's bearer
	// token over TCP ("": only the operator socket).
	OperatorToken string
	// TokenFile is where the token came from (shown to people, never the token).
	TokenFile string
	// MachinesDir holds the local provider's computers and docker's token
	// files (WORKER_MACHINES_DIR); "" picks providers.DefaultMachinesDir.
	MachinesDir string
	// IdleAfter suspends computers nobody used for this long (0: never).
	IdleAfter time.Duration
	// Getenv reads the providers' and home store's env (nil: os.Getenv).
	Getenv func(string) string
	// GroupToken (WORKER_GROUP_TOKEN(_FILE)) makes this worker a member of
	// the worker group on DatabaseURL; GroupListen is the group listener's
	// address (WORKER_GROUP_LISTEN) and GroupAddr the URL peers reach it
	// at (WORKER_GROUP_ADDR, default http://GroupListen).
	GroupToken, GroupListen, GroupAddr string
	// GroupTTL is the ownership lease's lifetime (WORKER_GROUP_LEASE; 0:
	// group.DefaultTTL).
	GroupTTL time.Duration
}

// groupConfig reads the worker group's settings into c: none without
// WORKER_GROUP_TOKEN(_FILE).
func groupConfig(c *serveConfig) error {
	tok, _, err := serverSecret("WORKER_GROUP_TOKEN")
	if err != nil || tok == "" {
		return err
	}
	switch {
	case tok == c.Token || tok == c.OperatorToken:
		return errors.New("WORKER_GROUP_TOKEN must differ from WORKER_TOKEN and WORKER_OPERATOR_TOKEN")
	case c.DatabaseURL == "":
		return errors.New("a worker group shares one Postgres: set WORKER_DATABASE_URL with WORKER_GROUP_TOKEN")
	}
	c.GroupToken = tok
	c.GroupListen = envOr("WORKER_GROUP_LISTEN", "")
	if c.GroupListen == "" {
		return errors.New("WORKER_GROUP_LISTEN: the address this worker's peers relay to (host:port, reachable by the group only)")
	}
	c.GroupAddr = envOr("WORKER_GROUP_ADDR", "http://"+c.GroupListen)
	if v := os.Getenv("WORKER_GROUP_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 5*time.Minute {
			return fmt.Errorf("WORKER_GROUP_LEASE: want a duration from 1s to 5m, got %q", v)
		}
		c.GroupTTL = d
	}
	return nil
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

// checkSecretFile refuses a token file (named by env var name) that is not
// a regular file owned by the worker's user with mode 0600 or stricter,
// saying how to fix it.
func checkSecretFile(name, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	uid := os.Geteuid()
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s %s is not a regular file", name, path)
	case sys == nil || int(sys.Uid) != uid:
		owner := -1
		if sys != nil {
			owner = int(sys.Uid)
		}
		return fmt.Errorf("%s %s is owned by uid %d, not by the worker's user (uid %d): a token file must be the worker's own, mode 0600; fix: chown %d %s && chmod 600 %s",
			name, path, owner, uid, uid, path, path)
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s %s is mode %04o: a token file must be mode 0600 (or stricter), readable by the worker's user only; fix: chmod 600 %s",
			name, path, st.Mode().Perm(), path)
	}
	return nil
}

// serverSecret reads the worker's own secret name from the env, or from the
// file named by name_FILE, which checkSecretFile must accept.
func serverSecret(name string) (val, file string, err error) {
	if v := os.Getenv(name); v != "" {
		return v, "", nil
	}
	f := os.Getenv(name + "_FILE")
	if f == "" {
		return "", "", nil
	}
	if err := checkSecretFile(name+"_FILE", f); err != nil {
		return "", "", err
	}
	return secretEnv(name)
}

// operatorToken returns WORKER_OPERATOR_TOKEN(_FILE), or "" when neither is
// set (then the operator socket is the only operator credential).
func operatorToken(workerToken string) (string, error) {
	tok, _, err := serverSecret("WORKER_OPERATOR_TOKEN")
	switch {
	case err != nil:
		return "", err
	case tok == "":
		return "", nil
	case len(tok) < 16:
		return "", errors.New("WORKER_OPERATOR_TOKEN (or WORKER_OPERATOR_TOKEN_FILE) must be at least 16 characters")
	case tok == workerToken:
		return "", errors.New("WORKER_OPERATOR_TOKEN must differ from WORKER_TOKEN: the callers' token never acts as the operator")
	}
	return tok, nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".open-bot", "worker")
	}
	return "/var/lib/open-bot/worker"
}

// workerToken returns WORKER_TOKEN(_FILE) (the file must be the worker's
// own, mode 0600), or the token in DATA_DIR/worker-token, made (0600) on
// first start.
func workerToken(dataDir string) (tok, file string, err error) {
	if tok, file, err = serverSecret("WORKER_TOKEN"); err != nil || tok != "" {
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
	fs.StringVar(&c.DataDir, "data-dir", envOr("DATA_DIR", defaultDataDir()), "state directory: worker.db, secret.key, worker-token, operator.sock (DATA_DIR)")
	fs.StringVar(&c.Provider, "provider", envOr("WORKER_PROVIDER", ""), "default provider kind for new computers: local, docker, single-screen or attach; empty: docker where an engine answers with the image, else local (WORKER_PROVIDER)")
	fs.StringVar(&c.Model, "model", envOr("WORKER_MODEL", "gpt-6.1-sol"), "default model (WORKER_MODEL)")
	fs.StringVar(&c.ModelProvider, "model-provider", envOr("WORKER_MODEL_PROVIDER", ""), "Codex model provider id (WORKER_MODEL_PROVIDER)")
	fs.StringVar(&c.Approvals, "approvals", envOr("WORKER_APPROVALS", "decline"), "answer to Codex approval requests: decline|accept (WORKER_APPROVALS)")
	fs.StringVar(&c.AskFor, "approval-policy", envOr("WORKER_APPROVAL_POLICY", runs.AskNever), "when Codex asks the worker before running its built-in commands: never|untrusted (WORKER_APPROVAL_POLICY)")
	fs.StringVar(&c.MachinesDir, "machines-dir", envOr("WORKER_MACHINES_DIR", ""), "local computers' homes and docker token files (WORKER_MACHINES_DIR; default /var/lib/open-bot/machines as root)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.MachinesDir == "" {
		c.MachinesDir = providers.DefaultMachinesDir(c.DataDir)
	}
	idle, err := computers.IdleFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	c.IdleAfter = idle
	c.DatabaseURL = os.Getenv("WORKER_DATABASE_URL")
	if c.Token, c.TokenFile, err = workerToken(c.DataDir); err != nil {
		return err
	}
	if len(c.Token) < 16 {
		return errors.New("WORKER_TOKEN (or WORKER_TOKEN_FILE) must be at least 16 characters")
	}
	if c.OperatorToken, err = operatorToken(c.Token); err != nil {
		return err
	}
	if c.Approvals != "decline" && c.Approvals != "accept" {
		return fmt.Errorf("approvals: want decline or accept, got %q", c.Approvals)
	}
	if !runs.ValidAskFor(c.AskFor) {
		return fmt.Errorf("approval-policy: want never or untrusted, got %q", c.AskFor)
	}
	if err := groupConfig(&c); err != nil {
		return err
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
	fmt.Fprintf(os.Stderr, "worker: serving http://%s (store: %s; bearer token %s; default provider %s; homes %s)\n", ln.Addr(), w.Store.Engine(), where, w.DefaultProvider, w.Homes)
	base := "http://" + ln.Addr().String()
	w.People.Takeover.SetBase(base)
	sock := httpapi.OperatorSocket(c.DataDir)
	// A machines directory inside DATA_DIR must stay traversable by the
	// machines' users: DATA_DIR is then left as it is.
	rel, rerr := filepath.Rel(c.DataDir, c.MachinesDir)
	inside := rerr == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	stopOp, err := httpapi.ServeOperator(ctx, sock, base, inside, w.Handler, log.With().Str("sub", "operator").Logger())
	if err != nil {
		ln.Close()
		return err
	}
	defer stopOp()
	if addr := strings.TrimSpace(os.Getenv("WORKER_METRICS_LISTEN")); addr != "" {
		mln, err := serveMetrics(ctx, addr, c.OperatorToken, w.Metrics, log.With().Str("sub", "metrics").Logger())
		if err != nil {
			ln.Close()
			return err
		}
		fmt.Fprintf(os.Stderr, "worker: metrics on http://%s/metrics (operator only)\n", mln.Addr())
	}
	if w.Group != nil {
		fmt.Fprintf(os.Stderr, "worker: worker group member %s; peers relay to %s (group token from WORKER_GROUP_TOKEN)\n", w.Group.ID(), c.GroupAddr)
	}
	if w.Tracing != nil {
		// Not the URL: a collector's address may carry a credential.
		fmt.Fprintf(os.Stderr, "worker: traces on (OTLP/HTTP to OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, service %s)\n", w.Tracing.Service())
	}
	fmt.Fprintf(os.Stderr, "worker: operator socket %s (adopt, dashboard links, attach: `worker computers adopt`, `worker dashboard` as root or this user)\n", sock)
	// The sign-in link is a secret for the person at this terminal: printed
	// only when stderr is one, never into a log file.
	if isTerminal(os.Stderr) {
		if link, err := w.People.LoginLink(base); err == nil {
			fmt.Fprintf(os.Stderr, "worker: dashboard (one-time sign-in link, valid 10 minutes): %s\n", link)
		}
	} else {
		fmt.Fprintf(os.Stderr, "worker: dashboard: `worker dashboard` on this host prints a one-time sign-in link\n")
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// worker is the wired control plane.
type worker struct {
	Store     store.Store
	Computers *computers.Service
	Runs      *runs.Manager
	Handler   http.Handler
	// People serves takeover links, the dashboard and botd's events.
	People *takeover.People
	// DefaultProvider is the kind new computers get; Homes names the home store.
	DefaultProvider, Homes string
	// stop ends the background reconcile/sweep loop.
	stop  context.CancelFunc
	setup *providers.Setup
	// apiMux is the API's router, every /v1 route on it (the OpenAPI
	// test walks it).
	apiMux *http.ServeMux
	// Metrics are the worker's series (served by serveMetrics).
	Metrics *metrics.Metrics
	// Tracing sends the worker's spans (nil: off, no OTLP endpoint set).
	Tracing *tracing.Tracing
	// Group is this worker's membership of its worker group (nil: none).
	Group *group.Group
	// groupSrv serves the group listener.
	groupSrv *http.Server
}

// Close stops the background loop and closes the store.
func (w *worker) Close() error {
	w.stop()
	var errs []error
	if w.Group != nil {
		// Its leases freed first, so that peers claim its computers now.
		select {
		case <-w.Group.Done():
		case <-time.After(5 * time.Second):
		}
		errs = append(errs, w.groupSrv.Close())
	}
	// The pooled machines go first, while their providers still run.
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	w.Computers.ClosePool(pctx)
	pcancel()
	if w.setup != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, w.setup.Close(ctx))
		cancel()
	}
	errs = append(errs, w.Store.Close())
	// The spans go last: the ones ended while closing are sent too.
	tctx, tcancel := context.WithTimeout(context.Background(), 10*time.Second)
	errs = append(errs, w.Tracing.Shutdown(tctx))
	tcancel()
	return errors.Join(errs...)
}

// newWorker wires the control plane in one place: store, secrets,
// providers, computers (reconciled), runs (recovered), API.
func newWorker(ctx context.Context, c serveConfig, log zerolog.Logger) (*worker, error) {
	if err := providers.CheckKind(c.Provider); err != nil {
		return nil, err
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
	maxHome, minFree, err := homes.LimitsFromEnv(c.Getenv)
	if err != nil {
		st.Close()
		return nil, err
	}
	hs, homesName, err := homes.FromEnv(ctx, c.Getenv, c.DataDir)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("home store: %w", err)
	}
	if l, ok := hs.(*homes.Local); ok {
		l.MinFree = minFree
	}
	checkpointer := homes.NewCheckpointer(hs)
	checkpointer.MaxBytes = maxHome
	checkpointer.Recordings = c.Getenv != nil && c.Getenv("COMPUTER_HOME_RECORDINGS") == "1"
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	poolSizes, err := computers.ParsePool(getenv("WORKER_POOL"))
	if err != nil {
		st.Close()
		return nil, err
	}
	reg, def, setup, err := providers.ForWorker(ctx, providers.WorkerOptions{Provider: c.Provider, MachinesDir: c.MachinesDir, DataDir: c.DataDir, Getenv: c.Getenv, Log: log})
	if err != nil {
		st.Close()
		return nil, err
	}
	var trc *tracing.Tracing // nil (off) until FromEnv; Shutdown takes nil
	closeAll := func() {
		if setup != nil {
			setup.Close(context.Background())
		}
		st.Close()
		_ = trc.Shutdown(context.Background())
	}
	mets := metrics.New()
	trc, err = tracing.FromEnv(ctx, getenv)
	if err != nil {
		closeAll()
		return nil, err
	}
	caps, restoreKeys := capability.NewSet(), capability.NewRestoreKeys()
	// In a worker group the computers, runs and people see the store
	// through the group: computer writes carry the ownership fence.
	var grp *group.Group
	var m *runs.Manager
	var comps *computers.Service
	var owns func(string) bool
	if c.GroupToken != "" {
		grp, err = group.New(group.Options{Store: st, Addr: c.GroupAddr, Token: c.GroupToken, TTL: c.GroupTTL, Caps: caps, RestoreKeys: restoreKeys, Metrics: mets, Tracing: trc,
			Log: log.With().Str("sub", "group").Logger(),
			Gained: func(ctx context.Context, id string, epoch int64) {
				go comps.Gained(context.WithoutCancel(ctx), id)
				if err := m.RecoverComputer(context.WithoutCancel(ctx), id, store.Fence{Key: group.OwnerPrefix + id, Epoch: epoch}); err != nil {
					log.Warn().Str("computer", id).Err(err).Msg("worker group: resume the runs of a computer this worker now owns")
				}
			},
			Lost:      func(id string) { m.Abandon(id); comps.Lost(id) },
			PoolReady: func() map[string]int { return comps.MetricsSource().PoolReady() },
			PoolKind:  func(kind string) string { return comps.ProviderKind(kind) }})
		if err != nil {
			closeAll()
			return nil, err
		}
		st = grp.Store(st)
		owns = func(id string) bool { _, ok := grp.Owns(id); return ok }
	}
	comps, err = computers.New(computers.Options{Store: st, Owns: owns, Metrics: mets, Tracing: trc, Providers: reg, DefaultProvider: def, Sealer: sealer,
		Caps: caps, RestoreKeys: restoreKeys, Log: log.With().Str("sub", "computers").Logger(),
		Homes: checkpointer, IdleAfter: c.IdleAfter, LiveHomes: liveHomes(c, setup)})
	if err != nil {
		closeAll()
		return nil, err
	}
	if err := startPool(ctx, comps, poolSizes, c, setup); err != nil {
		closeAll()
		return nil, err
	}
	model, loop, err := workerModel(c.Getenv)
	if err != nil {
		comps.ClosePool(context.Background())
		closeAll()
		return nil, err
	}
	tk := takeover.New(takeover.Options{Computers: comps, Store: st, Log: log.With().Str("sub", "takeover").Logger()})
	comps.OnBotRemoved(tk.BotRemoved)
	mets.Watch(comps.MetricsSource())
	m = runs.NewManager(runs.Options{Store: st, Computers: comps, Metrics: mets, Tracing: trc, Model: c.Model, ModelProvider: c.ModelProvider,
		Approvals: runs.ApprovalPolicy(c.Approvals), AskFor: c.AskFor, Log: log.With().Str("sub", "runs").Logger(), TakeoverLink: tk.ForRun, TakeoverDone: tk.Done,
		Responses: model, Loop: loop})
	tk.SetRuns(m)
	// Runs first: none a previous worker left may stay running; then
	// machines are reconnected (in the background: a slow provider must not
	// hold the API back).
	// In a group the members claim what nobody owns instead (group.Start):
	// each computer's runs and machine come back with its ownership.
	if grp == nil {
		if err := m.Recover(ctx); err != nil {
			closeAll()
			return nil, fmt.Errorf("recover runs: %w", err)
		}
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		if grp == nil {
			if err := comps.Reconcile(bg); err != nil {
				log.Warn().Err(err).Msg("reconcile computers")
			}
		}
		comps.Watch(bg, 30*time.Second)
	}()
	ppl, err := takeover.NewPeople(st, comps, m, tk, log)
	if err != nil {
		stop()
		comps.ClosePool(context.Background())
		closeAll()
		return nil, err
	}
	go ppl.Events.Run(bg)
	var apiMux *http.ServeMux
	h := httpapi.Handler(httpapi.Options{Token: c.Token, OperatorToken: c.OperatorToken, Computers: comps, Runs: m, Metrics: mets, Tracing: trc, Log: log.With().Str("sub", "api").Logger(),
		Mount: func(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc) {
			apiMux = mux
			httpapi.MountTakeover(mux, gate, tk)
			// The bot's outside agents (CDP sessions, OSWorld's guest API)
			// share one lease registry: one holder, released by the last.
			outside := agentlease.New()
			osworld.Mount(mux, gate, osworld.New(osworld.Options{Computers: comps, Leases: outside, Log: log.With().Str("sub", "osworld").Logger()}))
			httpapi.MountCDP(mux, gate, cdpsession.New(cdpsession.Options{Computers: comps, Leases: outside, Log: log.With().Str("sub", "cdp").Logger()}))
			httpapi.MountCheckpoint(mux, gate, comps)
			httpapi.MountRecordings(mux, gate, comps)
			httpapi.MountPool(mux, comps)
			mountLogin(mux, ppl)
			mux.Handle(mcp.Path, mcp.Handler(mcp.Options{Computers: comps, Log: log.With().Str("sub", "mcp").Logger()}))
		}})
	w := &worker{Store: st, Computers: comps, Runs: m, Handler: ppl.Handler(h), People: ppl, stop: stop, setup: setup,
		DefaultProvider: def, Homes: homesName, apiMux: apiMux, Metrics: mets, Tracing: trc, Group: grp}
	if grp != nil {
		if err := w.joinGroup(bg, c.GroupListen, log); err != nil {
			stop()
			comps.ClosePool(context.Background())
			closeAll()
			return nil, err
		}
	}
	return w, nil
}

// joinGroup serves the group listener (the peers' relay and capability
// channel) and joins the group: from then on every request for a computer
// another member owns is relayed to it.
func (w *worker) joinGroup(ctx context.Context, listen string, log zerolog.Logger) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("WORKER_GROUP_LISTEN: %w", err)
	}
	w.groupSrv = &http.Server{Handler: w.Group.PeerHandler(w.Handler), ReadHeaderTimeout: 10 * time.Second}
	w.Group.ShareDashboard(w.People.Dashboard)
	go func() {
		if err := w.groupSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("worker group listener")
		}
	}()
	if err := w.Group.Start(ctx); err != nil {
		w.groupSrv.Close()
		return err
	}
	w.Handler = w.Group.Relay(w.Handler)
	return nil
}

// liveHomes is where the worker keeps the homes its local and docker
// machines mount directly: beside the machines (see
// providers.DefaultMachinesDir: their users must traverse to them, which a
// 0700 DATA_DIR forbids), "" when this worker runs no local or docker
// provider.
func liveHomes(c serveConfig, setup *providers.Setup) string {
	if setup == nil {
		return ""
	}
	machines := c.MachinesDir
	if machines == "" {
		machines = providers.DefaultMachinesDir(c.DataDir)
	}
	return filepath.Join(machines, "homes")
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/actchan"
	"github.com/open-bot/computer/apps/botd/internal/agent"
	"github.com/open-bot/computer/apps/botd/internal/api"
	"github.com/open-bot/computer/apps/botd/internal/browser"
	"github.com/open-bot/computer/apps/botd/internal/config"
	"github.com/open-bot/computer/apps/botd/internal/cookies"
	"github.com/open-bot/computer/apps/botd/internal/egress"
	"github.com/open-bot/computer/apps/botd/internal/execsvc"
	"github.com/open-bot/computer/apps/botd/internal/files"
	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/modelproxy"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/apps/botd/internal/vnc"
	"github.com/open-bot/computer/apps/botd/internal/workspace"
	"github.com/open-bot/computer/pkg/shared"
)

// run starts botd in the design's order and blocks until ctx ends, then stops
// everything. Cancellation is the only way to stop and is not an error.
func run(ctx context.Context, cfg config.Config) error {
	unix.Umask(0o002)
	log := newLogger(cfg.LogLevel)
	started := time.Now()

	if cfg.BotsGroup != "" {
		if err := osuser.UseBotsGroup(cfg.BotsGroup); err != nil {
			return err
		}
	}
	desktopUser, err := osuser.Lookup(cfg.DesktopUser)
	if err != nil {
		return err
	}
	botUser, err := osuser.Lookup(cfg.BotUser)
	if err != nil {
		return err
	}
	if err := osuser.PrepareDirs(osuser.Layout(cfg.Home, desktopUser, botUser)); err != nil {
		return err
	}
	// Chromium's sandbox needs user namespaces for desktop; without them every
	// browser starts with --no-sandbox (a warning is logged). Then the jar.
	sandbox := browser.ProbeSandbox(ctx, nil, &desktopUser, log)
	jar, err := cookies.Load(cookies.Options{Path: filepath.Join(cfg.StateDir(), "cookies.json"), Log: &log})
	if err != nil {
		return err
	}

	hub := health.NewHub()
	defer hub.Close()
	model := health.NewModel(hub, started)
	sources := health.Sources{}

	supLog := log.With().Str("component", "supervisor").Logger()
	sup := supervisor.New(supervisor.Options{Log: &supLog, OnEvent: func(e supervisor.Event) {
		hub.Publish(shared.EventProcess, e)
		model.Changed()
	}})
	// Whatever happens below, every child is stopped before run returns.
	defer sup.StopAll(context.Background())

	// Codex's app-server as bot, one per /agent connection over a socket
	// pair only botd holds; a first one is started now to prove Codex
	// answers. Wait for it (bounded, so a broken Codex leaves botd
	// reachable with health ok:false).
	extra, err := readOptionalFile(cfg.CodexConfigExtraFile)
	if err != nil {
		return err
	}
	// The model provider's key stays with root: Codex gets the loopback
	// model proxy's URL and a per-boot token, the proxy adds the key.
	var prov *agent.Provider
	var codexEnv []string
	if cfg.ModelUpstream != "" {
		mp, err := modelproxy.Start(modelproxy.Options{Listen: cfg.ModelProxyListen, MaxConns: cfg.MaxConns, Upstream: cfg.ModelUpstream, Key: cfg.ModelKey, Log: log})
		if err != nil {
			return err
		}
		defer mp.Close()
		prov = &agent.Provider{ID: modelproxy.ProviderID, TOML: mp.ProviderTOML()}
		codexEnv = []string{modelproxy.TokenEnv + "=" + mp.Token()}
	}
	codex, err := agent.Start(agent.Options{
		Bin: cfg.CodexBin, CodexHome: cfg.CodexHome(), Home: cfg.Workspace(),
		User: botUser, ExtraConfig: extra, Env: codexEnv, Provider: prov, Sup: sup,
		Changed: model.Changed, Log: log.With().Str("component", "agent").Logger(),
	})
	if err != nil {
		return err
	}
	defer codex.Stop()
	sources.Agent = codex.State
	model.SetSources(sources)
	rctx, rcancel := context.WithTimeout(ctx, cfg.CodexReadyTimeout)
	if err := codex.WaitReady(rctx); err != nil {
		if ctx.Err() != nil {
			rcancel()
			return nil
		}
		log.Error().Str("component", "agent").Err(err).Msg("codex app-server not ready; serving anyway (health ok:false)")
	} else {
		log.Info().Str("component", "agent").Int64("elapsed_ms", time.Since(started).Milliseconds()).Msg("codex app-server ready")
	}
	rcancel()

	// The SOCKS5 egress proxy, after Codex and before listening (its /egress
	// tunnel route is mounted with the others below).
	egressProxy, err := egress.New(egress.Options{Addr: cfg.SocksAddr, MaxConns: cfg.MaxConns, Mode: cfg.EgressMode, Allow: cfg.EgressAllow, Log: log, Hub: hub, Model: model})
	if err != nil {
		return err
	}
	defer egressProxy.Close()
	sources.Egress = egressProxy.Health
	model.SetSources(sources)

	srv := api.New(api.Options{Token: cfg.Token, Log: log.With().Str("component", "api").Logger(), Hub: hub, Health: model})
	srv.Mux().Handle("GET /agent", codex.Relay(log.With().Str("component", "agent").Logger()))
	egressProxy.Register(srv.Mux())
	files.New(files.Options{Workspace: cfg.Workspace(), Owner: botUser, Log: log.With().Str("component", "files").Logger()}).Register(srv.Mux())
	// The act channel of evaluation screens' commands (OSWorld's pyautogui):
	// the Python modules in a root-owned directory, the screens wired below.
	var screens *screen.Manager
	pyPath, err := actchan.Install("")
	if err != nil {
		log.Warn().Str("component", "exec").Err(err).Msg("act channel: Python modules not installed; evaluation commands get no act channel")
	} else {
		defer os.RemoveAll(pyPath)
	}
	execs := execsvc.New(execsvc.Options{User: botUser, Workspace: cfg.Workspace(), Log: log.With().Str("component", "exec").Logger(),
		ActChannel: actChannels(func() *screen.Manager { return screens }, pyPath)})
	defer execs.Close() // kills commands and terminal sessions left running
	execs.Register(srv.Mux())
	browsers := browser.NewScreens(browser.ScreensOptions{
		SocksAddr: cfg.SocksAddr, NoSandbox: sandbox.NoSandbox(), ApplyGuardExtraDomains: cfg.ApplyGuardExtraDomains,
		Desktop: desktopUser, Workspace: cfg.Workspace(), Cookies: jar, Events: hub, Changed: model.Changed, Log: log,
	})
	// Export/import of the portable home: browsers are closed (tabs saved,
	// profile databases flushed) and kept from starting meanwhile — an
	// export closes each browser alone, only while its own profile is
	// copied, and requests meeting it wait for it; an import closes them
	// all. An imported cookie jar replaces the one in memory.
	workspace.New(workspace.Options{
		Home: cfg.Home, Bot: botUser, Desktop: desktopUser, Log: log.With().Str("component", "workspace").Logger(),
		Quiesce: browsers.Quiesce, QuiesceScreen: browsers.QuiesceScreen,
		AfterImport: func(context.Context) {
			if err := jar.Reload(); err != nil {
				log.Error().Str("component", "cookies").Err(err).Msg("reload the imported cookie jar")
			}
		},
	}).Register(srv.Mux())
	listenHost, _, _ := net.SplitHostPort(cfg.Listen)
	screens = screen.New(screen.Options{
		Home: cfg.Home, DisplayBase: cfg.DisplayBase, ViewPortBase: cfg.ViewPortBase,
		MaxScreens: cfg.MaxScreens, Idle: cfg.ScreenIdle, Desktop: desktopUser, Supervisor: sup, Log: log,
		Events: hub, Changed: model.Changed, Blocked: browsers.Blocked, BrowserState: browsers.State,
	})
	sources.Screens = screens.Health
	model.SetSources(sources)
	screens.Routes(srv.Mux())
	// A browser per screen on demand, stopped first when its screen stops;
	// /open, /browser/page, /browser/pages, /type-secret. CookieSync every 2 s.
	browsers.Attach(screens, srv.Mux())
	// Human takeover: each screen's x11vnc over ws /screens/{id}/vnc and its
	// own view/control ports (on the API's host), signed viewer links, the
	// noVNC viewer page. Viewers close when their screen stops.
	viewers := vnc.New(vnc.Options{Screens: screens, MaxConns: cfg.MaxConns, Token: cfg.Token, Authorized: srv.Authorized, ListenHost: listenHost, Log: log})
	defer viewers.Close()
	viewers.Routes(srv.Mux())
	srv.AllowSelfAuth(viewers.SelfAuth)
	// PUT /token (a warm pool's machine taking its computer's own token):
	// the API's bearer check swaps first, then the viewer-link key, so every
	// link signed under the old token stops working. In memory only: a
	// restart reads BOTD_TOKEN_FILE again. cfg.Token is not read after here.
	srv.OnTokenRotate(viewers.Rekey)
	go jar.Run(ctx)
	go screens.Run(ctx) // sweeps leases and idle screens every 5 s

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	// Idle keep-alive connections are closed after two minutes, headers
	// must arrive within ten seconds, and past BOTD_MAX_CONNS open
	// connections a new one gets a 503: none is held forever, and no client
	// starves the others.
	ln = httpx.LimitListener(ln, cfg.MaxConns, true)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: httpx.ReadHeaderTimeout, IdleTimeout: httpx.IdleTimeout, MaxHeaderBytes: httpx.MaxHeaderBytes}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	log.Info().Str("component", "botd").Str("listen", ln.Addr().String()).Int64("elapsed_ms", time.Since(started).Milliseconds()).Msg("botd listening")

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	log.Info().Str("component", "botd").Msg("stopping")
	// Shutdown order: stop taking requests, then browsers (they save their
	// tabs), then displays, then everything else the supervisor holds.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	screens.Close(sctx) // browsers first (BeforeStop hooks), then displays
	browsers.Close(sctx)
	sup.StopAll(sctx)
	_ = egressProxy.Close() // ends proxied connections and the agent's tunnel
	hub.Close()
	log.Info().Str("component", "botd").Msg("stopped")
	return nil
}

// readOptionalFile returns the contents of path, or "" when path is "".
func readOptionalFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return string(b), nil
}

func newLogger(level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger()
}

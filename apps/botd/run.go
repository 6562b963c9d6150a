package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/api"
	"github.com/open-bot/computer/apps/botd/internal/config"
	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
)

// run starts botd in the design's order and blocks until ctx ends, then stops
// everything. Cancellation is the only way to stop and is not an error.
func run(ctx context.Context, cfg config.Config) error {
	unix.Umask(0o002)
	log := newLogger(cfg.LogLevel)
	started := time.Now()

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

	hub := health.NewHub()
	defer hub.Close()
	model := health.NewModel(hub, started)

	srv := api.New(api.Options{Token: cfg.Token, Log: log.With().Str("component", "api").Logger(), Hub: hub, Health: model})

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
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
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hub.Close()
	_ = hs.Shutdown(sctx)
	log.Info().Str("component", "botd").Msg("stopped")
	return nil
}

func newLogger(level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger()
}

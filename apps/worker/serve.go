package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/httpapi"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/pkg/shared/client"
)

// serveConfig is the worker's configuration (flags default to the env).
type serveConfig struct {
	Listen, BotdURL, Model, Provider, Approvals string
	Token, BotdToken                            string
}

func envOr(k, def string) string {
	if v := strings.TrimSpace(os.Getenv(k)); v != "" {
		return v
	}
	return def
}

// secret reads a secret from the env var name, or from the file named by
// name_FILE; it is never printed.
func secret(name string) (string, error) {
	if v := os.Getenv(name); v != "" {
		return v, nil
	}
	if f := os.Getenv(name + "_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%s_FILE: %w", name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", nil
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c serveConfig
	fs.StringVar(&c.Listen, "listen", envOr("WORKER_LISTEN", "127.0.0.1:7100"), "API listen address (WORKER_LISTEN)")
	fs.StringVar(&c.BotdURL, "botd", envOr("BOTD_URL", "http://127.0.0.1:7000"), "botd base URL (BOTD_URL)")
	fs.StringVar(&c.Model, "model", envOr("WORKER_MODEL", "gpt-6.1-sol"), "default model (WORKER_MODEL)")
	fs.StringVar(&c.Provider, "model-provider", envOr("WORKER_MODEL_PROVIDER", ""), "Codex model provider id (WORKER_MODEL_PROVIDER)")
	fs.StringVar(&c.Approvals, "approvals", envOr("WORKER_APPROVALS", "decline"), "answer to Codex approval requests: decline|accept (WORKER_APPROVALS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.Token, err = secret("WORKER_TOKEN"); err != nil {
		return err
	}
	if c.BotdToken, err = secret("BOTD_TOKEN"); err != nil {
		return err
	}
	if len(c.Token) < 16 {
		return errors.New("WORKER_TOKEN (or WORKER_TOKEN_FILE) must be at least 16 characters")
	}
	if c.BotdToken == "" {
		return errors.New("BOTD_TOKEN (or BOTD_TOKEN_FILE) is required")
	}
	if c.Approvals != "decline" && c.Approvals != "accept" {
		return fmt.Errorf("approvals: want decline or accept, got %q", c.Approvals)
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("component", "worker").Logger()
	h, err := newServer(c, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info().Str("listen", ln.Addr().String()).Str("botd", c.BotdURL).Msg("worker listening")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newServer wires the worker's API.
func newServer(c serveConfig, log zerolog.Logger) (http.Handler, error) {
	botd := client.New(c.BotdURL, c.BotdToken, nil)
	agentURL := "ws" + strings.TrimPrefix(strings.TrimRight(c.BotdURL, "/"), "http") + "/agent"
	m := runs.NewManager(runs.Options{Botd: botd, AgentURL: agentURL, Model: c.Model, ModelProvider: c.Provider,
		Approvals: runs.ApprovalPolicy(c.Approvals), Log: log})
	return httpapi.Handler(httpapi.Options{Token: c.Token, Runs: m, Botd: botd, Log: log}), nil
}

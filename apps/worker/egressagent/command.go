package egressagent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// Command is `worker egress --botd URL --token-file FILE` (args are what
// follows "egress"): the egress agent for botd's tunnel mode. It runs until
// ctx ends (SIGTERM/SIGINT).
func Command(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("egress", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	botd := fs.String("botd", "", "botd's base URL, e.g. https://computer.example:7000")
	tokenFile := fs.String("token-file", "", "file holding BOTD_TOKEN (never pass the token itself as an argument)")
	allowLoopback := fs.Bool("allow-loopback", false, "let the bot reach this machine's own loopback addresses")
	allowList := fs.String("allow", os.Getenv("EGRESS_ALLOW"), "comma-separated CIDRs and host:port entries the bot may reach on this machine's networks (default $EGRESS_ALLOW; loopback, private, link-local, unique-local and CGNAT are refused otherwise)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return err
	}
	if *botd == "" || *tokenFile == "" {
		return errors.New("egress: --botd and --token-file are required")
	}
	b, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("egress: read token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return fmt.Errorf("egress: token file %s is empty", *tokenFile)
	}
	allow, err := egresspolicy.Parse(*allowList)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	lvl, err := zerolog.ParseLevel(*level)
	if err != nil || *level == "" {
		lvl = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger()
	return Run(ctx, Options{
		BotdURL:       *botd,
		Token:         token,
		Log:           log,
		Allow:         allow,
		AllowLoopback: *allowLoopback,
	})
}

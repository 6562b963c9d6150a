// Command botd is the open-bot computer's root daemon: it starts every
// process, owns every screen and serves the only way in (see DESIGN.md).
//
// main is wiring only: environment → Config → run(ctx).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/open-bot/computer/apps/botd/internal/config"
)

func main() {
	cfg, err := config.FromEnv(nil)
	if err != nil {
		// Before anything is created: a clear message and a non-zero exit.
		fmt.Fprintln(os.Stderr, "botd: refusing to start:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "botd:", err)
		os.Exit(1)
	}
}

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// startPool starts the warm pool WORKER_POOL asks for (sizes, parsed by
// computers.ParsePool). A pool of docker machines needs an engine with the
// image now: without one the start fails and says so, rather than a pool
// that never fills.
func startPool(ctx context.Context, comps *computers.Service, sizes map[string]int, c serveConfig, setup *providers.Setup) error {
	if sizes[providers.KindDocker] > 0 {
		if setup == nil || setup.Docker == nil {
			return fmt.Errorf("WORKER_POOL: docker=%d, but this worker runs no docker provider", sizes[providers.KindDocker])
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := setup.Docker.Ready(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("WORKER_POOL: docker=%d, but docker machines cannot be made here: %w", sizes[providers.KindDocker], err)
		}
	}
	if sizes[providers.KindLocal] > 0 && (setup == nil || setup.Local == nil) {
		return fmt.Errorf("WORKER_POOL: local=%d, but this worker runs no local provider", sizes[providers.KindLocal])
	}
	return comps.StartPool(ctx, computers.PoolOptions{Sizes: sizes, Dir: filepath.Join(c.DataDir, "pool")})
}

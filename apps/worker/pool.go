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
// image now (a kubernetes pool a cluster that answers, with the namespace):
// without one the start fails and says so, rather than a pool that never
// fills.
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
	if n := sizes[providers.KindKubernetes]; n > 0 {
		if setup == nil || setup.Kubernetes == nil {
			return fmt.Errorf("WORKER_POOL: kubernetes=%d, but this worker runs no kubernetes provider (WORKER_PROVIDER=kubernetes or KUBERNETES_NAMESPACE)", n)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := setup.Kubernetes.Ready(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("WORKER_POOL: kubernetes=%d, but computers cannot be made on the cluster: %w", n, err)
		}
	}
	if sizes[providers.KindLocal] > 0 && (setup == nil || setup.Local == nil) {
		return fmt.Errorf("WORKER_POOL: local=%d, but this worker runs no local provider", sizes[providers.KindLocal])
	}
	return comps.StartPool(ctx, computers.PoolOptions{Sizes: sizes, Dir: filepath.Join(c.DataDir, "pool")})
}

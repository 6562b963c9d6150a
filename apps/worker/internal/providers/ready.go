package providers

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
)

// Ready reports whether this provider can make machines now: an engine
// answers and has the image (a warm pool of docker machines is refused at
// start otherwise, rather than failing to fill forever).
func (d *Docker) Ready(ctx context.Context) error {
	if err := d.Ping(ctx); err != nil {
		return err
	}
	err := d.call(ctx, "inspect image", func(ctx context.Context) error {
		_, err := d.cli.ImageInspect(ctx, d.o.Image)
		return err
	})
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker provider: image %s is missing: build it with `make image`", d.o.Image)
	}
	return err
}

package providers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/open-bot/computer/pkg/shared/client"
)

// computerID is what a Spec.ComputerID may look like: it names directories,
// containers and volumes.
var computerID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func checkComputerID(id string) error {
	if !computerID.MatchString(id) {
		return fmt.Errorf("computer id %q: want 1-63 of [a-z0-9_-], starting with a letter or digit", id)
	}
	return nil
}

// machineName is a fresh name for one incarnation of a computer: a
// replacement never reuses the home of the machine it replaces.
func machineName(computerID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return computerID + "-" + hex.EncodeToString(b[:])
}

// errNotReady is why a botd did not become healthy before its deadline.
type errNotReady struct {
	waited time.Duration
	last   string
}

func (e *errNotReady) Error() string {
	return fmt.Sprintf("botd not healthy after %s: %s", e.waited.Round(time.Millisecond), e.last)
}

// awaitHealthy polls the machine's health (botd's /health) until ok:true, until ctx ends, until
// timeout, or until exited reports why the machine can no longer answer.
func awaitHealthy(ctx context.Context, c Machine, timeout time.Duration, exited func() error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no answer yet"
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if exited != nil {
			if err := exited(); err != nil {
				return err
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		h, err := c.Health(rctx)
		rcancel()
		switch {
		case err == nil && h.OK:
			return nil
		case err == nil:
			last = fmt.Sprintf("health ok:false (agent %s)", h.Agent)
		case ctx.Err() != nil:
			// The deadline cut this probe short: keep the previous answer.
		default:
			var be *client.Error
			if errors.As(err, &be) && be.Status == http.StatusUnauthorized {
				return fmt.Errorf("botd refuses the token this worker holds for it: %w", err)
			}
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return &errNotReady{waited: time.Since(start), last: last}
		case <-tick.C:
		}
	}
}

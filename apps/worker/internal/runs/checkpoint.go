package runs

import (
	"context"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/computers"
)

// CheckpointTimeout bounds the checkpoint made when a run ends.
const CheckpointTimeout = 10 * time.Minute

// checkpointAtEnd checkpoints the computer's portable home when the run
// completes, fails or is stopped, under the run's lease epoch (a run that
// lost its lease writes nothing). The run's events say how it went; a
// failed checkpoint leaves the previous one intact.
func (r *Run) checkpointAtEnd() {
	if r.fenced.Load() || !r.m.o.Computers.KeepsCheckpoints(context.Background(), r.computerID) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), CheckpointTimeout)
	defer cancel()
	start := time.Now()
	cp, err := r.m.o.Computers.Checkpoint(ctx, r.computerID, &computers.Fence{LeaseKey: r.leaseKey, Epoch: r.epoch})
	if err != nil {
		r.traced(r.m.o.Log.Warn()).Str("run", r.id).Err(err).Msg("checkpoint at the end of the run failed")
		r.emit("checkpoint_failed", map[string]string{"error": err.Error(), "note": "the previous checkpoint is kept"})
		return
	}
	r.emit("checkpoint", map[string]any{"revision": cp.Revision, "size": cp.Size, "at": cp.At.UTC(), "ms": time.Since(start).Milliseconds()})
}

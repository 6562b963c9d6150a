package screen

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// BenchmarkScreenTakeoverCutoff: a person takes the screen while the
// agent's action runs; the figure is how long from the user lease until
// that action has failed with user_has_control (the tests only require that
// it is cut off, not how fast). One cut-off per iteration: run with
// -benchtime 20x; mean and max, never percentiles of a few samples.
func BenchmarkScreenTakeoverCutoff(b *testing.B) {
	e := newIT(b, 2, itDisplayBase+18)
	ctx := benchCtx(b)
	const id = "bench-cutoff"
	_, err := e.m.Register(id)
	require.NoError(b, err)
	l, err := e.m.Leases().Acquire(id, lease.Agent, "bench", time.Hour)
	require.NoError(b, err)
	_, err = actIT(e, ctx, id, l.ID, shared.Action{Type: shared.ActionScreenshot})
	require.NoError(b, err)
	var took []time.Duration
	b.ResetTimer()
	for range b.N {
		l, err := e.m.Leases().Acquire(id, lease.Agent, "bench", time.Hour)
		require.NoError(b, err)
		errc := make(chan error, 1)
		go func() {
			_, err := actIT(e, ctx, id, l.ID, shared.Action{Type: shared.ActionWait, Ms: intp(shared.MaxWaitMs)})
			errc <- err
		}()
		waitInFlight(b, e, id)
		start := time.Now()
		u, err := e.m.Leases().Acquire(id, lease.User, "ann", time.Hour)
		require.NoError(b, err)
		err = <-errc
		took = append(took, time.Since(start))
		require.Equal(b, shared.CodeUserHasControl, codeOf(err), "%v", err)
		require.NoError(b, e.m.Leases().Release(id, u.ID))
	}
	b.StopTimer()
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(len(took))/1000, "cutoff-ms-mean")
	b.ReportMetric(float64(slices.Max(took).Microseconds())/1000, "cutoff-ms-max")
}

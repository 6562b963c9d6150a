package providers

// Issue 22, requirement 6 (box): provision → first observation's JPEG and
// observe p50 on the Box emulator (the command-driven desktop machine over
// Box's command API) beside docker's (botd on a published port), in one
// run. The benchmark prints figures and asserts only what must be true of
// every sample (a JPEG came back), never a time.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/box"
	boxemutest "github.com/open-bot/computer/apps/worker/internal/providers/box/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

const (
	boxBenchCold    = 2
	boxBenchSamples = 20
)

// BenchmarkBoxVsDocker: per figure a row for the Box emulator and one for
// docker: cold (provision → reconnect → screen → lease → the first
// observation's JPEG, p50 of boxBenchCold new computers) and observe (a
// full observation under a fresh lease, p50/p90 of boxBenchSamples).
func BenchmarkBoxVsDocker(b *testing.B) {
	if os.Geteuid() != 0 {
		unavailable(b, "needs root (the Docker engine)")
	}
	ctx := testCtx(b, 30*time.Minute)
	env := boxemutest.Start(b)
	sealer, err := secret.LoadOrCreate(filepath.Join(tmpRoot, "boxbench", "secret.key"))
	require.NoError(b, err)
	k, err := box.NewKey(env.APIKey, sealer)
	require.NoError(b, err)
	// The adapter's default transport: the figures are the adapter's and
	// the emulator's, not the spec Checker's (TestConformanceBox holds the
	// exchanges to the spec).
	bp, err := box.New(box.Options{APIURL: env.URL, Key: k, HTTPClient: &http.Client{Timeout: 2 * time.Minute}})
	require.NoError(b, err)
	b.Cleanup(bp.Close)
	bx, err := NewBox(bp, filepath.Join(tmpRoot, "boxbench", "single-screen"))
	require.NoError(b, err)

	d, err := NewDocker(DockerOptions{Image: testImage(), DataDir: filepath.Join(tmpRoot, "boxbench-docker"), ReadyTimeout: 4 * time.Minute})
	require.NoError(b, err)
	b.Cleanup(func() { d.Close() })
	if err := d.Ping(ctx); err != nil {
		unavailable(b, "no Docker engine answers: %v", err)
	}
	if _, err := d.cli.ImageInspect(ctx, d.o.Image); err != nil {
		unavailable(b, "image %s missing (make image)", d.o.Image)
	}

	kinds := []struct {
		name string
		p    Provider
	}{{"box-emulator", bx}, {"docker", d}}
	type figs struct{ cold, observe []time.Duration }
	all := map[string]*figs{}
	for _, kd := range kinds {
		f := &figs{}
		var m Machine
		lease := ""
		for n := 0; n < boxBenchCold; n++ {
			spec := Spec{ComputerID: fmt.Sprintf("boxbench-%s-%d", kd.name, n), BotdToken: testToken()}
			start := time.Now()
			ref, err := kd.p.Provision(ctx, spec)
			require.NoError(b, err)
			p, r := kd.p, ref
			b.Cleanup(func() { _ = p.Destroy(context.Background(), r) })
			c, err := kd.p.Reconnect(ctx, ref, spec)
			require.NoError(b, err)
			lease = benchLease(b, ctx, c, "bench")
			o, err := c.Observe(ctx, "bench", lease)
			require.NoError(b, err)
			f.cold = append(f.cold, time.Since(start))
			requireJPEG(b, o)
			m = c
		}
		require.NoError(b, m.ReleaseLease(ctx, "bench", lease))
		for i := 0; i < boxBenchSamples; i++ {
			l, err := m.AcquireLease(ctx, "bench", "agent", fmt.Sprintf("bench-%d", i), 10*time.Minute)
			require.NoError(b, err)
			t0 := time.Now()
			o, err := m.Observe(ctx, "bench", l.LeaseID)
			f.observe = append(f.observe, time.Since(t0))
			require.NoError(b, err)
			requireJPEG(b, o)
			require.NoError(b, m.ReleaseLease(ctx, "bench", l.LeaseID))
		}
		all[kd.name] = f
	}
	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	for _, row := range []string{"cold_to_first_jpeg", "observe"} {
		b.Run(row, func(b *testing.B) {
			for _, kd := range kinds {
				b.Run(kd.name, func(b *testing.B) {
					f := all[kd.name]
					s := f.cold
					if row == "observe" {
						s = f.observe
					}
					b.ReportMetric(ms(pct(s, 50)), "p50_ms")
					b.ReportMetric(ms(pct(s, 90)), "p90_ms")
				})
			}
		})
	}
}

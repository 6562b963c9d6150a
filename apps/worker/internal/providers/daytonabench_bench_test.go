package providers

// Issue 22, requirement 6: the figures of a computer on the Daytona
// emulator — snapshot open-bot (botd in a sandbox, reached through the
// adapter's forwarder and the sandbox's preview URL) and snapshot desktop
// (the command-driven desktop machine over the toolbox: display :0 through
// /computeruse, commands through process/execute and sessions) — beside the
// same figures on docker, in one run (measureComputer, BenchmarkE2BVsDocker's
// figures). Only what must be true of every sample is asserted, never a
// time.

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// BenchmarkDaytonaVsDocker: per figure (cold: provision → first JPEG;
// observe p50/p90; click round trip; checkpoint export and import), a row
// for the Daytona emulator in each mode and one for docker.
func BenchmarkDaytonaVsDocker(b *testing.B) {
	if os.Geteuid() != 0 {
		unavailable(b, "needs root (the Docker engine)")
	}
	ctx := testCtx(b, 90*time.Minute)

	snaps := emutest.DefaultSnapshots()
	snaps[daytona.DesktopSnapshot] = emutest.DesktopSnapshot()
	env := emutest.Start(b, emutest.Options{Snapshots: snaps})
	sealer, err := secret.LoadOrCreate(filepath.Join(tmpRoot, "daytonabench", "secret.key"))
	require.NoError(b, err)
	adapter := func(snapshot string) Provider {
		k, err := daytona.NewKey(env.APIKey, sealer)
		require.NoError(b, err)
		// The adapter's default transports: the figures are the adapter's
		// and the emulator's, not the spec Checker's (the conformance
		// suites hold these exchanges to the spec).
		p, err := daytona.New(daytona.Options{APIURL: env.URL, Key: k, Snapshot: snapshot, AutoStop: daytona.DefaultAutoStop,
			ReadyTimeout: 4 * time.Minute, HTTPClient: &http.Client{Timeout: time.Minute}})
		require.NoError(b, err)
		b.Cleanup(p.Close)
		return NewDaytona(p)
	}

	d, err := NewDocker(DockerOptions{Image: testImage(), DataDir: filepath.Join(tmpRoot, "daytonabench-docker"), ReadyTimeout: 4 * time.Minute})
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
	}{
		{"daytona-emulator", adapter(daytona.DefaultSnapshot)},
		{"daytona-desktop-emulator", adapter(daytona.DesktopSnapshot)},
		{"docker", d},
	}
	figs := map[string]*computerFigures{}
	for _, kd := range kinds {
		figs[kd.name] = measureComputer(b, ctx, kd.p, "dtbench-"+kd.name)
	}

	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	row := func(name string, report func(b *testing.B, f *computerFigures)) {
		b.Run(name, func(b *testing.B) {
			for _, kd := range kinds {
				b.Run(kd.name, func(b *testing.B) { report(b, figs[kd.name]) })
			}
		})
	}
	row("cold_to_first_jpeg", func(b *testing.B, f *computerFigures) {
		b.ReportMetric(ms(pct(f.cold, 50)), "p50_ms")
		b.ReportMetric(ms(pct(f.cold, 90)), "p90_ms")
	})
	row("observe", func(b *testing.B, f *computerFigures) {
		b.ReportMetric(ms(pct(f.observe, 50)), "p50_ms")
		b.ReportMetric(ms(pct(f.observe, 90)), "p90_ms")
		b.ReportMetric(float64(f.observeBytes)/float64(len(f.observe))/1024, "jpeg_kB")
		b.ReportMetric(ms(pct(f.unchanged, 50)), "unchanged-p50_ms")
	})
	row("click_round_trip", func(b *testing.B, f *computerFigures) {
		b.ReportMetric(ms(pct(f.click, 50)), "p50_ms")
		b.ReportMetric(ms(pct(f.click, 90)), "p90_ms")
	})
	row("checkpoint_restore", func(b *testing.B, f *computerFigures) {
		mb := float64(f.ckptBytes) / (1 << 20)
		b.ReportMetric(mb, "tar_MB")
		b.ReportMetric(ms(pct(f.export, 50)), "export-p50_ms")
		b.ReportMetric(mb/pct(f.export, 50).Seconds(), "export_MB/s")
		b.ReportMetric(ms(pct(f.restore, 50)), "import-p50_ms")
		b.ReportMetric(mb/pct(f.restore, 50).Seconds(), "import_MB/s")
	})
}

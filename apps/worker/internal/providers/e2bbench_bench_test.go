package providers

// Issue 21, requirement 5: the figures of a computer on the E2B emulator
// (template open-bot: botd in a sandbox, reached through the adapter's
// forwarder and the emulator's port routing) beside the same figures on
// docker (the computer image, botd on a published port), in one run; and
// the command-driven desktop machine's observe beside botd's on one X
// display. Benchmarks print figures and assert only what must be true of
// every sample (a JPEG came back, the pointer is where the click went, the
// restored files are the checkpointed ones), never a time.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

const (
	// benchColdStarts new computers per backend (provision → first JPEG).
	benchColdStarts = 3
	// benchSamples observations and clicks per backend.
	benchSamples = 30
	// The checkpointed workspace: benchCkptFiles files of benchCkptFileSize
	// random (incompressible) bytes, exported and imported benchCkptRounds
	// times.
	benchCkptFiles    = 64
	benchCkptFileSize = 128 << 10
	benchCkptRounds   = 3
)

// computerFigures is what one backend measured.
type computerFigures struct {
	cold, observe, unchanged, click []time.Duration
	observeBytes                    int
	ckptBytes, restoredBytes        int64
	export, restore                 []time.Duration
}

// BenchmarkE2BVsDocker: per figure, a row for the E2B emulator (template
// open-bot) and one for docker, measured in one run through the providers'
// own Provision/Reconnect and the machine's operations:
//   - cold: provision → reconnect → screen → lease → the first observation's
//     JPEG (p50/p90 of benchColdStarts new computers);
//   - observe: a full observation (a JPEG: each sample under a fresh lease,
//     so none is elided) on a running computer, p50/p90, with the JPEG's
//     mean size, and an unchanged one (the same lease again: no image) p50;
//   - click: act with one click and its observation (botd's settle, 450 ms,
//     included), p50/p90;
//   - checkpoint: export of a workspace holding 8 MiB of random files (the
//     tar's bytes) and its import into a fresh computer of the same kind
//     (p50 of benchCkptRounds each, MB/s), the files checked there.
func BenchmarkE2BVsDocker(b *testing.B) {
	if os.Geteuid() != 0 {
		unavailable(b, "needs root (the Docker engine)")
	}
	ctx := testCtx(b, 60*time.Minute)

	env := emutest.Start(b, nil, nil)
	sealer, err := secret.LoadOrCreate(filepath.Join(tmpRoot, "e2bbench", "secret.key"))
	require.NoError(b, err)
	k, err := e2b.NewKey(env.APIKey, sealer)
	require.NoError(b, err)
	// The adapter's default transports: the figures are the adapter's and
	// the emulator's, not the spec Checker's validation (the conformance
	// suite holds these exchanges to the spec).
	ep, err := e2b.New(e2b.Options{APIURL: env.URL, SandboxURL: env.URL, Key: k, ReadyTimeout: 4 * time.Minute,
		HTTPClient: &http.Client{Timeout: time.Minute}})
	require.NoError(b, err)
	b.Cleanup(ep.Close)

	d, err := NewDocker(DockerOptions{Image: testImage(), DataDir: filepath.Join(tmpRoot, "e2bbench-docker"), ReadyTimeout: 4 * time.Minute})
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
	}{{"e2b-emulator", NewE2B(ep)}, {"docker", d}}
	figs := map[string]*computerFigures{}
	for _, kd := range kinds {
		figs[kd.name] = measureComputer(b, ctx, kd.p, "e2bbench-"+kd.name)
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
		b.ReportMetric(float64(f.restoredBytes)/(1<<20), "imported_MB")
	})
}

// measureComputer takes every figure of one provider.
func measureComputer(b *testing.B, ctx context.Context, p Provider, prefix string) *computerFigures {
	f := &computerFigures{}
	newComputer := func(name string) (Machine, string) {
		spec := Spec{ComputerID: name, BotdToken: testToken()}
		ref, err := p.Provision(ctx, spec)
		require.NoError(b, err)
		b.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
		m, err := p.Reconnect(ctx, ref, spec)
		require.NoError(b, err)
		return m, ref
	}

	// Cold: the last computer stays for the figures on a running one.
	var m Machine
	lease := ""
	for n := 0; n < benchColdStarts; n++ {
		start := time.Now()
		c, ref := newComputer(fmt.Sprintf("%s-%d", prefix, n))
		l := benchLease(b, ctx, c, "bench")
		o, err := c.Observe(ctx, "bench", l)
		require.NoError(b, err)
		f.cold = append(f.cold, time.Since(start))
		requireJPEG(b, o)
		if n < benchColdStarts-1 {
			require.NoError(b, p.Destroy(ctx, ref))
		} else {
			m, lease = c, l
		}
	}

	// Observe on the running computer: a fresh lease before each sample
	// (not timed), so each answer carries the JPEG; then the same lease
	// again, an unchanged frame.
	for i := 0; i < benchSamples; i++ {
		if lease != "" {
			require.NoError(b, m.ReleaseLease(ctx, "bench", lease))
		}
		l, err := m.AcquireLease(ctx, "bench", "agent", fmt.Sprintf("bench-%d", i), 10*time.Minute)
		require.NoError(b, err)
		lease = l.LeaseID
		t0 := time.Now()
		o, err := m.Observe(ctx, "bench", lease)
		f.observe = append(f.observe, time.Since(t0))
		require.NoError(b, err)
		f.observeBytes += requireJPEG(b, o)
		t0 = time.Now()
		o, err = m.Observe(ctx, "bench", lease)
		f.unchanged = append(f.unchanged, time.Since(t0))
		require.NoError(b, err)
		if !o.Unchanged {
			// The panel clock may tick between two frames: then this
			// sample is a full frame, not the elided answer.
			f.unchanged = f.unchanged[:len(f.unchanged)-1]
		}
	}
	require.NotEmpty(b, f.unchanged, "an identical frame comes back as unchanged")

	// Click round trips on the desktop's empty background, each at a new
	// point (the pointer is drawn into the frame).
	for i := 0; i < benchSamples; i++ {
		x, y := 300+(i*37)%600, 250+(i*23)%300
		t0 := time.Now()
		r, err := m.Act(ctx, "bench", lease, []shared.Action{{Type: shared.ActionClick, X: &x, Y: &y}})
		f.click = append(f.click, time.Since(t0))
		require.NoError(b, err)
		var results []struct {
			OK bool `json:"ok"`
		}
		require.NoError(b, json.Unmarshal(r.Results, &results))
		require.Len(b, results, 1)
		require.True(b, results[0].OK, "%s", r.Results)
		require.Equal(b, shared.Point{X: x, Y: y}, r.Observation.Pointer, "the observation shows the pointer where the click went")
	}

	// Checkpoint and restore of the same home.
	script := fmt.Sprintf(`set -e; rm -rf ckpt; mkdir ckpt; i=0; while [ $i -lt %d ]; do head -c %d /dev/urandom > ckpt/f$i.bin; i=$((i+1)); done; cat ckpt/*.bin | sha256sum`,
		benchCkptFiles, benchCkptFileSize)
	r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMs: 120000})
	require.NoError(b, err)
	require.Equal(b, 0, r.ExitCode, "%s", r.Stderr)
	want := strings.Fields(r.Stdout)[0]
	var archive []byte
	for i := 0; i < benchCkptRounds; i++ {
		t0 := time.Now()
		rc, err := m.ExportWorkspace(ctx, 0)
		require.NoError(b, err)
		a, err := io.ReadAll(rc)
		rc.Close()
		f.export = append(f.export, time.Since(t0))
		require.NoError(b, err)
		archive = a
	}
	f.ckptBytes = int64(len(archive))
	require.Greater(b, f.ckptBytes, int64(benchCkptFiles*benchCkptFileSize), "the tar holds the files")
	fresh, _ := newComputer(prefix + "-restore")
	for i := 0; i < benchCkptRounds; i++ {
		t0 := time.Now()
		s, err := fresh.ImportWorkspace(ctx, bytes.NewReader(archive))
		f.restore = append(f.restore, time.Since(t0))
		require.NoError(b, err)
		f.restoredBytes = s.Bytes
	}
	r, err = fresh.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "ls ckpt | wc -l; cat ckpt/*.bin | sha256sum"}, TimeoutMs: 60000})
	require.NoError(b, err)
	require.Equal(b, 0, r.ExitCode, "%s", r.Stderr)
	got := strings.Fields(r.Stdout)
	require.Len(b, got, 3, "%q", r.Stdout)
	require.Equal(b, fmt.Sprint(benchCkptFiles), got[0], "every checkpointed file is restored")
	require.Equal(b, want, got[1], "the restored files are the checkpointed bytes")
	return f
}

// requireJPEG fails unless o carries a JPEG; it returns its size.
func requireJPEG(b *testing.B, o client.Observation) int {
	b.Helper()
	require.False(b, o.Unchanged, "a full observation")
	raw, err := base64.StdEncoding.DecodeString(o.Image)
	require.NoError(b, err)
	require.True(b, len(raw) > 3 && raw[0] == 0xff && raw[1] == 0xd8 && raw[2] == 0xff, "the observation is a JPEG")
	return len(raw)
}

// pct is the q-th percentile (nearest rank) of d.
func pct(d []time.Duration, q int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := len(s) * q / 100
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

// BenchmarkDesktopVsBotdObserve: the command-driven desktop machine's
// observe (docker exec of xdotool + scrot, the JPEG back through the exec
// stream) beside botd's (in-process capture and encode, over its HTTP API)
// on the same X display: a docker computer's botd runs its screen on :1
// (DISPLAY_BASE=1), and a desktop machine over the same container (a
// DockerBackend on its ref, as root with the screen's X cookie) drives :1
// as its second slot (its first, :0, is a bare Xvfb started beforehand, so
// no second desktop runs beside botd's). Samples alternate between the two,
// each under a fresh lease so both return a full JPEG of the same frame.
func BenchmarkDesktopVsBotdObserve(b *testing.B) {
	if os.Geteuid() != 0 {
		unavailable(b, "needs root (the Docker engine)")
	}
	ctx := testCtx(b, 30*time.Minute)
	d, err := NewDocker(DockerOptions{Image: testImage(), DataDir: filepath.Join(tmpRoot, "e2bbench-samedisplay"),
		ReadyTimeout: 4 * time.Minute, Env: []string{"DISPLAY_BASE=1"}})
	require.NoError(b, err)
	b.Cleanup(func() { d.Close() })
	if err := d.Ping(ctx); err != nil {
		unavailable(b, "no Docker engine answers: %v", err)
	}
	if _, err := d.cli.ImageInspect(ctx, d.o.Image); err != nil {
		unavailable(b, "image %s missing (make image)", d.o.Image)
	}
	spec := Spec{ComputerID: "e2bbench-same-display", BotdToken: testToken()}
	ref, err := d.Provision(ctx, spec)
	require.NoError(b, err)
	b.Cleanup(func() { _ = d.Destroy(context.Background(), ref) })
	bm, err := d.Reconnect(ctx, ref, spec)
	require.NoError(b, err)
	bs, err := bm.StartScreen(ctx, "bench")
	require.NoError(b, err)
	require.Equal(b, ":1", bs.Display, "botd's screen is display :1")

	// The desktop machine runs as botd's desktop user (x11vnc as root
	// cannot attach its MIT-SHM to that user's X server) with the screen's
	// cookie (botd's Wild entry for its slot 0) as its Xauthority; :0 is a
	// bare Xvfb.
	be := desktop.NewDockerBackend(d.cli, ref, 2)
	setup := `set -e
install -o desktop -g desktop -m 600 /home/desktop/.Xauthority-0 /home/desktop/.Xauthority
setsid Xvfb :0 -ac -screen 0 1280x800x24 -nolisten tcp >/tmp/bench-xvfb0.log 2>&1 </dev/null &
i=0; while ! xdpyinfo -display :0 >/dev/null 2>&1; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done`
	r, err := be.Exec(ctx, desktop.Cmd{Argv: []string{"sh", "-c", setup}, User: "root"})
	require.NoError(b, err)
	require.Equal(b, 0, r.ExitCode, "%s", r.Stderr)
	dm, err := desktop.New(desktop.Options{Backend: be, User: "desktop", Home: "/home/desktop",
		// Its x11vnc stays off botd's ports; its websockify takes
		// published view ports botd's one screen leaves free (6082..6085
		// of 6080..6087), so the held stream below can reach them.
		RFBPortBase: 15900, ViewPortBase: containerViewBase + 2})
	require.NoError(b, err)
	b.Cleanup(func() { dm.Close() })
	s0, err := dm.StartScreen(ctx, "pad")
	require.NoError(b, err)
	require.Equal(b, ":0", s0.Display)
	ds, err := dm.StartScreen(ctx, "same")
	require.NoError(b, err)
	require.Equal(b, ":1", ds.Display, "the desktop machine drives botd's display")

	// The same display: a pointer botd moves is where the desktop machine
	// sees it.
	bl, err := bm.AcquireLease(ctx, "bench", "agent", "bench", 10*time.Minute)
	require.NoError(b, err)
	x, y := 333, 222
	_, err = bm.Act(ctx, "bench", bl.LeaseID, []shared.Action{{Type: shared.ActionMove, X: &x, Y: &y}})
	require.NoError(b, err)
	dl, err := dm.AcquireLease(ctx, "same", desktop.KindAgent, "bench", 10*time.Minute)
	require.NoError(b, err)
	o, err := dm.Observe(ctx, "same", dl.LeaseID)
	require.NoError(b, err)
	require.Equal(b, shared.Point{X: x, Y: y}, o.Pointer, "the desktop machine sees the pointer botd moved")

	var botdD, deskD []time.Duration
	var botdBytes, deskBytes int
	for i := 0; i < benchSamples; i++ {
		require.NoError(b, bm.ReleaseLease(ctx, "bench", bl.LeaseID))
		bl, err = bm.AcquireLease(ctx, "bench", "agent", fmt.Sprintf("bench-%d", i), 10*time.Minute)
		require.NoError(b, err)
		require.NoError(b, dm.ReleaseLease(ctx, "same", dl.LeaseID))
		dl, err = dm.AcquireLease(ctx, "same", desktop.KindAgent, fmt.Sprintf("bench-%d", i), 10*time.Minute)
		require.NoError(b, err)
		botdObs := func() {
			t0 := time.Now()
			o, err := bm.Observe(ctx, "bench", bl.LeaseID)
			botdD = append(botdD, time.Since(t0))
			require.NoError(b, err)
			botdBytes += requireJPEG(b, o)
		}
		deskObs := func() {
			t0 := time.Now()
			o, err := dm.Observe(ctx, "same", dl.LeaseID)
			deskD = append(deskD, time.Since(t0))
			require.NoError(b, err)
			deskBytes += requireJPEG(b, o)
		}
		if i%2 == 0 {
			botdObs()
			deskObs()
		} else {
			deskObs()
			botdObs()
		}
	}

	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	b.Run("botd", func(b *testing.B) {
		b.ReportMetric(ms(pct(botdD, 50)), "p50_ms")
		b.ReportMetric(ms(pct(botdD, 90)), "p90_ms")
		b.ReportMetric(float64(botdBytes)/float64(len(botdD))/1024, "jpeg_kB")
	})
	b.Run("desktop-machine", func(b *testing.B) {
		b.ReportMetric(ms(pct(deskD, 50)), "p50_ms")
		b.ReportMetric(ms(pct(deskD, 90)), "p90_ms")
		b.ReportMetric(float64(deskBytes)/float64(len(deskD))/1024, "jpeg_kB")
		b.ReportMetric(float64(pct(deskD, 50))/float64(pct(botdD, 50)), "x-botd-p50")
	})

	// Then the same desktop machine with its held stream (issue 31), on
	// the same display, x11vnc and websockify (the command machine's,
	// still running): observe and a click round trip (its observation
	// after the settle included) beside botd's, interleaved. A click
	// moves the pointer through the clicking machine only, so each
	// machine's observation draws the pointer it knows; the held
	// observation after botd's click therefore follows the held
	// machine's own click (a refresh, then the JPEG).
	require.NoError(b, dm.Close())
	hm, err := desktop.New(desktop.Options{Backend: be, User: "desktop", Home: "/home/desktop",
		RFBPortBase: 15900, ViewPortBase: containerViewBase + 2, HeldStream: true})
	require.NoError(b, err)
	b.Cleanup(func() { hm.Close() })
	for _, id := range []string{"pad", "same"} {
		_, err := hm.StartScreen(ctx, id)
		require.NoError(b, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, why := hm.StreamState("same")
		if st == "live" {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the held stream never went live: %q (%s)", st, why)
		}
	}
	var botdObs2, heldObs, botdClick, heldClick []time.Duration
	f0, in0 := hm.HeldCounts()
	for i := 0; i < benchSamples; i++ {
		require.NoError(b, bm.ReleaseLease(ctx, "bench", bl.LeaseID))
		bl, err = bm.AcquireLease(ctx, "bench", "agent", fmt.Sprintf("bench-h%d", i), 10*time.Minute)
		require.NoError(b, err)
		hl, err := hm.AcquireLease(ctx, "same", desktop.KindAgent, fmt.Sprintf("bench-h%d", i), 10*time.Minute)
		require.NoError(b, err)
		x, y := 200+10*(i%40), 300+5*(i%20)
		click := []shared.Action{{Type: shared.ActionClick, X: &x, Y: &y}}
		botdRound := func() {
			t0 := time.Now()
			o, err := bm.Observe(ctx, "bench", bl.LeaseID)
			botdObs2 = append(botdObs2, time.Since(t0))
			require.NoError(b, err)
			requireJPEG(b, o)
			t0 = time.Now()
			_, err = bm.Act(ctx, "bench", bl.LeaseID, click)
			botdClick = append(botdClick, time.Since(t0))
			require.NoError(b, err)
		}
		heldRound := func() {
			t0 := time.Now()
			o, err := hm.Observe(ctx, "same", hl.LeaseID)
			heldObs = append(heldObs, time.Since(t0))
			require.NoError(b, err)
			requireJPEG(b, o)
			t0 = time.Now()
			res, err := hm.Act(ctx, "same", hl.LeaseID, click)
			heldClick = append(heldClick, time.Since(t0))
			require.NoError(b, err)
			require.Equal(b, shared.Point{X: x, Y: y}, res.Observation.Pointer)
		}
		if i%2 == 0 {
			botdRound()
			heldRound()
		} else {
			heldRound()
			botdRound()
		}
		require.NoError(b, hm.ReleaseLease(ctx, "same", hl.LeaseID))
	}
	f1, in1 := hm.HeldCounts()
	require.Equal(b, int64(2*benchSamples), f1-f0, "every held observation came from the stream")
	require.Equal(b, int64(benchSamples), in1-in0, "every held click went through the stream")
	b.Run("botd-again", func(b *testing.B) {
		b.ReportMetric(ms(pct(botdObs2, 50)), "observe_p50_ms")
		b.ReportMetric(ms(pct(botdObs2, 90)), "observe_p90_ms")
		b.ReportMetric(ms(pct(botdClick, 50)), "click_p50_ms")
		b.ReportMetric(ms(pct(botdClick, 90)), "click_p90_ms")
	})
	b.Run("held-stream", func(b *testing.B) {
		b.ReportMetric(ms(pct(heldObs, 50)), "observe_p50_ms")
		b.ReportMetric(ms(pct(heldObs, 90)), "observe_p90_ms")
		b.ReportMetric(ms(pct(heldClick, 50)), "click_p50_ms")
		b.ReportMetric(ms(pct(heldClick, 90)), "click_p90_ms")
		b.ReportMetric(float64(pct(heldObs, 50))/float64(pct(botdObs2, 50)), "x-botd-observe-p50")
		b.ReportMetric(ms(pct(heldClick, 50)-pct(botdClick, 50)), "click_p50_minus_botd_ms")
	})
}

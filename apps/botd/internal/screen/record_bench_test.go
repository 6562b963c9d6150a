package screen

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// recBenchWindow is how long each figure records.
const recBenchWindow = 20 * time.Second

// clockTicks is the kernel's USER_HZ (100 on Linux everywhere).
const clockTicks = 100

// cpuSeconds is a process's user+sys time so far, from /proc.
func cpuSeconds(tb testing.TB, pid int) float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14 and stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, err := strconv.ParseFloat(f[11], 64)
	require.NoError(tb, err)
	st, err := strconv.ParseFloat(f[12], 64)
	require.NoError(tb, err)
	return (ut + st) / clockTicks
}

// countWriter counts what ffmpeg writes.
type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// BenchmarkRecording: what recording one screen costs while it changes,
// for the codec botd uses (H.264, libx264 ultrafast, through the real
// recording path) and VP9 (libvpx-vp9 realtime, cpu-used 8, row-mt) beside
// it, at botd's default 8 fps, on two scenes: "terminal" (top refreshing
// twice a second in a terminal: an agent's everyday screen) and "noise"
// (the whole screen new noise 15 times a second: the worst case). Figures:
// ffmpeg's user+sys CPU seconds per wall second (cpu/s: 1.0 is one core),
// and the file's megabytes per minute.
func BenchmarkRecording(b *testing.B) {
	e := newRecIT(b, recDisplayBase+6)
	ctx := testenv.Context(b, 10*time.Minute)
	_, err := e.m.Register("bench")
	require.NoError(b, err)
	_, err = e.m.Ensure(ctx, "bench")
	require.NoError(b, err)
	ps := e.procs(b, "bench")
	scene := func(name string) func() {
		var argv []string
		switch name {
		case "terminal":
			argv = []string{"xfce4-terminal", "--disable-server", "--geometry=160x48+0+0", "-x", "top", "-d", "0.5"}
		case "noise":
			argv = []string{"ffplay", "-loglevel", "error", "-noborder", "-left", "0", "-top", "0",
				"-x", strconv.Itoa(Width), "-y", strconv.Itoa(Height), "-f", "lavfi", "-i", "nullsrc=s=320x200:r=15,geq=random(1)*255:128:128"}
		}
		pid, err := ps.launch(ctx, name, argv)
		require.NoError(b, err)
		require.NotZero(b, pid)
		time.Sleep(2 * time.Second) // let it draw before the window opens
		return func() {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(time.Second)
		}
	}
	report := func(b *testing.B, cpu, wall float64, bytes int64) {
		b.ReportMetric(cpu/wall, "cpu/s")
		b.ReportMetric(float64(bytes)/(1<<20)/wall*60, "MB/min")
		b.Logf("%.2f CPU-s over %.1f s, %d bytes", cpu, wall, bytes)
	}
	h264 := func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			rec, err := e.m.StartRecording(ctx, "bench", shared.RecordingStart{})
			require.NoError(b, err)
			rc := e.m.rec()
			rc.mu.Lock()
			r := rc.recs[rec.ID]
			rc.mu.Unlock()
			time.Sleep(time.Second) // the window opens on a started encoder
			c0, t0 := cpuSeconds(b, r.proc.Pid()), time.Now()
			time.Sleep(recBenchWindow)
			c1, wall := cpuSeconds(b, r.proc.Pid()), time.Since(t0).Seconds()
			got, err := e.m.StopRecording(ctx, "bench", rec.ID)
			require.NoError(b, err)
			report(b, c1-c0, wall, int64(float64(got.Bytes)*wall/got.Seconds))
		}
	}
	vp9 := func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e.m.mu.Lock()
			slot := e.m.screens["bench"].slot
			e.m.mu.Unlock()
			u := e.m.o.Desktop
			out := &countWriter{}
			p, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin",
				"-f", "x11grab", "-draw_mouse", "1", "-framerate", strconv.Itoa(shared.RecordingDefaultFPS),
				"-video_size", fmt.Sprintf("%dx%d", Width, Height), "-i", ":" + strconv.Itoa(e.m.display(slot)),
				"-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1", "-b:v", "0", "-crf", "40",
				"-g", strconv.Itoa(shared.RecordingDefaultFPS), "-threads", "1", "-f", "webm", "pipe:1"},
				User: &u, Env: (&procBackend{m: e.m}).env(slot, ps.runDir), Dir: e.m.DesktopHome(), Stdout: out})
			require.NoError(b, err)
			time.Sleep(time.Second) // as the H.264 window: from a started encoder
			c0, n0, t0 := cpuSeconds(b, p.Pid()), out.n.Load(), time.Now()
			time.Sleep(recBenchWindow)
			c1, n1, wall := cpuSeconds(b, p.Pid()), out.n.Load(), time.Since(t0).Seconds()
			_ = p.SignalGroup(syscall.SIGINT)
			_, _ = p.Wait()
			report(b, c1-c0, wall, n1-n0)
		}
	}
	for _, sc := range []string{"terminal", "noise"} {
		stop := scene(sc)
		b.Run("h264/"+sc, h264)
		b.Run("vp9/"+sc, vp9)
		stop()
	}
}

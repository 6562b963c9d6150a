package providers

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
)

// BenchmarkProviders measures, per provider: provision → first successful
// observe (p50 of 3), destroy (p50 of 3), stop → start → observe, and the
// memory of one idle computer (PSS of every process of the machine, right
// after it answers and before any screen; and with one screen running).
func BenchmarkProviders(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		l := testLocal(b)
		benchProvider(b, l, func(ref string) int { return l.PID(ref) })
	})
	b.Run("single-screen", func(b *testing.B) {
		l := testLocal(b)
		s, err := NewSingleScreen(l, filepath.Join(tmpRoot, "bench-single"))
		require.NoError(b, err)
		benchProvider(b, s, func(ref string) int { return l.PID(ref) })
	})
	b.Run("docker", func(b *testing.B) {
		d := testDockerB(b)
		benchProvider(b, d, func(ref string) int {
			c, err := d.cli.ContainerInspect(context.Background(), ref, dockerclient.ContainerInspectOptions{})
			require.NoError(b, err)
			return c.Container.State.Pid
		})
	})
}

func testDockerB(b *testing.B) *Docker {
	if os.Geteuid() != 0 {
		unavailable(b, "needs root")
	}
	d, err := NewDocker(DockerOptions{Image: testImage(), DataDir: filepath.Join(tmpRoot, "docker-bench"), ReadyTimeout: 4 * time.Minute})
	require.NoError(b, err)
	b.Cleanup(func() { d.Close() })
	ctx := testCtx(b, 30*time.Second)
	if err := d.Ping(ctx); err != nil {
		unavailable(b, "no Docker engine answers: %v", err)
	}
	if _, err := d.cli.ImageInspect(ctx, d.o.Image); err != nil {
		unavailable(b, "image %s missing (make image)", d.o.Image)
	}
	return d
}

func benchProvider(b *testing.B, p Provider, pid func(ref string) int) {
	ctx := testCtx(b, 30*time.Minute)
	for i := 0; i < b.N; i++ {
		var firstObserve, destroy []time.Duration
		var idlePSS, screenPSS float64
		var ref string
		var spec Spec
		for n := 0; n < 3; n++ {
			spec = Spec{ComputerID: "bench-" + strconv.Itoa(n), BotdToken: testToken()}
			start := time.Now()
			r, err := p.Provision(ctx, spec)
			require.NoError(b, err)
			m, err := p.Reconnect(ctx, r, spec)
			require.NoError(b, err)
			ready := time.Since(start)
			if n == 0 { // not part of the figure
				idlePSS = treePSS(pid(r))
			}
			obsStart := time.Now()
			require.NoError(b, m.CheckScreen(ctx, "bench"))
			o, err := m.Observe(ctx, "bench", benchLease(b, ctx, m, "bench"))
			require.NoError(b, err)
			require.NotEmpty(b, o.Image)
			firstObserve = append(firstObserve, ready+time.Since(obsStart))
			if n == 0 {
				screenPSS = treePSS(pid(r))
			}
			if n < 2 {
				t0 := time.Now()
				require.NoError(b, p.Destroy(ctx, r))
				destroy = append(destroy, time.Since(t0))
			} else {
				ref = r
			}
		}
		// stop → start → observe on the third machine, then its destroy.
		t0 := time.Now()
		require.NoError(b, p.Stop(ctx, ref))
		m, err := p.Reconnect(ctx, ref, spec)
		require.NoError(b, err)
		o, err := m.Observe(ctx, "bench", benchLease(b, ctx, m, "bench"))
		require.NoError(b, err)
		require.NotEmpty(b, o.Image)
		restart := time.Since(t0)
		t0 = time.Now()
		require.NoError(b, p.Destroy(ctx, ref))
		destroy = append(destroy, time.Since(t0))

		b.ReportMetric(p50(firstObserve).Seconds(), "provision_to_observe_p50_s")
		b.ReportMetric(restart.Seconds(), "stop_start_observe_s")
		b.ReportMetric(p50(destroy).Seconds(), "destroy_p50_s")
		b.ReportMetric(idlePSS, "idle_pss_MB")
		b.ReportMetric(screenPSS, "one_screen_pss_MB")
	}
}

func benchLease(b *testing.B, ctx context.Context, m Machine, screen string) string {
	_, err := m.StartScreen(ctx, screen)
	require.NoError(b, err)
	l, err := m.AcquireLease(ctx, screen, "agent", "bench", time.Minute)
	require.NoError(b, err)
	return l.LeaseID
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// treePSS is the summed PSS (MB) of pid and every descendant.
func treePSS(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], n)
		}
	}
	var kb float64
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		f, err := os.Open("/proc/" + strconv.Itoa(p) + "/smaps_rollup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				kb += n
				break
			}
		}
		f.Close()
	}
	return kb / 1024
}

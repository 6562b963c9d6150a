package e2b

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/pkg/shared"
)

// BenchmarkE2BDesktopHeldObserve: on one E2B desktop sandbox (the
// emulator, every exchange through the spec Checker), the desktop machine
// by commands (envd: scrot and xdotool, the JPEG back through the process
// stream) beside the same machine with its held stream (the screen's
// x11vnc through the sandbox's port routing): observe and a click round
// trip (settle included), p50/p90, samples alternating, each under a fresh
// lease. The held machine's counts show every sample went through its
// stream.
func BenchmarkE2BDesktopHeldObserve(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	p, ref := desktopSandbox(ctx, b, "e2b-held", 1)
	cmdM, err := p.ReconnectDesktop(ctx, ref)
	require.NoError(b, err)
	r, err := ParseRef(ref)
	require.NoError(b, err)
	sb, _, err := p.api.connect(ctx, r.SandboxID, p.o.Timeout)
	require.NoError(b, err)
	sess, err := p.session(sb)
	require.NoError(b, err)
	heldM, err := desktop.New(desktop.Options{Backend: &envdBackend{s: sess, user: desktopUser, screens: 1},
		User: desktopUser, Width: desktopWidth, Height: desktopHeight, MaxScreens: 1, HeldStream: true})
	require.NoError(b, err)
	defer heldM.Close()
	for _, m := range []*desktop.Machine{cmdM, heldM} {
		_, err := m.StartScreen(ctx, "a")
		require.NoError(b, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, why := heldM.StreamState("a")
		if st == "live" {
			break
		}
		require.True(b, time.Now().Before(deadline), "the held stream goes live: %s (%s)", st, why)
	}

	type series struct{ observe, click []time.Duration }
	var cmd, held series
	sample := func(m *desktop.Machine, s *series, i int) {
		l, err := m.AcquireLease(ctx, "a", desktop.KindAgent, fmt.Sprintf("bench-%d", i), time.Minute)
		require.NoError(b, err)
		defer func() { require.NoError(b, m.ReleaseLease(ctx, "a", l.LeaseID)) }()
		t0 := time.Now()
		o, err := m.Observe(ctx, "a", l.LeaseID)
		s.observe = append(s.observe, time.Since(t0))
		require.NoError(b, err)
		require.NotEmpty(b, o.Image)
		x, y := 200+10*(i%40), 300+5*(i%20)
		t0 = time.Now()
		res, err := m.Act(ctx, "a", l.LeaseID, []shared.Action{{Type: shared.ActionClick, X: &x, Y: &y}})
		s.click = append(s.click, time.Since(t0))
		require.NoError(b, err)
		require.Equal(b, shared.Point{X: x, Y: y}, res.Observation.Pointer)
	}
	const samples = 20
	f0, i0 := heldM.HeldCounts()
	for i := 0; i < samples; i++ {
		if i%2 == 0 {
			sample(cmdM, &cmd, i)
			sample(heldM, &held, i)
		} else {
			sample(heldM, &held, i)
			sample(cmdM, &cmd, i)
		}
	}
	f1, i1 := heldM.HeldCounts()
	require.Equal(b, int64(2*samples), f1-f0, "every held observation (and each click's) came from the stream")
	require.Equal(b, int64(samples), i1-i0, "every held click went through the stream")
	if c, _ := cmdM.HeldCounts(); c != 0 {
		b.Fatalf("the command machine took %d frames from a stream", c)
	}
	pct := func(d []time.Duration, q int) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[min(len(s)-1, len(s)*q/100)]
	}
	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	for _, x := range []struct {
		name string
		s    series
	}{{"command", cmd}, {"held-stream", held}} {
		b.Run(x.name, func(b *testing.B) {
			b.ReportMetric(ms(pct(x.s.observe, 50)), "observe_p50_ms")
			b.ReportMetric(ms(pct(x.s.observe, 90)), "observe_p90_ms")
			b.ReportMetric(ms(pct(x.s.click, 50)), "click_p50_ms")
			b.ReportMetric(ms(pct(x.s.click, 90)), "click_p90_ms")
		})
	}
}

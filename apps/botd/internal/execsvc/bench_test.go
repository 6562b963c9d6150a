package execsvc_test

import (
	"slices"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/execsvc"
)

// BenchmarkExecTrue is the /exec round trip for ["true"] over HTTP with
// auth, as bot: ns/op is the mean; p50_ms, and p99_ms from 200 runs on
// (max_ms below that), are reported too.
func BenchmarkExecTrue(b *testing.B) {
	fx := newFixture(b, execsvc.Options{})
	req := execsvc.Request{Argv: []string{"true"}}
	fx.run(b, req) // warm up
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		res := fx.run(b, req)
		durs = append(durs, time.Since(start))
		if res.ExitCode != 0 {
			b.Fatalf("exit %d", res.ExitCode)
		}
	}
	b.StopTimer()
	slices.Sort(durs)
	ms := func(q float64) float64 {
		return float64(durs[int(q*float64(len(durs)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(ms(0.50), "p50_ms")
	if len(durs) >= 200 {
		b.ReportMetric(ms(0.99), "p99_ms")
	} else {
		b.ReportMetric(ms(1), "max_ms")
	}
}

func TestCloseKillsRunningCommands(t *testing.T) {
	fx := newFixture(t, execsvc.Options{})
	done := make(chan execsvc.Result, 1)
	go func() { done <- fx.run(t, execsvc.Request{Argv: []string{"sleep", "100"}}) }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	fx.svc.Close()
	res := <-done
	if res.ExitCode != -1 || time.Since(start) > 3*time.Second {
		t.Fatalf("Close left the command running: %+v", res)
	}
	fx.svc.Close() // twice is fine
}

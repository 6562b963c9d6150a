package store

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkStore: ops/s of the two hot writes, per engine: a lease
// acquire+release pair (two CAS updates) and one fenced run-event append.
func BenchmarkStore(b *testing.B) {
	for _, e := range engines(b) {
		b.Run(e.name+"/lease_acquire_release", func(b *testing.B) {
			s := e.open(b)
			ctx := b.Context()
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				l, err := s.AcquireLease(ctx, "bench", fmt.Sprintf("h%d", i), time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.ReleaseLease(ctx, "bench", l.Epoch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
		})
		b.Run(e.name+"/event_append", func(b *testing.B) {
			s := e.open(b)
			ctx := b.Context()
			if err := s.CreateComputer(ctx, computer("c1")); err != nil {
				b.Fatal(err)
			}
			l, err := s.AcquireLease(ctx, "k", "r1", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.CreateRun(ctx, Run{ID: "r1", ComputerID: "c1", BotID: "a", LeaseKey: "k", Epoch: l.Epoch, State: RunRunning}); err != nil {
				b.Fatal(err)
			}
			data := []byte(`{"callId":"call_1","tool":"shell","arguments":{"argv":["true"]}}`)
			start := time.Now()
			for b.Loop() {
				if _, err := s.AppendEvent(ctx, "r1", l.Epoch, "tool_call", data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
		})
	}
}

package main

import (
	"context"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkTakeoverFirstFrame: a person's takeover end to end through the
// worker on an idle bot of a real botd: POST …/takeover (policy, botd user
// lease, link minted) → the control link dialled through the worker's relay
// (websocket, RFB handshake) → the first full frame; then release. Reports
// the p50 and max of each leg and of the whole, over 10 rounds.
func BenchmarkTakeoverFirstFrame(b *testing.B) {
	c := startComputer(b, "http://127.0.0.1:1", 486, "VIEW_PORT_BASE=23700")
	e := startWorker(b, c, "bench")
	// The screen is up and painted before the first round.
	status, l, _ := takeoverCall(b, e, "POST", "bench", "")
	require.Equal(b, http.StatusOK, status)
	rfb := connectControl(b, l.URL)
	rfb.Close()
	status, _, _ = takeoverCall(b, e, "DELETE", "bench", "")
	require.Equal(b, http.StatusOK, status)

	const n = 10
	var link, frame, total []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for range n {
		t0 := time.Now()
		status, l, _ := takeoverCall(b, e, "POST", "bench", "")
		require.Equal(b, http.StatusOK, status)
		t1 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, _, err := dialRFB(ctx, wsURL(l.URL))
		require.NoError(b, err)
		require.NoError(b, c.handshake())
		_, err = c.fullFrame(30 * time.Second)
		require.NoError(b, err)
		t2 := time.Now()
		cancel()
		c.Close()
		link, frame, total = append(link, ms(t1.Sub(t0))), append(frame, ms(t2.Sub(t1))), append(total, ms(t2.Sub(t0)))
		status, _, _ = takeoverCall(b, e, "DELETE", "bench", "")
		require.Equal(b, http.StatusOK, status)
	}
	p50 := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
	mx := func(v []float64) float64 { sort.Float64s(v); return v[len(v)-1] }
	b.ReportMetric(p50(link), "link_p50_ms")
	b.ReportMetric(p50(frame), "link_to_frame_p50_ms")
	b.ReportMetric(p50(total), "request_to_frame_p50_ms")
	b.ReportMetric(mx(total), "request_to_frame_max_ms")
}

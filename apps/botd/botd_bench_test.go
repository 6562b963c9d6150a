package main

import (
	"context"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

const benchToken = "bench-token-0123456789"

// BenchmarkBotdStartToHealthy: botd start → /health ok:true (Codex ready),
// p50 over 5 starts on the same BOTD_HOME.
func BenchmarkBotdStartToHealthy(b *testing.B) {
	home := tempHome(b)
	var ms []float64
	for range 5 {
		start := time.Now()
		d := startDaemon(b, home, benchToken)
		d.waitHealthy(60 * time.Second)
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		d.stop()
	}
	b.ReportMetric(pct(ms, 50), "p50_ms")
	b.ReportMetric(pct(ms, 100), "max_ms")
}

// BenchmarkBotdIdleRSS: botd's own resident memory once idle (Codex apart).
func BenchmarkBotdIdleRSS(b *testing.B) {
	d := startDaemon(b, tempHome(b), benchToken)
	d.waitHealthy(60 * time.Second)
	time.Sleep(2 * time.Second)
	b.ReportMetric(rssMB(d.cmd.Process.Pid), "botd_rss_MB")
	var codex float64
	for _, p := range descendants(d.cmd.Process.Pid) {
		codex += rssMB(p)
	}
	b.ReportMetric(codex, "codex_rss_MB")
	d.stop()
}

// BenchmarkBotdHealthThroughput: GET /health with 50 concurrent clients.
func BenchmarkBotdHealthThroughput(b *testing.B) {
	d := startDaemon(b, tempHome(b), benchToken)
	d.waitHealthy(60 * time.Second)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var n, fails atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	start := time.Now()
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest("GET", "http://"+d.addr+"/health", nil)
				req.Header.Set("Authorization", "Bearer "+benchToken)
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != 200 {
					fails.Add(1)
					if resp != nil {
						resp.Body.Close()
					}
					continue
				}
				_, _ = resp.Body.Read(make([]byte, 4096))
				resp.Body.Close()
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "req/s")
	b.ReportMetric(float64(fails.Load()), "failed")
	d.stop()
}

func pct(v []float64, p int) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := (len(s) - 1) * p / 100
	return s[i]
}

func rssMB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// BenchmarkAgentConnectToInitialize: dial ws /agent → initialize answered,
// p50 over 10 sequential connections (each gets an app-server of its own,
// so this includes Codex's start).
func BenchmarkAgentConnectToInitialize(b *testing.B) {
	d := startDaemon(b, tempHome(b), benchToken)
	d.waitHealthy(60 * time.Second)
	var ms []float64
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		start := time.Now()
		c, _, err := websocket.Dial(ctx, "ws://"+d.addr+"/agent?token="+d.token, nil)
		if err != nil {
			b.Fatalf("dial: %v", err)
		}
		c.SetReadLimit(1 << 24)
		if _, rpcErr, err := tryInitialize(ctx, c, "bench-"+strconv.Itoa(i)); err != nil || rpcErr != nil {
			b.Fatalf("initialize: %v %v", err, rpcErr)
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		c.Close(websocket.StatusNormalClosure, "")
		cancel()
	}
	b.ReportMetric(pct(ms, 50), "p50_ms")
	b.ReportMetric(pct(ms, 100), "max_ms")
}

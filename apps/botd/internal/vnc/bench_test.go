package vnc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// The figures of issue 8. Each benchmark measures a fixed number of
// samples per run and reports medians, so `-benchtime 1x` (make bench)
// gives stable numbers.

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func minOf(d []time.Duration) time.Duration {
	m := d[0]
	for _, v := range d {
		m = min(m, v)
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchScreen starts one screen and waits until its desktop is drawn.
func benchScreen(b *testing.B, id string) (*itEnv, string) {
	e := newIT(b, 7)
	in := e.start(b, id)
	warm := e.viewerRFB(b, e.mint(b, id, ModeView, "", 60).VNCPath, nil)
	_, err := warm.drawnFrame(30 * time.Second)
	require.NoError(b, err)
	warm.Close()
	_ = in
	sock, ok := e.m.VNCSocket(id)
	require.True(b, ok)
	return e, sock
}

// BenchmarkVNCViewerFirstFrame: from opening a viewer link (websocket dial
// with the link, RFB handshake) to the first full 1280x800 frame received.
func BenchmarkVNCViewerFirstFrame(b *testing.B) {
	e, _ := benchScreen(b, "bff")
	const samples = 20
	for i := 0; i < b.N; i++ {
		var d []time.Duration
		for j := 0; j < samples; j++ {
			link := e.mint(b, "bff", ModeView, "", 60)
			start := time.Now()
			ctx := testenv.Context(b, 30*time.Second)
			ws, _, err := dialWS(ctx, e.wsURL(link.VNCPath), nil)
			require.NoError(b, err)
			c := newRFBOverWS(ctx, ws)
			require.NoError(b, c.handshake())
			_, err = c.fullFrame(10 * time.Second)
			require.NoError(b, err)
			d = append(d, time.Since(start))
			c.Close()
		}
		b.ReportMetric(ms(median(d)), "first-frame-ms")
	}
}

// BenchmarkVNCFrameUpdateLatency: one 64x64 framebuffer update asked for
// and received, straight from x11vnc and through botd's relay
// (websocket + RFB filter), interleaved; added = relay - direct (medians).
// x11vnc answers on its own polling beat (~100 ms), which dominates both;
// the minimums show the relay's cost without it.
func BenchmarkVNCFrameUpdateLatency(b *testing.B) {
	e, vncSock := benchScreen(b, "blat")
	direct, err := newRFBDirect(vncSock)
	require.NoError(b, err)
	defer direct.Close()
	require.NoError(b, direct.handshake())
	relayed := e.viewerRFB(b, e.mint(b, "blat", ModeView, "", 600).VNCPath, nil)
	once := func(c *rfbClient) time.Duration {
		start := time.Now()
		require.NoError(b, c.request(false, 600, 380, 64, 64))
		_, err := c.readUpdate(10 * time.Second)
		require.NoError(b, err)
		return time.Since(start)
	}
	const samples = 100
	for i := 0; i < b.N; i++ {
		var dd, dr []time.Duration
		for j := 0; j < samples; j++ {
			dd = append(dd, once(direct))
			dr = append(dr, once(relayed))
		}
		md, mr := median(dd), median(dr)
		b.ReportMetric(float64(md.Microseconds()), "direct-us")
		b.ReportMetric(float64(mr.Microseconds()), "relay-us")
		b.ReportMetric(float64((mr - md).Microseconds()), "added-us")
		b.ReportMetric(float64((minOf(dr) - minOf(dd)).Microseconds()), "added-min-us")
	}
}

// BenchmarkVNCIdleCPU: x11vnc's CPU on an idle screen with one viewer
// that, like noVNC, asks for the next incremental update whenever one
// arrives; measured from /proc/<pid>/stat over 10 s, in % of one core.
func BenchmarkVNCIdleCPU(b *testing.B) {
	e, vncSock := benchScreen(b, "bcpu")
	pid := x11vncPid(b, vncSock)
	c := e.viewerRFB(b, e.mint(b, "bcpu", ModeView, "", 600).VNCPath, nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.request(true, 0, 0, c.W, c.H)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.readUpdate(500 * time.Millisecond); err == nil {
				_ = c.request(true, 0, 0, c.W, c.H)
			} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				if !strings.Contains(err.Error(), "deadline") {
					return
				}
			}
		}
	}()
	time.Sleep(2 * time.Second) // the first updates after connecting
	const window = 10 * time.Second
	for i := 0; i < b.N; i++ {
		t0 := cpuTicks(b, pid)
		start := time.Now()
		time.Sleep(window)
		t1 := cpuTicks(b, pid)
		secs := float64(t1-t0) / 100 // USER_HZ is 100 on Linux
		b.ReportMetric(100*secs/time.Since(start).Seconds(), "%cpu")
	}
	close(stop)
	<-done
}

// x11vncPid finds the x11vnc serving port.
func x11vncPid(b testing.TB, sock string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "x11vnc" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-unixsock" && args[i+1] == sock {
				pid, _ := strconv.Atoi(filepath.Base(d))
				return pid
			}
		}
	}
	b.Fatalf("no x11vnc on %s", sock)
	return 0
}

// cpuTicks is utime+stime of pid (and its threads), in clock ticks.
func cpuTicks(b testing.TB, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(b, err)
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields after "(comm) ": state=0 … utime=11, stime=12.
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// BenchmarkVNCViewerPageFirstFrame: the viewer link opened in real
// headless Chromium (already running) until noVNC's canvas shows the
// desktop: page, noVNC's modules, RFB over the relay, the first frame
// decoded and drawn.
func BenchmarkVNCViewerPageFirstFrame(b *testing.B) {
	e, _ := benchScreen(b, "bpg")
	h := startHeadless(b)
	ctx := testenv.Context(b, 5*time.Minute)
	// Warm the browser (first-run costs are not the viewer's).
	s := h.open(ctx, b, e.ts.URL+e.mint(b, "bpg", ModeView, "", 60).ViewPath)
	var v float64
	require.Eventually(b, func() bool { return eval(ctx, s, canvasVariance, &v) == nil && v > 10 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(b, h.closeLast(ctx))
	const samples = 5
	for i := 0; i < b.N; i++ {
		var d []time.Duration
		for j := 0; j < samples; j++ {
			link := e.mint(b, "bpg", ModeView, "", 60)
			start := time.Now()
			s := h.open(ctx, b, e.ts.URL+link.ViewPath)
			require.Eventually(b, func() bool { return eval(ctx, s, canvasVariance, &v) == nil && v > 10 }, 30*time.Second, 10*time.Millisecond)
			d = append(d, time.Since(start))
			var marks struct{ Now, Connected, Ready float64 }
			require.NoError(b, eval(ctx, s, `({Now: performance.now(), Connected: window.viewer.connectedAt || 0, Ready: performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd})`, &marks))
			b.Logf("sample %d: %v (in the page: DOM ready %.0f ms, RFB connected %.0f ms, drawn by %.0f ms)", j, d[j].Round(time.Millisecond), marks.Ready, marks.Connected, marks.Now)
			require.NoError(b, h.closeLast(ctx))
		}
		b.ReportMetric(ms(median(d)), "page-first-frame-ms")
	}
}

// Package deskbench is the desktop benchmark the vendor packages share
// (issue 31.6): on ONE sandbox of a vendor's emulator, the command-driven
// desktop machine, the same machine with its held stream, and the vendor's
// own JS SDK taking a screenshot of the same display, samples interleaved;
// then the worker's CPU per idle held stream. Benchmarks only: it fails
// the benchmark (never skips it) when node, npm or the SDK is missing, so
// `make bench` cannot print a table without the SDK's column.
package deskbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/rfb"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/tailbuf"
)

// SDK is a running node script that times a vendor SDK's screenshot call
// on request: it prints {"ready":true} once connected (and warmed up by one
// untimed call), then answers each "shot" line on its stdin with one
// {"ms":…,"bytes":…} line, the SDK call's own time measured in node.
type SDK struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *tailbuf.Buffer
	redact []string
	name   string
}

// StartSDK installs dir's pinned packages when probe (a path under
// node_modules) is missing (npm ci from dir's package-lock.json), runs
// `node script` in dir with env (plus PATH and a fresh HOME) and waits for
// its ready line. redact are strings (the API key) never to appear in what
// is logged of the script's output.
func StartSDK(b *testing.B, ctx context.Context, dir, script, probe string, env, redact []string) *SDK {
	b.Helper()
	dir, err := filepath.Abs(dir)
	if err != nil {
		b.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatalf("deskbench: node missing (bash scripts/provision.sh): the vendor SDK's screenshot figure needs it")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", probe)); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			b.Fatalf("deskbench: npm missing (bash scripts/provision.sh): the vendor SDK's screenshot figure needs it")
		}
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-fund", "--no-audit")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("deskbench: npm ci in %s: %v\n%s", dir, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "node_modules", probe)); err != nil {
			b.Fatalf("deskbench: npm ci in %s did not install %s", dir, probe)
		}
	}
	s := &SDK{stderr: &tailbuf.Buffer{Max: 8 << 10}, redact: redact, name: script}
	s.cmd = exec.CommandContext(ctx, node, script)
	s.cmd.Dir = dir
	s.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir()}, env...)
	s.cmd.Stderr = s.stderr
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	s.out = bufio.NewScanner(stdout)
	if err := s.cmd.Start(); err != nil {
		b.Fatalf("deskbench: start node %s: %v", script, err)
	}
	b.Cleanup(func() { _ = s.Close() })
	var ready struct {
		Ready bool `json:"ready"`
	}
	s.read(b, &ready)
	if !ready.Ready {
		b.Fatalf("deskbench: %s did not say ready", script)
	}
	return s
}

// read decodes the script's next JSON line into v, failing the benchmark
// with the script's (redacted) stderr when it ended or printed garbage.
func (s *SDK) read(b *testing.B, v any) {
	b.Helper()
	for s.out.Scan() {
		line := strings.TrimSpace(s.out.Text())
		if !strings.HasPrefix(line, "{") {
			continue // the SDK's own chatter
		}
		if err := json.Unmarshal([]byte(line), v); err != nil {
			b.Fatalf("deskbench: %s printed %q: %v", s.name, s.clean(line), err)
		}
		return
	}
	_ = s.cmd.Wait()
	b.Fatalf("deskbench: %s ended (%v) before answering; its stderr:\n%s", s.name, s.cmd.ProcessState, s.clean(s.stderr.String()))
}

func (s *SDK) clean(x string) string {
	for _, r := range s.redact {
		if r != "" {
			x = strings.ReplaceAll(x, r, "[redacted]")
		}
	}
	return x
}

// Shot has the script make one SDK screenshot call and returns its time
// (measured in node, around the SDK call alone) and the image's size.
func (s *SDK) Shot(b *testing.B) (time.Duration, int) {
	b.Helper()
	if _, err := io.WriteString(s.in, "shot\n"); err != nil {
		b.Fatalf("deskbench: %s: write: %v", s.name, err)
	}
	var r struct {
		MS    float64 `json:"ms"`
		Bytes int     `json:"bytes"`
	}
	s.read(b, &r)
	if r.Bytes <= 0 {
		b.Fatalf("deskbench: %s answered an empty screenshot", s.name)
	}
	return time.Duration(r.MS * float64(time.Millisecond)), r.Bytes
}

// Close ends the script (its stdin closed: it exits) and waits for it.
func (s *SDK) Close() error {
	if s.in == nil {
		return nil
	}
	_ = s.in.Close()
	s.in = nil
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		return <-done
	}
}

// Pair makes the two machines Run compares on one sandbox: o as given
// with HeldStream off (Cmd) and on (Held), each over its own backend from
// newBackend, closed when the benchmark ends, with screen started.
func Pair(b *testing.B, ctx context.Context, newBackend func() desktop.Backend, o desktop.Options, screen string) (cmd, held *desktop.Machine) {
	b.Helper()
	machine := func(on bool) *desktop.Machine {
		mo := o
		mo.Backend, mo.HeldStream = newBackend(), on
		m, err := desktop.New(mo)
		if err != nil {
			b.Fatalf("deskbench: desktop machine: %v", err)
		}
		b.Cleanup(func() { _ = m.Close() })
		if _, err := m.StartScreen(ctx, screen); err != nil {
			b.Fatalf("deskbench: start screen %s: %v", screen, err)
		}
		return m
	}
	return machine(false), machine(true)
}

// Setup is one sandbox's three contenders: Cmd (the command-driven
// desktop machine) and Held (the same machine with its held stream; its
// screen Screen live) on the same display, and SDK on that display too
// (nil for a vendor without a screenshot SDK: Box).
type Setup struct {
	Cmd, Held *desktop.Machine
	SDK       *SDK
	Screen    string
	// CmdNoViewLink says Cmd has no view-only stream (Box: its one
	// desktop stream takes input), so only Held's view links are timed.
	CmdNoViewLink bool
	// Samples per contender (default 20).
	Samples int
	// IdleWindow is each window of the idle-CPU figure (default 10 s);
	// negative leaves the figure out.
	IdleWindow time.Duration
}

// Run times Samples observations, click round trips (settle included)
// and view links' first frames (dial to the first whole frame) of Cmd and
// of Held, each under a fresh agent lease, and Samples SDK
// screenshots, in rotating order per round; fails unless every held
// observation and click went through the stream and none of Cmd's did.
// Then, the screen idle and the SDK's script ended, it measures this
// process's CPU (getrusage: user+sys; the median of 1 s windows, see
// cpuPct) over IdleWindow with Held's stream live, and over IdleWindow
// after Held is closed (Cmd still open): the difference is the worker's
// CPU per idle held stream. The process holds the emulator and the spec
// checker's proxy too, so their relaying of the stream's bytes is counted
// in: an upper bound. It closes Held.
// Sub-benchmarks report the figures: command and held-stream
// (observe/click p50/p90 ms; held-stream's observe p50 over the SDK's
// screenshot p50 as x_sdk_p50, goal <= 0.1), sdk-screenshot (p50/p90 ms,
// KB) and idle-cpu (idle_cpu_pct_per_stream, goal < 1).
func Run(b *testing.B, ctx context.Context, s Setup) {
	b.Helper()
	if s.Samples <= 0 {
		s.Samples = 20
	}
	if s.IdleWindow == 0 {
		s.IdleWindow = 10 * time.Second
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, why := s.Held.StreamState(s.Screen)
		if st == "live" {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the held stream never went live: %s (%s)", st, why)
		}
	}

	type series struct{ observe, click, link []time.Duration }
	var cmd, held series
	var shots []time.Duration
	shotBytes := 0
	sample := func(m *desktop.Machine, ser *series, i int) {
		l, err := m.AcquireLease(ctx, s.Screen, desktop.KindAgent, fmt.Sprintf("bench-%d", i), time.Minute)
		if err != nil {
			b.Fatalf("lease: %v", err)
		}
		defer func() {
			if err := m.ReleaseLease(ctx, s.Screen, l.LeaseID); err != nil {
				b.Errorf("release: %v", err)
			}
		}()
		t0 := time.Now()
		o, err := m.Observe(ctx, s.Screen, l.LeaseID)
		ser.observe = append(ser.observe, time.Since(t0))
		if err != nil || len(o.Image) == 0 {
			b.Fatalf("observe: %v (%d bytes)", err, len(o.Image))
		}
		x, y := 200+10*(i%40), 300+5*(i%20)
		t0 = time.Now()
		res, err := m.Act(ctx, s.Screen, l.LeaseID, []shared.Action{{Type: shared.ActionClick, X: &x, Y: &y}})
		ser.click = append(ser.click, time.Since(t0))
		if err != nil {
			b.Fatalf("click: %v", err)
		}
		if res.Observation.Pointer != (shared.Point{X: x, Y: y}) {
			b.Fatalf("after a click at %d,%d the pointer is at %v", x, y, res.Observation.Pointer)
		}
		if m == s.Held || !s.CmdNoViewLink {
			ser.link = append(ser.link, firstFrame(b, ctx, m, s.Screen))
		}
	}
	contenders := []func(i int){
		func(i int) { sample(s.Cmd, &cmd, i) },
		func(i int) { sample(s.Held, &held, i) },
	}
	if s.SDK != nil {
		contenders = append(contenders, func(int) {
			d, n := s.SDK.Shot(b)
			shots = append(shots, d)
			shotBytes = n
		})
	}
	f0, i0 := s.Held.HeldCounts()
	for i := 0; i < s.Samples; i++ {
		for k := range contenders {
			contenders[(i+k)%len(contenders)](i)
		}
	}
	f1, i1 := s.Held.HeldCounts()
	if f1-f0 != int64(2*s.Samples) {
		b.Fatalf("%d of %d held observations (and clicks' observations) came from the stream", f1-f0, 2*s.Samples)
	}
	if i1-i0 != int64(s.Samples) {
		b.Fatalf("%d of %d held clicks went through the stream", i1-i0, s.Samples)
	}
	if c, _ := s.Cmd.HeldCounts(); c != 0 {
		b.Fatalf("the command machine took %d frames from a stream", c)
	}
	if s.SDK != nil {
		if err := s.SDK.Close(); err != nil {
			b.Fatalf("the SDK's script: %v\n%s", err, s.SDK.clean(s.SDK.stderr.String()))
		}
	}

	var idlePct, livePct, closedPct float64
	if s.IdleWindow > 0 {
		livePct = cpuPct(s.IdleWindow)
		if st, why := s.Held.StreamState(s.Screen); st != "live" {
			b.Fatalf("the held stream was not live through the idle window: %s (%s)", st, why)
		}
		if f, _ := s.Held.HeldCounts(); f != f1 {
			b.Fatalf("something observed during the idle window (%d frames)", f-f1)
		}
		if err := s.Held.Close(); err != nil {
			b.Fatal(err)
		}
		closedPct = cpuPct(s.IdleWindow)
		idlePct = livePct - closedPct
	} else {
		_ = s.Held.Close()
	}

	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	sdk50 := pct(shots, 50)
	for _, x := range []struct {
		name string
		s    series
	}{{"command", cmd}, {"held-stream", held}} {
		b.Run(x.name, func(b *testing.B) {
			b.ReportMetric(ms(pct(x.s.observe, 50)), "observe_p50_ms")
			b.ReportMetric(ms(pct(x.s.observe, 90)), "observe_p90_ms")
			b.ReportMetric(ms(pct(x.s.click, 50)), "click_p50_ms")
			b.ReportMetric(ms(pct(x.s.click, 90)), "click_p90_ms")
			if s.SDK != nil {
				b.ReportMetric(float64(pct(x.s.observe, 50))/float64(sdk50), "x_sdk_p50")
			}
			if len(x.s.link) > 0 {
				b.ReportMetric(ms(pct(x.s.link, 50)), "view_first_frame_p50_ms")
				b.ReportMetric(ms(pct(x.s.link, 90)), "view_first_frame_p90_ms")
			}
		})
	}
	if s.SDK != nil {
		b.Run("sdk-screenshot", func(b *testing.B) {
			b.ReportMetric(ms(sdk50), "sdk_screenshot_p50_ms")
			b.ReportMetric(ms(pct(shots, 90)), "sdk_screenshot_p90_ms")
			b.ReportMetric(float64(shotBytes)/1024, "KB")
		})
	}
	if s.IdleWindow > 0 {
		b.Run("idle-cpu", func(b *testing.B) {
			b.ReportMetric(idlePct, "idle_cpu_pct_per_stream")
			b.ReportMetric(livePct, "live_cpu_pct")
			b.ReportMetric(closedPct, "closed_cpu_pct")
		})
	}
}

// firstFrame is the time from a view link's dial (the link minted before)
// to its first whole frame: DialVNC, the RFB handshake, and the first
// update applied (the rfb client asks for the whole screen at once).
func firstFrame(b *testing.B, ctx context.Context, m *desktop.Machine, screen string) time.Duration {
	link, err := m.ViewerToken(ctx, screen, "view", "", time.Minute)
	if err != nil {
		b.Fatalf("view link: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t0 := time.Now()
	ws, err := m.DialVNC(dctx, screen, link)
	if err != nil {
		b.Fatalf("dial the view link: %v", err)
	}
	conn := websocket.NetConn(dctx, ws, websocket.MessageBinary)
	defer conn.Close()
	c, err := rfb.Handshake(dctx, conn, rfb.Options{})
	if err != nil {
		b.Fatalf("view link handshake: %v", err)
	}
	defer c.Close()
	for c.Frame().Seq == 0 {
		select {
		case <-c.Changed():
		case <-c.Done():
			b.Fatalf("the view link ended before its first frame: %v", c.Err())
		case <-dctx.Done():
			b.Fatalf("no first frame on the view link within a minute")
		}
	}
	return time.Since(t0)
}

// cpuPct is this process's CPU time (user+sys) as a percentage of one
// core: the median of windows of a second spanning d (at least 3), after
// a collection so that garbage of what came before is not counted. The
// median leaves out what only some windows had (the provider's keep-alive
// call, a timer of the emulator's), in both states alike; a cost of the
// idle stream itself is in every window.
func cpuPct(d time.Duration) float64 {
	runtime.GC()
	time.Sleep(time.Second)
	n := max(3, int(d/time.Second))
	w := make([]float64, n)
	for i := range w {
		c0, t0 := cpuTime(), time.Now()
		time.Sleep(time.Second)
		c1, t1 := cpuTime(), time.Now()
		w[i] = 100 * float64(c1-c0) / float64(t1.Sub(t0))
	}
	sort.Float64s(w)
	return w[n/2]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pct is the q-th percentile of d (nearest rank).
func pct(d []time.Duration, q int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*q/100)]
}

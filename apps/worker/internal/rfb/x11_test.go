package rfb

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// The tests below run a real Xvfb and x11vnc. Under CI=true a missing
// binary fails the test; elsewhere it skips.

func needBins(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed (CI=true)", n)
			}
			t.Skipf("%s not installed", n)
		}
	}
}

// displays hands out X display numbers 1900–1909 within this test binary;
// Xvfb's own lock file keeps other processes off the same one (Xvfb exits
// when the display is taken, and clears a dead server's lock itself).
var displays struct {
	mu   sync.Mutex
	used [10]bool
}

type xserver struct {
	t       *testing.T
	display string
	port    int
	vnc     *exec.Cmd
	vncArgs []string
	vncOut  *lockedBuffer
}

// lockedBuffer collects a child's output for failure messages.
type lockedBuffer struct {
	mu sync.Mutex // mu guards b.
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startX starts Xvfb (1280x800x24, no TCP) and x11vnc on a free localhost
// port with extra x11vnc arguments (default -nopw).
func startX(t *testing.T, vncArgs ...string) *xserver {
	t.Helper()
	needBins(t, "Xvfb", "x11vnc", "xsetroot", "xdotool", "xset", "xmessage")
	x := &xserver{t: t}
	for i := 0; i < 10 && x.display == ""; i++ {
		displays.mu.Lock()
		if displays.used[i] {
			displays.mu.Unlock()
			continue
		}
		displays.used[i] = true
		displays.mu.Unlock()
		n := 1900 + i
		cmd := exec.Command("Xvfb", ":"+strconv.Itoa(n), "-screen", "0", "1280x800x24", "-nolisten", "tcp")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start Xvfb: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		sock := fmt.Sprintf("/tmp/.X11-unix/X%d", n)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				deadline = time.Time{}
				continue
			default:
			}
			if _, err := os.Stat(sock); err == nil {
				if exec.Command("xdpyinfo", "-display", ":"+strconv.Itoa(n)).Run() == nil {
					x.display = ":" + strconv.Itoa(n)
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if x.display == "" {
			cmd.Process.Kill()
			<-exited
			continue
		}
		t.Cleanup(func() {
			// SIGTERM, so Xvfb removes its lock file.
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
			displays.mu.Lock()
			displays.used[i] = false
			displays.mu.Unlock()
		})
	}
	if x.display == "" {
		t.Fatal("no free X display in 1900-1909")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if len(vncArgs) == 0 {
		vncArgs = []string{"-nopw"}
	}
	x.vncArgs = vncArgs
	x.startVNC()
	t.Cleanup(x.stopVNC)
	return x
}

// startVNC starts x11vnc. -noshm: an x11vnc killed with SIGKILL (as
// TestStreamReconnects does) leaves its MIT-SHM segments behind, 42 each,
// and the host's 4096 run out for everyone.
func (x *xserver) startVNC() {
	x.t.Helper()
	args := append([]string{"-display", x.display, "-rfbport", strconv.Itoa(x.port), "-localhost", "-shared", "-forever", "-nocursor", "-noshm"}, x.vncArgs...)
	cmd := exec.Command("x11vnc", args...)
	out := &lockedBuffer{}
	x.vncOut = out
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		x.t.Fatalf("start x11vnc: %v", err)
	}
	x.vnc = cmd
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", x.addr(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("x11vnc not listening on %s: %v\n%s", x.addr(), err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (x *xserver) stopVNC() {
	if x.vnc != nil {
		x.vnc.Process.Kill()
		x.vnc.Wait()
		x.vnc = nil
	}
}

func (x *xserver) addr() string { return "127.0.0.1:" + strconv.Itoa(x.port) }

// run runs an X client on the display and fails the test on error.
func (x *xserver) run(name string, args ...string) string {
	x.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+x.display)
	out, err := cmd.CombinedOutput()
	if err != nil {
		x.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// background starts an X client that lives until the test ends.
func (x *xserver) background(name string, args ...string) {
	x.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+x.display)
	if err := cmd.Start(); err != nil {
		x.t.Fatalf("start %s: %v", name, err)
	}
	x.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

func (x *xserver) connect(t *testing.T, o Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", x.addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Handshake(ctx, conn, o)
	if err != nil {
		t.Fatalf("handshake: %v\nx11vnc:\n%s", err, x.vncOut)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, d, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// solid reports whether every pixel of img is c, and the first that is not.
func solid(img *image.RGBA, c [4]byte) (bool, string) {
	for i := 0; i < len(img.Pix); i += 4 {
		if !bytes.Equal(img.Pix[i:i+4], c[:]) {
			p := i / 4
			return false, fmt.Sprintf("pixel %d,%d is %v, want %v", p%img.Rect.Dx(), p/img.Rect.Dx(), img.Pix[i:i+4], c)
		}
	}
	return true, ""
}

// distinctColours counts the colours in img, up to limit.
func distinctColours(img *image.RGBA, limit int) int {
	seen := map[[4]byte]bool{}
	for i := 0; i < len(img.Pix) && len(seen) < limit; i += 4 {
		seen[[4]byte(img.Pix[i:i+4])] = true
	}
	return len(seen)
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t))
}

// refresh is Refresh with a 5 s deadline: a request no update answers
// fails the test instead of hanging it.
func refresh(t *testing.T, c *Client) Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	f, err := c.Refresh(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	return f
}

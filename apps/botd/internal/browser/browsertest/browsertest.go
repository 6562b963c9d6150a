// Package browsertest is for tests only: it starts a private Xvfb on a free
// display (Displays) with a family-wild Xauthority, makes temporary profile
// directories the desktop user can use, and launches real Chromium on them.
package browsertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/browser"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// X is a private X server for one test.
type X struct {
	Display    string
	XAuthority string
	Dir        string
	Desktop    osuser.User
}

// Require skips (or fails under CI) unless real Chromium can run here.
func Require(t testing.TB) osuser.User {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	// xfwm4 too: real screens run a window manager, and Chromium's windows
	// behave differently without one (CI must not quietly test that).
	testenv.RequireTools(t, "Xvfb", "chromium", "unshare", "xfwm4", "xprop")
	u, err := osuser.Lookup("desktop")
	if err != nil {
		testenv.Unavailable(t, "desktop user: %v", err)
	}
	return u
}

// TempDir is a directory the desktop user can reach (t.TempDir is 0700 root).
func TempDir(t testing.TB, u osuser.User) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "botd-browser-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Displays is the range StartX picks from: each test package that uses this
// helper sets its own (browser 200–209, the default; cookies 210–219), since
// test packages run in parallel. Sharing a number across processes once
// broke a run: an Xvfb exiting in one package unlinked the socket path that
// the new Xvfb of another package on the same number had just bound, so the
// new server lost its socket and xfwm4 could not open the display.
var Displays = [2]int{200, 209}

// StartX starts Xvfb on the first free display in Displays and stops it when
// the test ends.
func StartX(t testing.TB, u osuser.User) *X {
	t.Helper()
	dir := TempDir(t, u)
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	auth := filepath.Join(dir, "Xauthority")
	if err := os.WriteFile(auth, wildEntry(cookie), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(auth, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	for n := Displays[0]; n <= Displays[1]; n++ {
		if _, err := os.Stat("/tmp/.X" + strconv.Itoa(n) + "-lock"); err == nil {
			continue
		}
		p, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"Xvfb", ":" + strconv.Itoa(n), "-screen", "0", "1280x800x24", "-auth", auth, "-nolisten", "tcp"}})
		if err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _, _ = p.Wait(); close(exited) }()
		if waitX(n, p.Pid(), exited) {
			x := &X{Display: ":" + strconv.Itoa(n), XAuthority: auth, Dir: dir, Desktop: u}
			t.Cleanup(func() {
				_ = p.SignalGroup(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(3 * time.Second):
					_ = p.SignalGroup(syscall.SIGKILL)
					<-exited
				}
			})
			x.startWM(t)
			return x
		}
		_ = p.SignalGroup(syscall.SIGKILL)
		<-exited
	}
	t.Fatalf("no free display in %d–%d", Displays[0], Displays[1])
	return nil
}

// startWM runs xfwm4 on the display, so windows are managed (maximized) as
// on a real screen, and waits until it manages the root window. An xfwm4
// that exits before that is started again (twice at most), with its output
// in the log.
func (x *X) startWM(t testing.TB) {
	testenv.RequireTools(t, "xfwm4", "xprop")
	var last string
	for attempt := 1; attempt <= 3; attempt++ {
		out, ok := x.tryWM(t)
		if ok {
			return
		}
		last = out
		t.Logf("xfwm4 exited before it managed %s (attempt %d): %s", x.Display, attempt, out)
	}
	t.Fatalf("xfwm4 would not manage %s: %s", x.Display, last)
}

// tryWM starts xfwm4 once; ok when it manages the display, else its output.
func (x *X) tryWM(t testing.TB) (string, bool) {
	u := x.Desktop
	var log syncBuffer
	p, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"xfwm4", "--compositor=off", "--sm-client-disable"}, User: &u,
		Env: []string{"DISPLAY=" + x.Display, "XAUTHORITY=" + x.XAuthority, "NO_AT_BRIDGE=1"}, Dir: x.Dir, Stdout: &log, Stderr: &log})
	if err != nil {
		t.Fatalf("xfwm4: %v", err)
	}
	done := make(chan struct{})
	go func() { _, _ = p.Wait(); close(done) }()
	// Registered after Xvfb's cleanup, so it runs first.
	t.Cleanup(func() {
		_ = p.SignalGroup(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = p.SignalGroup(syscall.SIGKILL)
			<-done
		}
	})
	// EWMH: the WM announces itself on the root window once it manages it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		cmd := exec.Command("xprop", "-root", "-display", x.Display, "_NET_SUPPORTING_WM_CHECK")
		cmd.Env = []string{"XAUTHORITY=" + x.XAuthority}
		out, _ := cmd.CombinedOutput()
		if strings.Contains(string(out), "window id") {
			return "", true
		}
		select {
		case <-done:
			return log.String(), false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xfwm4 did not manage %s: %s\n%s", x.Display, out, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer a child's output goroutines may share.
type syncBuffer struct {
	mu sync.Mutex // mu guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitX(n, pid int, exited <-chan struct{}) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		c, err := net.Dial("unix", "/tmp/.X11-unix/X"+strconv.Itoa(n))
		if err == nil {
			_ = c.Close()
			// Test packages run in parallel and may race for display n:
			// the server answering must be ours, as its lock file says.
			b, err := os.ReadFile("/tmp/.X" + strconv.Itoa(n) + "-lock")
			owner, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && owner == pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// wildEntry is one Xauthority entry with family Wild (0xffff): it matches
// any host and display, which Xvfb, Xlib and xgb all accept.
func wildEntry(cookie []byte) []byte {
	var b []byte
	put := func(s []byte) {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint16(b, 0xffff)
	put(nil)
	put(nil)
	put([]byte("MIT-MAGIC-COOKIE-1"))
	put(cookie)
	return b
}

// Profile is a fresh profile path under dir (created by the browser).
func (x *X) Profile(name string) string {
	return filepath.Join(x.Dir, "screens", name, "chromium")
}

// Options are browser options for this X server, the desktop user, a
// profile named name, a SOCKS address nothing listens on (so no page can
// leave the machine) and test logging.
func (x *X) Options(t testing.TB, name string) browser.Options {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(x.Dir, "screens"), 0o755); err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	u := x.Desktop
	return browser.Options{
		ID:          name,
		Display:     x.Display,
		XAuthority:  x.XAuthority,
		ProfileDir:  x.Profile(name),
		SocksAddr:   "127.0.0.1:9", // discard: nothing leaves unless a test maps a host
		User:        &u,
		Log:         &log,
		CallTimeout: 20 * time.Second,
	}
}

// Launch starts a browser and closes it when the test ends.
func Launch(t testing.TB, o browser.Options) *browser.Browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := browser.Start(ctx, o)
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Logf("close browser: %v", err)
		}
	})
	return b
}

// Ctx is a context for one test step.
func Ctx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// MapHost is a resolver-rule flag that sends host to a local address, for
// reaching a test server under a real-looking name without DNS or a proxy.
func MapHost(host, addr string) string {
	return fmt.Sprintf("--host-resolver-rules=MAP %s %s , MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", host, addr)
}

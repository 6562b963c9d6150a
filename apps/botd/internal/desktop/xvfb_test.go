package desktop

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// This package's tests own displays :160–:179, so packages that `go test`
// runs in parallel never collide.
const firstTestDisplay, lastTestDisplay = 160, 179

var nextDisplay atomic.Int32

// testX is a private Xvfb started as the desktop user for one test.
type testX struct {
	num     int
	display string
	xauth   string
	dir     string
	user    osuser.User
	proc    runner.Process
	waited  chan struct{}
}

func (x *testX) target() Target {
	u := x.user
	return Target{Display: x.display, XAuthority: x.xauth, User: &u, Width: 1280, Height: 800}
}

// env is what a client of the display needs.
func (x *testX) env() []string {
	return []string{"DISPLAY=" + x.display, "XAUTHORITY=" + x.xauth}
}

func requireX(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	testenv.RequireTools(t, "Xvfb", "xauth")
}

// startX starts Xvfb 1280x800x24 on the next free test display with a
// family-wild cookie file written by xauth as desktop. Readiness comes from
// -displayfd, not from sleeping.
func startX(t testing.TB) *testX {
	t.Helper()
	requireX(t)
	u, err := osuser.Lookup("desktop")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "desktop-x-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	// Round the range (a stopped test's display is free again, so -count=N
	// runs do not run out), skipping any display in use.
	num, span := 0, lastTestDisplay-firstTestDisplay+1
	for tries := 0; num == 0; tries++ {
		if tries == span {
			t.Fatalf("every test display %d..%d is in use", firstTestDisplay, lastTestDisplay)
		}
		n := firstTestDisplay + int(nextDisplay.Add(1)-1)%span
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n)); err == nil {
			continue // someone's Xvfb (or a stale lock Xvfb would refuse)
		}
		num = n
	}
	x := &testX{num: num, display: fmt.Sprintf(":%d", num), xauth: filepath.Join(dir, "xauthority"), dir: dir, user: u, waited: make(chan struct{})}
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	// One family-wild (ffff) entry with empty address and display number.
	line := "ffff 0000  0000  0012 " + hex.EncodeToString([]byte("MIT-MAGIC-COOKIE-1")) + " 0010 " + hex.EncodeToString(cookie) + "\n"
	var out bytes.Buffer
	p, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"xauth", "-q", "-f", x.xauth, "nmerge", "-"}, User: &u, Stdin: strings.NewReader(line), Stdout: &out, Stderr: &out, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := p.Wait(); code != 0 {
		t.Fatalf("xauth: exit %d: %s", code, out.String())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var xlog bytes.Buffer
	x.proc, err = runner.Exec{}.Start(runner.Spec{
		Argv:       []string{"Xvfb", x.display, "-screen", "0", "1280x800x24", "-auth", x.xauth, "-nolisten", "tcp", "-displayfd", "3"},
		User:       &u,
		Dir:        dir,
		Stdout:     &xlog,
		Stderr:     &xlog,
		ExtraFiles: []*os.File{w},
	})
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	go func() { _, _ = x.proc.Wait(); close(x.waited) }()
	t.Cleanup(func() { x.kill() })
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		r.Close()
		if err != nil {
			ready <- fmt.Errorf("Xvfb exited before ready: %v", err)
			return
		}
		if strings.TrimSpace(line) != fmt.Sprint(num) {
			ready <- fmt.Errorf("Xvfb announced display %q", line)
			return
		}
		ready <- nil
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("%v; log: %s", err, xlog.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Xvfb %s not ready in 15s; log: %s", x.display, xlog.String())
	}
	return x
}

// kill stops Xvfb hard and waits for it.
func (x *testX) kill() {
	_ = x.proc.SignalGroup(syscall.SIGKILL)
	select {
	case <-x.waited:
		// A killed Xvfb leaves its lock and socket: clear them, so the
		// display can be used again.
		_ = os.Remove(fmt.Sprintf("/tmp/.X%d-lock", x.num))
		_ = os.Remove(fmt.Sprintf("/tmp/.X11-unix/X%d", x.num))
	case <-time.After(5 * time.Second):
	}
}

// startApp runs argv as desktop on the display and stops it at cleanup.
func (x *testX) startApp(t testing.TB, argv []string, env ...string) runner.Process {
	t.Helper()
	var log bytes.Buffer
	u := x.user
	p, err := runner.Exec{}.Start(runner.Spec{Argv: argv, User: &u, Env: append(x.env(), env...), Dir: x.dir, Stdout: &log, Stderr: &log})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _, _ = p.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = p.SignalGroup(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = p.SignalGroup(syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", argv[0], log.String())
		}
	})
	return p
}

func newDesktop(t testing.TB, x *testX) *Desktop {
	t.Helper()
	d, err := New(x.target(), Options{Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

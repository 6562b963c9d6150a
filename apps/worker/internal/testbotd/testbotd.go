// Package testbotd starts a real botd for the worker's tests (it is imported
// only from _test.go files): built from this tree, with its own BOTD_HOME,
// displays and ports, stopped at the test's end. Like every integration
// test here it skips on a laptop without root or the tools and fails under
// CI=true.
package testbotd

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/testbin"
)

// Options places one botd.
type Options struct {
	// DisplayBase is slot 0's X display; slots use DisplayBase+n.
	DisplayBase int
	// PortBase: view/control ports from PortBase+50 (two per slot).
	PortBase int
	// MaxScreens (default 2).
	MaxScreens int
	// Env is added to botd's environment (e.g. EGRESS_ALLOW for a page on
	// loopback, which egress refuses by default).
	Env []string
}

// Botd is a running botd.
type Botd struct {
	URL, Token, Home string
	Client           *client.Client
	cmd              *exec.Cmd
	logs             *syncBuffer
	done             chan struct{}
}

// Require skips (or, under CI=true, fails) unless root and the tools are here.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, tool := range append([]string{"codex", "Xvfb", "chromium", "x11vnc"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			missing = tool
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s is missing (scripts/provision.sh)", missing)
	}
	t.Skipf("integration test needs %s", missing)
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// bin builds botd once per test process.
func bin() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "testbotd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		buildBin, buildErr = testbin.GoBuild(filepath.Join(dir, "botd"), "github.com/open-bot/computer/apps/botd")
	})
	return buildBin, buildErr
}

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// listenAddr picks botd's API address (a variable for the retry's test).
var listenAddr = FreeAddr

// Start starts a botd with a fresh home and waits until it is healthy. A
// botd that could not bind its kernel-picked port (another process took
// it between FreeAddr and botd's listen, which botd's start-up of seconds
// leaves room for on a busy machine) is started again on new ports, up to
// three times.
func Start(t testing.TB, o Options) *Botd {
	t.Helper()
	Require(t)
	if o.MaxScreens == 0 {
		o.MaxScreens = 2
	}
	b, err := bin()
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		d, exited := start(t, b, o)
		if !exited {
			return d
		}
		logs := d.Logs(40)
		if attempt < 3 && strings.Contains(logs, "address already in use") {
			t.Logf("botd's port was taken before it listened (attempt %d); again on new ports", attempt)
			continue
		}
		t.Fatalf("botd exited:\n%s", logs)
	}
}

// start starts one botd; exited says it ended before it was healthy.
func start(t testing.TB, b string, o Options) (d *Botd, exited bool) {
	t.Helper()
	dir, err := os.MkdirTemp("", "testbotd-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	addr := listenAddr(t)
	d = &Botd{URL: "http://" + addr, Token: "testbotd-token-0123456789", Home: filepath.Join(dir, "home"), logs: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(b)
	d.cmd.Env = append(os.Environ(),
		"BOTD_TOKEN="+d.Token, "BOTD_HOME="+d.Home, "BOTD_LISTEN="+addr,
		"SOCKS_LISTEN="+FreeAddr(t), fmt.Sprintf("DISPLAY_BASE=%d", o.DisplayBase),
		fmt.Sprintf("VIEW_PORT_BASE=%d", o.PortBase+50),
		fmt.Sprintf("MAX_SCREENS=%d", o.MaxScreens),
	)
	d.cmd.Env = append(d.cmd.Env, o.Env...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("botd logs:\n%s", d.Logs(60))
		}
	})
	d.Client = client.New(d.URL, d.Token, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		h, err := d.Client.Health(ctx)
		if err == nil && h.OK {
			return d, false
		}
		select {
		case <-d.done:
			return d, true
		case <-ctx.Done():
			t.Fatalf("botd not healthy: %v\n%s", err, d.Logs(40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends botd (SIGTERM, then SIGKILL after 20 s); safe twice.
func (d *Botd) Stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// Logs returns the last n lines of botd's output.
func (d *Botd) Logs(n int) string {
	s := d.logs.String()
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			lines++
			if lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

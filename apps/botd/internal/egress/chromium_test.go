package egress

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// TestChromiumThroughTunnel loads a page by a name only the agent can
// resolve, in headless Chromium with the flags the browsers use: every name
// goes to the proxy unresolved, and the agent resolves it.
func TestChromiumThroughTunnel(t *testing.T) {
	testenv.RequireTools(t, "chromium")
	if testing.Short() && !testenv.CI() { // CI runs everything, -short or not
		t.Skip("starts Chromium")
	}
	s := newTunnelSetup(t, Options{}, nil)
	ts := helloServer(t)
	_, port := splitPort(t, ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
		// Chromium's own calls home would otherwise queue in the tunnel too.
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-quic", "--no-default-browser-check", "--disable-features=MediaRouter,OptimizationHints",
		"--user-data-dir=" + t.TempDir(),
		"--proxy-server=socks5://" + s.p.Addr().String(),
		"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
		"--dump-dom", fmt.Sprintf("http://only-agent.test:%d/", port),
	}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // root cannot use the sandbox
	}
	out, err := exec.CommandContext(ctx, "chromium", args...).Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("hello from only-agent.test:%d", port); !strings.Contains(string(out), want) {
		t.Fatalf("page %q does not contain %q", out, want)
	}
}

package emulator_test

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator/emutest"
)

// TestSDKNode runs sdktest/sdk.mjs, the vendor's own TypeScript SDK (npm
// @daytonaio/sdk, pinned by sdktest/package-lock.json), against the
// emulator, pointed at it only through the SDK's documented variables. Its
// traffic passes a reverse proxy whose transport is the spec Checker, so
// the SDK's requests and the emulator's answers are held to the published
// spec too. The snapshot is a desktop (the e2b-desktop stand-in: Xvfb :0
// from its entrypoint), so computer use has a display.
func TestSDKNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		emutest.Unavailable(t, "node missing (bash scripts/provision.sh)")
	}
	dir, err := filepath.Abs("sdktest")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@daytonaio", "sdk", "package.json")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			emutest.Unavailable(t, "npm missing (bash scripts/provision.sh)")
		}
		cmd := exec.Command(npm, "ci", "--no-fund", "--no-audit")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			emutest.Unavailable(t, "npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	s := emutest.Start(t, emutest.Options{Snapshots: map[string]emulator.Snapshot{"desktop": emutest.DesktopSnapshot()}, Ports: []int{8080}})
	target, _ := url.Parse(s.URL)
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = pr.In.Host },
		Transport:     s.Checker,
		FlushInterval: -1,
	})
	t.Cleanup(front.Close)
	// Answers name the address the SDK reached (toolboxProxyUrl, preview
	// URLs), so that its later calls pass the Checker too.
	s.Emulator.SetBase(front.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"DAYTONA_API_KEY=" + s.APIKey,
		"DAYTONA_API_URL=" + front.URL,
		"DAYTONA_TARGET=local",
		"SDK_SNAPSHOT=desktop",
	}
	out, err := cmd.CombinedOutput()
	t.Logf("sdk.mjs:\n%s", strings.ReplaceAll(string(out), s.APIKey, "[key]"))
	if err != nil {
		t.Fatalf("the vendor's SDK failed against the emulator: %v", err)
	}
	if !strings.Contains(string(out), "SDK OK") {
		t.Fatalf("sdk.mjs did not finish")
	}
	seen := map[string]int{}
	for _, x := range s.Checker.Seen() {
		seen[strings.Fields(x)[0]]++
	}
	t.Logf("checked %d exchanges of the SDK against the spec: %v", len(s.Checker.Seen()), seen)
	if seen["api"] == 0 || seen["toolbox"] == 0 || seen["toolbox(bulk-upload-body)"] == 0 || seen["toolbox(bulk-download-answer)"] == 0 || seen["preview"] == 0 {
		t.Fatalf("the SDK's traffic did not pass the checker: %v", seen)
	}
}

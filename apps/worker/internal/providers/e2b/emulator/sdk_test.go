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

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/spec"
)

// TestSDKNode runs sdktest/sdk.mjs, the vendor's own JS SDK (npm e2b, pinned
// by sdktest/package-lock.json), against the emulator, pointed at it only
// through the SDK's documented variables. Its traffic passes a reverse proxy
// whose transport is the spec Checker, so the SDK's requests and the
// emulator's answers are held to the published spec too (the two routes the
// SDK uses that the spec does not publish yet are checked as the routes
// they stand for: spec.SDKAliases).
func TestSDKNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		emutest.Unavailable(t, "node missing (bash scripts/provision.sh)")
	}
	dir, err := filepath.Abs("sdktest")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
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
	s := emutest.Start(t, nil, []int{7000})
	s.Checker.Aliases = spec.SDKAliases
	target, _ := url.Parse(s.URL)
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     s.Checker,
		FlushInterval: -1,
	})
	t.Cleanup(front.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"E2B_API_KEY=" + s.APIKey,
		"E2B_API_URL=" + front.URL,
		"E2B_SANDBOX_URL=" + front.URL,
		"E2B_DOMAIN=" + s.Emulator.Domain(),
	}
	out, err := cmd.CombinedOutput()
	t.Logf("sdk.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the vendor's SDK failed against the emulator: %v", err)
	}
	if !strings.Contains(string(out), "SDK OK") {
		t.Fatal("sdk.mjs did not finish")
	}
	seen := map[string]int{}
	for _, x := range s.Checker.Seen() {
		f := strings.Fields(x)
		seen[f[0]+" "+f[1]]++
	}
	t.Logf("checked %d exchanges of the SDK against the spec: %v", len(s.Checker.Seen()), seen)
	if seen["envd-rpc POST"] == 0 || seen["envd GET"] == 0 || seen["control-plane(alias) POST"] == 0 {
		t.Fatalf("the SDK's traffic did not pass the checker: %v", seen)
	}
}

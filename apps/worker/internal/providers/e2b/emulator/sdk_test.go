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

	"github.com/moby/moby/api/types/container"
	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
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
	runSDK(t, "sdk.mjs", "SDK OK", nil, []int{7000})
}

// TestSDKNodeDesktop runs sdktest/desktop.mjs, the vendor's desktop SDK
// (npm @e2b/desktop), against the emulator's `desktop` template (the
// e2b-desktop stand-in image): screenshot, mouse, typing, the stream URL and
// noVNC through port routing.
func TestSDKNodeDesktop(t *testing.T) {
	// E2B's desktop template has noVNC at /opt/noVNC, where the SDK's
	// stream.start runs utils/novnc_proxy; the stand-in image must too.
	if ok, err := imageHas(emutest.DesktopImage(), "/opt/noVNC/utils/novnc_proxy"); err == nil && !ok {
		emutest.Unavailable(t, "%s has no /opt/noVNC/utils/novnc_proxy, which @e2b/desktop's stream.start runs (E2B's desktop template has it; Debian's novnc is at /usr/share/novnc: ln -s /usr/share/novnc /opt/noVNC in images/e2b-desktop/Dockerfile)", emutest.DesktopImage())
	}
	runSDK(t, "desktop.mjs", "DESKTOP SDK OK", map[string]emulator.Template{"desktop": emutest.DesktopTemplate()}, []int{6080})
}

func runSDK(t *testing.T, script, okLine string, templates map[string]emulator.Template, ports []int) {
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
	s := emutest.Start(t, templates, ports)
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
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"E2B_API_KEY=" + s.APIKey,
		"E2B_API_URL=" + front.URL,
		"E2B_SANDBOX_URL=" + front.URL,
		"E2B_DOMAIN=" + s.Emulator.Domain(),
	}
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", script, out)
	if err != nil {
		t.Fatalf("the vendor's SDK failed against the emulator: %v", err)
	}
	if !strings.Contains(string(out), okLine) {
		t.Fatalf("%s did not finish", script)
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

// imageHas tells whether path is executable in image (a throwaway container).
func imageHas(image, path string) (bool, error) {
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cli.ContainerCreate(ctx, dockerclient.ContainerCreateOptions{Config: &container.Config{
		Image: image, Entrypoint: []string{"/bin/sh", "-c", `test -x "$1"`, "sh", path}, Cmd: []string{},
	}})
	if err != nil {
		return false, err
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, dockerclient.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	w := cli.ContainerWait(ctx, c.ID, dockerclient.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := cli.ContainerStart(ctx, c.ID, dockerclient.ContainerStartOptions{}); err != nil {
		return false, err
	}
	select {
	case r := <-w.Result:
		return r.StatusCode == 0, nil
	case err := <-w.Error:
		return false, err
	}
}

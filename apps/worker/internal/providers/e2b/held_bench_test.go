package e2b

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/spec"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit/deskbench"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// BenchmarkE2BDesktopHeldObserve: on one E2B desktop sandbox (the
// emulator; the worker and the SDK alike reach it through the spec
// Checker's proxy), side by side in one run (deskbench.Run): the desktop
// machine by commands (envd: scrot and xdotool, the JPEG back through the
// process stream), the same machine with its held stream (the screen's
// x11vnc through the sandbox's port routing), and the vendor's desktop SDK
// (npm @e2b/desktop, pinned by emulator/sdktest/package-lock.json)
// connected to the same sandbox, timing its own screenshot() call
// (emulator/sdktest/shotbench.mjs): observe and a click round trip
// (settle included) p50/p90, the SDK's screenshot p50/p90, held observe
// over SDK screenshot, and the worker's CPU per idle held stream. A
// missing node, npm or SDK fails the benchmark.
func BenchmarkE2BDesktopHeldObserve(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		emutest.Unavailable(b, "needs root (the Docker engine)")
	}
	srv := emutest.Start(b, map[string]emulator.Template{DesktopTemplate: emutest.DesktopTemplate()}, nil)
	srv.Checker.Aliases = spec.SDKAliases // Sandbox.connect's route
	front := srv.Proxy(b)
	sealer, err := secret.LoadOrCreate(filepath.Join(b.TempDir(), "secret.key"))
	require.NoError(b, err)
	k, err := NewKey(srv.APIKey, sealer)
	require.NoError(b, err)
	p, err := New(Options{APIURL: front, SandboxURL: front, Key: k, Template: DesktopTemplate, MaxScreens: 1,
		ReadyTimeout: 4 * time.Minute, HTTPClient: &http.Client{Timeout: time.Minute}})
	require.NoError(b, err)
	b.Cleanup(p.Close)
	ref, err := p.Provision(ctx, Spec{ComputerID: "e2b-held", BotdToken: strings.Repeat("t", 24)})
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })

	// The provider brings the desktop up; the two machines compared are
	// made here on its session, the same but for HeldStream (whatever the
	// provider's default is).
	_, err = p.ReconnectDesktop(ctx, ref)
	require.NoError(b, err)
	r, err := ParseRef(ref)
	require.NoError(b, err)
	sb, _, err := p.api.connect(ctx, r.SandboxID, p.o.Timeout)
	require.NoError(b, err)
	sess, err := p.session(sb)
	require.NoError(b, err)
	cmdM, heldM := deskbench.Pair(b, ctx, func() desktop.Backend { return &envdBackend{s: sess, user: desktopUser, screens: 1} },
		desktop.Options{User: desktopUser, Width: desktopWidth, Height: desktopHeight, MaxScreens: 1}, "a")
	sdk := deskbench.StartSDK(b, ctx, "emulator/sdktest", "shotbench.mjs", "@e2b/desktop/package.json", []string{
		"E2B_API_KEY=" + srv.APIKey, "E2B_API_URL=" + front, "E2B_SANDBOX_URL=" + front,
		"E2B_DOMAIN=" + srv.Emulator.Domain(), "SHOT_SANDBOX_ID=" + r.SandboxID,
	}, []string{srv.APIKey})
	deskbench.Run(b, ctx, deskbench.Setup{Cmd: cmdM, Held: heldM, SDK: sdk, Screen: "a"})
}

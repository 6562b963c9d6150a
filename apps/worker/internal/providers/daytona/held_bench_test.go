package daytona

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit/deskbench"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// BenchmarkDaytonaDesktopHeldObserve: on one Daytona sandbox of snapshot
// desktop (the emulator; the worker and the SDK alike reach it through the
// spec Checker's proxy, the toolbox and preview URLs included), side by
// side in one run (deskbench.Run): the desktop machine by commands (the
// toolbox's computer-use screenshot and input routes), the same machine
// with its held stream (the screen's x11vnc through the sandbox's preview
// URL), and the vendor's SDK (npm @daytonaio/sdk, pinned by
// emulator/sdktest/package-lock.json) on the same sandbox timing its own
// computerUse.screenshot.takeCompressed() (a JPEG of quality 72 with the
// pointer, as an observation; emulator/sdktest/shotbench.mjs): observe and
// a click round trip (settle included) p50/p90, the SDK's screenshot
// p50/p90, held observe over SDK screenshot, and the worker's CPU per idle
// held stream. A missing node, npm or SDK fails the benchmark.
func BenchmarkDaytonaDesktopHeldObserve(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		emutest.Unavailable(b, "needs root (the Docker engine)")
	}
	env := emutest.Start(b, emutest.Options{Snapshots: map[string]emulator.Snapshot{DesktopSnapshot: emutest.DesktopSnapshot()}})
	front := env.Proxy(b)
	sealer, err := secret.LoadOrCreate(filepath.Join(b.TempDir(), "secret.key"))
	require.NoError(b, err)
	k, err := NewKey(env.APIKey, sealer)
	require.NoError(b, err)
	p, err := New(Options{APIURL: front, Key: k, Snapshot: DesktopSnapshot, AutoStop: DefaultAutoStop,
		ReadyTimeout: 4 * time.Minute, HTTPClient: &http.Client{Timeout: time.Minute}})
	require.NoError(b, err)
	b.Cleanup(p.Close)
	ref, err := p.Provision(ctx, Spec{ComputerID: "daytona-held", BotdToken: testToken()})
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })

	// The provider brings computer use up; the two machines compared are
	// made here on its session, the same but for HeldStream (whatever the
	// provider's default is), with what it asked the toolbox for.
	_, err = p.ReconnectDesktop(ctx, ref)
	require.NoError(b, err)
	r, err := ParseRef(ref)
	require.NoError(b, err)
	p.mu.Lock()
	sess := p.sessions[r.SandboxID]
	p.mu.Unlock()
	require.NotNil(b, sess)
	sb, err := p.api.get(ctx, r.SandboxID)
	require.NoError(b, err)
	var home struct {
		Dir string `json:"dir"`
	}
	require.NoError(b, sess.tb.call(ctx, "user home dir", http.MethodGet, "/user-home-dir", nil, &home))
	var info struct {
		Displays []struct {
			Width  int `json:"width"`
			Height int `json:"height"`
		} `json:"displays"`
	}
	require.NoError(b, sess.tb.call(ctx, "computer-use display info", http.MethodGet, "/computeruse/display/info", nil, &info))
	require.NotEmpty(b, info.Displays)
	cmdM, heldM := deskbench.Pair(b, ctx, func() desktop.Backend { return &toolboxBackend{s: sess, user: sb.User, home: home.Dir, screens: 1} },
		desktop.Options{User: sb.User, Home: home.Dir, Width: info.Displays[0].Width, Height: info.Displays[0].Height, MaxScreens: 1,
			ViewPortBase: desktopViewPortBase, RFBPortBase: desktopRFBPortBase}, "a")
	sdk := deskbench.StartSDK(b, ctx, "emulator/sdktest", "shotbench.mjs", "@daytonaio/sdk/package.json", []string{
		"DAYTONA_API_KEY=" + env.APIKey, "DAYTONA_API_URL=" + front, "DAYTONA_TARGET=local",
		"SHOT_SANDBOX_ID=" + r.SandboxID,
	}, []string{env.APIKey})
	deskbench.Run(b, ctx, deskbench.Setup{Cmd: cmdM, Held: heldM, SDK: sdk, Screen: "a"})
}

package box

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit/deskbench"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// BenchmarkBoxDesktopHeldObserve: on one box of the Box emulator (the
// worker reaches it through the spec Checker's proxy, the desktop page's
// websocket included), side by side in one run (deskbench.Run): the
// desktop machine by commands (Box's command API: scrot and xdotool) and
// the same machine with its held stream (display :0's control x11vnc
// through the box's desktop forwarder): observe and a click round trip
// (settle included) p50/p90, a view link's first frame (the held stream's
// only: without it a box has no view-only stream), and the worker's
// CPU per idle held stream. Box publishes no screenshot SDK: there is no
// SDK column.
func BenchmarkBoxDesktopHeldObserve(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		emutest.Unavailable(b, "needs root (the Docker engine)")
	}
	env := emutest.Start(b)
	front := env.Proxy(b)
	sealer, err := secret.LoadOrCreate(filepath.Join(b.TempDir(), "secret.key"))
	require.NoError(b, err)
	k, err := NewKey(env.APIKey, sealer)
	require.NoError(b, err)
	p, err := New(Options{APIURL: front, Key: k, HTTPClient: &http.Client{Timeout: 2 * time.Minute}})
	require.NoError(b, err)
	b.Cleanup(p.Close)
	ref, err := p.Provision(ctx)
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })

	// The provider brings display :0 up; the two machines compared are
	// made here on its session, the same but for HeldStream.
	_, err = p.Reconnect(ctx, ref)
	require.NoError(b, err)
	id, err := ParseRef(ref)
	require.NoError(b, err)
	p.mu.Lock()
	s := p.sessions[id]
	p.mu.Unlock()
	require.NotNil(b, s)
	cmdM, heldM := deskbench.Pair(b, ctx, func() desktop.Backend { return &cmdBackend{s: s, user: desktopUser} },
		desktop.Options{User: desktopUser, Width: 1280, Height: 800, MaxScreens: 1}, "a")
	deskbench.Run(b, ctx, deskbench.Setup{Cmd: cmdM, Held: heldM, Screen: "a", CmdNoViewLink: true})
}

package vnc

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// viewerRFB opens path and completes the RFB handshake.
func (e *itEnv) viewerRFB(t testing.TB, path string, hdr http.Header) *rfbClient {
	t.Helper()
	return dialRFB(t, e.wsURL(path), hdr)
}

// dialRFB opens url and completes the RFB handshake.
func dialRFB(t testing.TB, url string, hdr http.Header) *rfbClient {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	ws, code, err := dialWS(ctx, url, hdr)
	require.NoError(t, err, "status %d", code)
	c := newRFBOverWS(ctx, ws)
	t.Cleanup(c.Close)
	require.NoError(t, c.handshake())
	return c
}

func TestIntegrationViewNeverMovesPointer(t *testing.T) {
	e := newIT(t, 0)
	in := e.start(t, "vw")
	e.xdotool(t, "vw", "mousemove", "50", "60")
	x, y := e.pointer(t, "vw")
	require.Equal(t, [2]int{50, 60}, [2]int{x, y})

	view := e.mint(t, "vw", ModeView, "", 60)
	c := e.viewerRFB(t, view.VNCPath, nil)
	require.Equal(t, "binary", c.Proto)
	require.Equal(t, [2]int{1280, 800}, [2]int{c.W, c.H})
	rects, err := c.drawnFrame(20 * time.Second)
	require.NoError(t, err)
	if p := os.Getenv("VNC_TEST_PNG"); p != "" {
		framePNG(t, c.W, c.H, rects, p)
	}
	require.Greater(t, variance(rects), 10.0, "the desktop is drawn")

	// Pointer, key and clipboard from a view connection never arrive.
	for i := 0; i < 20; i++ {
		require.NoError(t, c.pointer(1, 400+i, 300+i))
		require.NoError(t, c.pointer(0, 400+i, 300+i))
	}
	require.NoError(t, c.typeText("xyz"))
	// A frame request after them proves the stream is still in step.
	require.NoError(t, c.request(false, 0, 0, 16, 16))
	_, err = c.readUpdate(10 * time.Second)
	require.NoError(t, err)
	x, y = e.pointer(t, "vw")
	require.Equal(t, [2]int{50, 60}, [2]int{x, y}, "a view connection moved the pointer")

	// The same client over the control port with the user lease moves it,
	// so the check above would have seen a move.
	ctl := e.mint(t, "vw", ModeControl, "alice", 60)
	var l struct {
		Kind, Holder string
	}
	require.Equal(t, http.StatusOK, e.callAuth(t, "POST", "/screens/vw/viewer-lease", ctl.Token, nil, &l))
	require.Equal(t, "user", l.Kind)
	require.Equal(t, "alice", l.Holder)
	cc := e.viewerRFB(t, "/screens/vw/vnc?mode=control&token="+ctl.Token, nil)
	require.NoError(t, cc.pointer(0, 321, 123))
	require.NoError(t, cc.request(false, 0, 0, 16, 16))
	_, err = cc.readUpdate(10 * time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { x, y := e.pointer(t, "vw"); return x == 321 && y == 123 }, 5*time.Second, 50*time.Millisecond)

	// And the view link, even now that a user has control, still cannot.
	require.NoError(t, c.pointer(0, 10, 10))
	require.NoError(t, c.request(false, 0, 0, 16, 16))
	_, err = c.readUpdate(10 * time.Second)
	require.NoError(t, err)
	x, y = e.pointer(t, "vw")
	require.Equal(t, [2]int{321, 123}, [2]int{x, y})

	// The screen's own view port serves the same (noVNC's /websockify).
	pc := dialRFB(t, fmt.Sprintf("ws://127.0.0.1:%d/websockify?token=%s", in.Ports.View, view.Token), nil)
	require.NoError(t, pc.pointer(0, 5, 5))
	rects, err = pc.fullFrame(10 * time.Second)
	require.NoError(t, err)
	require.Greater(t, variance(rects), 10.0)
	x, y = e.pointer(t, "vw")
	require.Equal(t, [2]int{321, 123}, [2]int{x, y})
	pcc := dialRFB(t, fmt.Sprintf("ws://127.0.0.1:%d/websockify?token=%s", in.Ports.Control, ctl.Token), nil)
	require.NoError(t, pcc.pointer(0, 222, 111))
	require.Eventually(t, func() bool { x, y := e.pointer(t, "vw"); return x == 222 && y == 111 }, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, 4, e.v.Viewers("vw"))
	info, _ := e.m.Info("vw")
	require.Equal(t, 4, info.Watchers)
}

package vnc

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

func TestIntegrationBadInput(t *testing.T) {
	e := newIT(t, 1)
	in := e.start(t, "bad")
	e.start(t, "other")
	ctx := testenv.Context(t, 2*time.Minute)

	// A viewer that stays connected through all of it.
	keep := e.viewerRFB(t, e.mint(t, "bad", ModeView, "", 600).VNCPath, nil)

	view := e.mint(t, "bad", ModeView, "", 60)
	otherScreen := e.mint(t, "other", ModeView, "", 60)
	ctl := e.mint(t, "bad", ModeControl, "", 60)
	expired, _ := NewSigner(testToken, func() time.Time { return time.Now().Add(-11 * time.Minute) }).Mint("bad", ModeView, "", 10*time.Minute)
	forged, _ := NewSigner("not-the-token-0123456789", nil).Mint("bad", ModeView, "", time.Minute)
	tampered := view.Token[:len(view.Token)-2] + "AA"

	// Every refusal is an HTTP 401 before the upgrade: not one RFB byte.
	for name, url := range map[string]string{
		"no token":          e.wsURL("/screens/bad/vnc?mode=view"),
		"forged":            e.wsURL("/screens/bad/vnc?mode=view&token=" + forged),
		"tampered":          e.wsURL("/screens/bad/vnc?mode=view&token=" + tampered),
		"expired":           e.wsURL("/screens/bad/vnc?mode=view&token=" + expired),
		"other screen":      e.wsURL("/screens/bad/vnc?mode=view&token=" + otherScreen.Token),
		"view as control":   e.wsURL("/screens/bad/vnc?mode=control&token=" + view.Token),
		"control as view":   e.wsURL("/screens/bad/vnc?mode=view&token=" + ctl.Token),
		"wrong bearer":      e.wsURL("/screens/bad/vnc?mode=view&token=" + strings.Repeat("x", 24)),
		"port: no token":    fmt.Sprintf("ws://127.0.0.1:%d/websockify", in.Ports.View),
		"port: forged":      fmt.Sprintf("ws://127.0.0.1:%d/websockify?token=%s", in.Ports.View, forged),
		"port: expired":     fmt.Sprintf("ws://127.0.0.1:%d/websockify?token=%s", in.Ports.View, expired),
		"port: other":       fmt.Sprintf("ws://127.0.0.1:%d/websockify?token=%s", in.Ports.View, otherScreen.Token),
		"port: wrong mode":  fmt.Sprintf("ws://127.0.0.1:%d/websockify?token=%s", in.Ports.Control, view.Token),
		"port: control→vw":  fmt.Sprintf("ws://127.0.0.1:%d/websockify?token=%s", in.Ports.View, ctl.Token),
		"view page forged":  strings.Replace(e.wsURL("/screens/bad/view?token="+forged), "ws", "http", 1),
		"state, other link": strings.Replace(e.wsURL("/screens/bad/viewer-state?token="+otherScreen.Token), "ws", "http", 1),
	} {
		if strings.HasPrefix(url, "http") {
			res, err := http.Get(url)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusUnauthorized, res.StatusCode, name)
			continue
		}
		ws, code, err := dialWS(ctx, url, nil)
		require.Error(t, err, name)
		require.Nil(t, ws)
		require.Equal(t, http.StatusUnauthorized, code, name)
	}
	// Taking control needs a control link of this screen.
	require.Equal(t, http.StatusUnauthorized, e.callAuth(t, "POST", "/screens/bad/viewer-lease", view.Token, nil, nil))
	require.Equal(t, http.StatusUnauthorized, e.callAuth(t, "POST", "/screens/bad/viewer-lease", "", nil, nil))
	require.Nil(t, e.m.Leases().Current("bad"))
	// Minting needs the bearer, and a link never mints.
	require.Equal(t, http.StatusUnauthorized, e.callAuth(t, "POST", "/screens/bad/viewer-token", "Bearer "+view.Token, map[string]any{"mode": "view"}, nil))
	var envl shared.ErrorEnvelope
	require.Equal(t, http.StatusBadRequest, e.call(t, "POST", "/screens/bad/viewer-token", map[string]any{"mode": "view", "ttlSeconds": 601}, &envl))
	require.Equal(t, http.StatusBadRequest, e.call(t, "POST", "/screens/bad/viewer-token", map[string]any{"mode": "admin"}, nil))

	// The bearer token opens /vnc too.
	bc := e.viewerRFB(t, "/screens/bad/vnc?mode=view", http.Header{"Authorization": {"Bearer " + testToken}})
	require.NoError(t, bc.request(false, 0, 0, 8, 8))
	_, err := bc.readUpdate(10 * time.Second)
	require.NoError(t, err)

	// Garbage RFB: that connection is closed; x11vnc and the others go on.
	garbage := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		append([]byte("RFB 003.008\n\x01\x01"), 0x07, 1, 2, 3),
		append([]byte("RFB 003.008\n\x01\x01"), 251, 0, 0x10, 0, 0x10, 0, 1, 0),
	}
	rng := rand.New(rand.NewSource(1))
	noise := make([]byte, 4096)
	rng.Read(noise)
	garbage = append(garbage, append([]byte("RFB 003.008\n\x01\x01"), noise...))
	for i, g := range garbage {
		ws, _, err := dialWS(ctx, e.wsURL(view.VNCPath), nil)
		require.NoError(t, err)
		c := newRFBOverWS(ctx, ws)
		_, _ = c.conn.Write(g)
		code, _, _ := closeStatus(c, 10*time.Second)
		if i == 2 {
			// SetDesktopSize is dropped, not fatal: the stream stays usable.
			require.Equal(t, websocket.StatusCode(-1), code)
		} else {
			require.Equal(t, websocket.StatusPolicyViolation, code, "garbage %d", i)
		}
		c.Close()
	}
	rects, err := keep.drawnFrame(20 * time.Second)
	require.NoError(t, err)
	require.Greater(t, variance(rects), 10.0)
	// x11vnc itself still accepts (botd never let the garbage reach it).
	sock, ok := e.m.VNCSocket("bad")
	require.True(t, ok)
	direct, err := newRFBDirect(sock)
	require.NoError(t, err)
	require.NoError(t, direct.handshake())
	direct.Close()
	after := e.viewerRFB(t, view.VNCPath, nil)
	require.NoError(t, after.request(false, 0, 0, 8, 8))
	_, err = after.readUpdate(10 * time.Second)
	require.NoError(t, err)
	w, h := screenSize(t, e, "bad")
	require.Equal(t, [2]int{1280, 800}, [2]int{w, h}, "the desktop was not resized")

	// Links never reach the log.
	for _, tok := range []string{view.Token, ctl.Token, otherScreen.Token, forged, expired, tampered, testToken} {
		require.NotContains(t, e.log.String(), tok)
	}
}

func screenSize(t *testing.T, e *itEnv, id string) (int, int) {
	out := strings.TrimSpace(e.xdotool(t, id, "getdisplaygeometry"))
	var w, h int
	_, err := fmt.Sscanf(out, "%d %d", &w, &h)
	require.NoError(t, err)
	return w, h
}

func TestIntegrationTwentyViewers(t *testing.T) {
	e := newIT(t, 2)
	e.start(t, "many")
	view := e.mint(t, "many", ModeView, "", 120)
	baseline := runtime.NumGoroutine()
	const n = 20
	clients := make([]*rfbClient, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range clients {
		clients[i] = e.viewerRFB(t, view.VNCPath, nil)
	}
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rects, err := c.drawnFrame(30 * time.Second)
			if err == nil && variance(rects) < 10 {
				err = fmt.Errorf("blank frame")
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d viewers connected and got a full frame in %v", n, time.Since(start))
	require.Equal(t, n, e.v.Viewers("many"))
	in, _ := e.m.Info("many")
	require.Equal(t, n, in.Watchers)
	for _, c := range clients {
		c.Close()
	}
	require.Eventually(t, func() bool { in, _ := e.m.Info("many"); return in.Watchers == 0 && e.v.Viewers("many") == 0 }, 10*time.Second, 50*time.Millisecond)
	// Every relay goroutine (and the clients') is gone.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseline+2 }, 10*time.Second, 50*time.Millisecond,
		"goroutines: %d, baseline %d", runtime.NumGoroutine(), baseline)
}

func TestIntegrationStoppedScreen(t *testing.T) {
	e := newIT(t, 3)
	ctx := testenv.Context(t, 2*time.Minute)
	view := e.mint(t, "sleepy", ModeView, "", 120)

	// A never-started screen: 409, and watching did not start it.
	ws, code, err := dialWS(ctx, e.wsURL(view.VNCPath), nil)
	require.Error(t, err)
	require.Nil(t, ws)
	require.Equal(t, http.StatusConflict, code)
	in, _ := e.m.Info("sleepy")
	require.NotEqual(t, shared.StateRunning, in.State)
	var st ViewerState
	require.Equal(t, http.StatusOK, e.callAuth(t, "GET", "/screens/sleepy/viewer-state", view.Token, nil, &st))
	require.False(t, st.Running)

	// Running: watched while connected; a stop tells the viewer why.
	info := e.start(t, "sleepy")
	c := e.viewerRFB(t, view.VNCPath, nil)
	pc := dialRFB(t, fmt.Sprintf("ws://127.0.0.1:%d/?token=%s", info.Ports.View, view.Token), nil)
	in, _ = e.m.Info("sleepy")
	require.Equal(t, 2, in.Watchers)
	require.Equal(t, http.StatusOK, e.call(t, "POST", "/screens/sleepy/stop", nil, nil))
	for _, cl := range []*rfbClient{c, pc} {
		code, reason, err := closeStatus(cl, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, CodeScreenStopped, code)
		require.Contains(t, reason, "stopped")
	}
	// Its ports are closed and the route answers 409 again.
	_, code, _ = dialWS(ctx, fmt.Sprintf("ws://127.0.0.1:%d/?token=%s", info.Ports.View, view.Token), nil)
	require.Equal(t, 0, code, "the view port is closed")
	_, code, _ = dialWS(ctx, e.wsURL(view.VNCPath), nil)
	require.Equal(t, http.StatusConflict, code)
	require.Eventually(t, func() bool { in, _ := e.m.Info("sleepy"); return in.Watchers == 0 }, 5*time.Second, 20*time.Millisecond)
	in, _ = e.m.Info("sleepy")
	require.Equal(t, shared.StateStopped, in.State)
	_ = context.Background
}

package desktop

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/rfb"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// meanDiff is the mean absolute difference per channel of a and b (same
// size), 0-255.
func meanDiff(t *testing.T, a, b image.Image) float64 {
	t.Helper()
	require.Equal(t, a.Bounds(), b.Bounds())
	var sum, n float64
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			for _, d := range [][2]uint32{{r1, r2}, {g1, g2}, {b1, b2}} {
				v := float64(d[0]>>8) - float64(d[1]>>8)
				if v < 0 {
					v = -v
				}
				sum += v
				n++
			}
		}
	}
	return sum / n
}

// scrot is screen "a"'s screenshot by the command path (display :0).
func scrot(t *testing.T, m *Machine) image.Image {
	t.Helper()
	r, err := m.b.Exec(ctxFor(t, time.Minute), Cmd{Argv: []string{"sh", "-c", captureScript}, User: "user", Env: m.displayEnv(0), MaxOutput: 32 << 20})
	require.NoError(t, err)
	require.Equal(t, 0, r.ExitCode, "%s", r.Stderr)
	img, err := jpeg.Decode(bytes.NewReader(r.Stdout))
	require.NoError(t, err)
	return img
}

// heldMachine is a machine with HeldStream over a fresh sandbox, its
// screen "a" started with its stream live, and an agent lease on it.
func heldMachine(t *testing.T) (*Machine, client.Lease) {
	t.Helper()
	cli, id := sandbox(t, 1)
	// HeldRefresh: these tests check which path an observation takes, not
	// how fast the stream answers (under CI's load a refresh took over the
	// default 2 s, and the observation rightly took the command path).
	m, err := New(Options{Backend: NewDockerBackend(cli, id, 1), HeldStream: true, HeldRefresh: 30 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	ctx := ctxFor(t, 5*time.Minute)
	_, err = m.StartScreen(ctx, "a")
	require.NoError(t, err)
	require.Eventually(t, func() bool { st, _ := m.StreamState("a"); return st == rfb.StateLive }, 60*time.Second, 100*time.Millisecond, "the held stream goes live")
	l, err := m.AcquireLease(ctx, "a", KindAgent, "t", time.Hour)
	require.NoError(t, err)
	return m, l
}

// TestHeldStreamObserve: with HeldStream a screen's observations come from
// the worker's RFB session to its control x11vnc (E2B's desktop stand-in
// in Docker): after a move the frame is the stream's (counted), shows the
// pointer where it went, and matches the screenshot command's frame of the
// same screen (mean difference per channel under 8 of 255, JPEG noise and
// the two pointers' drawings). An act's observation waits for a refresh
// after its settle; a plain observation with no input since the last
// update does not; with the control x11vnc killed the stream
// goes down and observe still answers, through the command path.
func TestHeldStreamObserve(t *testing.T) {
	m, l := heldMachine(t)
	ctx := ctxFor(t, 5*time.Minute)
	// XFCE may still be painting: compare once the screen is still (two
	// screenshots 0.5 s apart the same).
	require.Eventually(t, func() bool {
		a := scrot(t, m)
		time.Sleep(500 * time.Millisecond)
		return meanDiff(t, a, scrot(t, m)) < 0.5
	}, time.Minute, 100*time.Millisecond, "the screen comes to rest")

	for _, p := range []shared.Point{{X: 400, Y: 300}, {X: 901, Y: 77}} {
		before := m.heldFrames.Load()
		res, err := m.Act(ctx, "a", l.LeaseID, []shared.Action{{Type: shared.ActionMove, X: ip(p.X), Y: ip(p.Y)}})
		require.NoError(t, err)
		require.Equal(t, before+1, m.heldFrames.Load(), "the act's observation came from the held stream")
		require.Equal(t, p, res.Observation.Pointer)
		require.Equal(t, 1280, res.Observation.Width)
		require.Equal(t, 800, res.Observation.Height)
		held := decodeObs(t, res.Observation)

		// The command path's frame of the same screen.
		d := meanDiff(t, held, scrot(t, m))
		t.Logf("pointer %v: held-stream frame vs scrot: mean difference %.2f of 255", p, d)
		require.Less(t, d, 8.0, "the held stream's frame is the screen")
	}
	// Each act's observation waited for a refresh after the settle; an
	// observation with no input since the last update reads the
	// framebuffer as it is (the JPEG reused: the same lease is told
	// "unchanged").
	refreshes := m.HeldRefreshes()
	res, err := m.Act(ctx, "a", l.LeaseID, []shared.Action{{Type: shared.ActionMove, X: ip(901), Y: ip(77)}})
	require.NoError(t, err)
	require.Equal(t, refreshes+1, m.HeldRefreshes(), "an act's observation waits for a refresh")
	obs, err := m.Observe(ctx, "a", l.LeaseID)
	require.NoError(t, err)
	require.Equal(t, refreshes+1, m.HeldRefreshes(), "an observation with no input since the last update does not wait")
	require.True(t, obs.Unchanged, "the same screen to the same lease is unchanged")
	require.Equal(t, res.Observation.FrameHash, obs.FrameHash)

	// The stream's x11vnc dies: observe falls back to the command path.
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", `kill -KILL "$(cat "${TMPDIR:-/tmp}/open-bot-desktop/0/vncctl.pid")"`}, User: "user"})
	require.NoError(t, err)
	require.Equal(t, 0, r.ExitCode, "%s", r.Stderr)
	require.Eventually(t, func() bool { st, _ := m.StreamState("a"); return st != rfb.StateLive }, 30*time.Second, 100*time.Millisecond, "the held stream is down")
	before := m.heldFrames.Load()
	obs, err = m.Observe(ctx, "a", l.LeaseID)
	require.NoError(t, err)
	require.Equal(t, before, m.heldFrames.Load(), "no held frame while the stream is down")
	require.Equal(t, shared.Point{X: 901, Y: 77}, obs.Pointer)
	_, lastErr := m.StreamState("a")
	require.NotEmpty(t, lastErr, "the stream says why it is down")
	t.Logf("down: %s", lastErr)

	require.NoError(t, m.ForgetScreen(ctx, "a"))
	st, _ := m.StreamState("a")
	require.Empty(t, st, "a forgotten screen holds no stream")
}

// TestHeldStreamInput: with HeldStream, a click and ASCII text (capitals
// and symbols that need Shift included) go to X as RFB messages through the
// held stream (counted): the command typed into the clicked terminal runs.
// Text with a character RFB input leaves to xdotool (é) is typed by
// xdotool (not counted) and arrives whole; a keypress combo goes through
// the stream.
func TestHeldStreamInput(t *testing.T) {
	m, l := heldMachine(t)
	ctx := ctxFor(t, 5*time.Minute)
	cx, cy := openTerminal(t, m, "a", l.LeaseID)

	readBack := func(name string) string {
		var got []byte
		var err error
		for i := 0; i < 50; i++ {
			got, err = m.ReadFile(ctx, name, 1<<10)
			if err == nil && len(got) > 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		return string(got)
	}
	marker := fmt.Sprintf("Held_Typed-%d:{ok}", time.Now().UnixNano())
	before := m.heldInputs.Load()
	_, err := m.Act(ctx, "a", l.LeaseID, []shared.Action{
		{Type: shared.ActionClick, X: ip(cx), Y: ip(cy)},
		{Type: shared.ActionType, Text: sp("echo '" + marker + "' > /home/user/open-bot-home/held.txt\n")},
	})
	require.NoError(t, err)
	require.Equal(t, before+2, m.heldInputs.Load(), "the click and the text went through the held stream")
	require.Equal(t, fmt.Sprintf("x:%d y:%d", cx, cy), mouse(t, m, ":0"))
	require.Equal(t, marker+"\n", readBack("held.txt"), "the text typed through the stream ran in the clicked terminal")

	// Characters the keymap lacks, each on a keycode xdotool borrows for
	// the key's press: a short borrow drops some (rehearsal 13: "hllo").
	const uni = "héllo wörld ñandú çà €uro"
	before = m.heldInputs.Load()
	_, err = m.Act(ctx, "a", l.LeaseID, []shared.Action{
		{Type: shared.ActionType, Text: sp("echo '" + uni + "' > /home/user/open-bot-home/uni.txt\n")},
	})
	require.NoError(t, err)
	require.Equal(t, before, m.heldInputs.Load(), "text with é is left to xdotool")
	require.Equal(t, uni+"\n", readBack("uni.txt"), "every character typed, none dropped while its keycode was borrowed")

	// A combo through the stream: a line typed, ctrl+u erases it, and the
	// next line alone runs.
	before = m.heldInputs.Load()
	_, err = m.Act(ctx, "a", l.LeaseID, []shared.Action{
		{Type: shared.ActionType, Text: sp("echo wrong > /home/user/open-bot-home/combo.txt")},
		{Type: shared.ActionKeypress, Keys: []string{"ctrl", "u"}},
		{Type: shared.ActionType, Text: sp("echo right > /home/user/open-bot-home/combo.txt")},
		{Type: shared.ActionKeypress, Keys: []string{"Enter"}},
	})
	require.NoError(t, err)
	require.Equal(t, before+4, m.heldInputs.Load())
	require.Equal(t, "right\n", readBack("combo.txt"), "ctrl+u through the stream erased the first line")
}

package desktop

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	dockerclient "github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// The machine answers the backend-neutral contract.
var _ machines.Machine = (*Machine)(nil)

// desktopImage is the stand-in for E2B's stock desktop template
// (scripts/build-e2b-desktop.sh).
func desktopImage() string {
	if v := os.Getenv("DESKTOP_IMAGE"); v != "" {
		return v
	}
	return "open-bot/e2b-desktop:dev"
}

func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sandbox starts a container of the desktop image, its view and control
// ports of `screens` slots published on 127.0.0.1 (engine-chosen host
// ports), and returns a Docker backend over it. It is removed at cleanup.
func sandbox(t testing.TB, screens int) (*dockerclient.Client, string) {
	t.Helper()
	cli, err := dockerclient.New(dockerclient.FromEnv)
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := cli.Ping(ctx, dockerclient.PingOptions{NegotiateAPIVersion: true}); err != nil {
		skipOrFail(t, "no Docker engine answers: %v", err)
	}
	if _, err := cli.ImageInspect(ctx, desktopImage()); err != nil {
		skipOrFail(t, "image %s missing (scripts/build-image.sh builds it): %v", desktopImage(), err)
	}
	exposed, bindings := network.PortSet{}, network.PortMap{}
	for i := 0; i < 2*screens; i++ {
		p := network.MustParsePort(strconv.Itoa(6080+i) + "/tcp")
		exposed[p] = struct{}{}
		bindings[p] = []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1")}}
	}
	r, err := cli.ContainerCreate(ctx, dockerclient.ContainerCreateOptions{
		Config: &container.Config{Image: desktopImage(), ExposedPorts: exposed, Labels: map[string]string{"dev.open-bot.test": "desktopm"}},
		HostConfig: &container.HostConfig{PortBindings: bindings, ShmSize: 512 << 20,
			Tmpfs: map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777"}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), r.ID, dockerclient.ContainerRemoveOptions{Force: true})
	})
	_, err = cli.ContainerStart(ctx, r.ID, dockerclient.ContainerStartOptions{})
	require.NoError(t, err)
	// /home is a volume of the base image, so the stand-in's init makes
	// /home/user the user's at start: until it has run, Docker's WORKDIR
	// leaves it root's and the first mkdir in it fails (seen in CI). A
	// sandbox is ready once the user can write its home.
	b := NewDockerBackend(cli, r.ID, screens)
	require.Eventually(t, func() bool {
		res, err := b.Exec(ctx, Cmd{Argv: []string{"test", "-w", "/home/user"}, User: "user"})
		return err == nil && res.ExitCode == 0
	}, time.Minute, 50*time.Millisecond, "the sandbox's init makes /home/user the user's")
	return cli, r.ID
}

func newMachine(t testing.TB, b Backend) *Machine {
	t.Helper()
	m, err := New(Options{Backend: b})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func decodeObs(t *testing.T, o client.Observation) image.Image {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(o.Image)
	require.NoError(t, err)
	img, err := jpeg.Decode(bytes.NewReader(b))
	require.NoError(t, err, "the observation is a JPEG")
	return img
}

func requireCode(t *testing.T, err error, code shared.Code) {
	t.Helper()
	require.Error(t, err)
	var ce *client.Error
	require.True(t, errors.As(err, &ce), "a *client.Error, got %T: %v", err, err)
	require.Equal(t, code, ce.Code, "%v", err)
}

// waitWindow is the first visible window of class on display :0, looked
// up to tries times 200 ms apart ("" when none showed).
func waitWindow(t *testing.T, b Backend, class string, tries int) string {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	for i := 0; i < tries; i++ {
		r, err := b.Exec(ctx, Cmd{Argv: []string{"xdotool", "search", "--onlyvisible", "--class", class}, User: "user", Env: map[string]string{"DISPLAY": ":0"}})
		require.NoError(t, err)
		if f := strings.Fields(string(r.Stdout)); len(f) > 0 {
			return f[0]
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ""
}

// openTerminal launches a terminal on screen id (display :0) and returns
// the centre of its window once it shows.
func openTerminal(t *testing.T, m *Machine, id, leaseID string) (int, int) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	_, err := m.Launch(ctx, id, leaseID, "terminal")
	require.NoError(t, err)
	win := waitWindow(t, m.b, "xfce4-terminal", 100)
	require.NotEmpty(t, win, "the terminal window appeared")
	// Ready to be typed into: the window manager has given the new window
	// the focus and the terminal's shell runs. On a loaded machine both
	// come a moment after the window shows, and text typed in between went
	// elsewhere (rehearsal 24: the command never ran).
	ready := false
	for i := 0; i < 150 && !ready; i++ {
		r, err := m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", `[ "$(xdotool getactivewindow)" = "$1" ] && pgrep -P "$(xdotool getwindowpid "$1")" >/dev/null`, "sh", win},
			User: "user", Env: map[string]string{"DISPLAY": ":0"}})
		require.NoError(t, err)
		if ready = r.ExitCode == 0; !ready {
			time.Sleep(200 * time.Millisecond)
		}
	}
	require.True(t, ready, "the terminal has the focus and its shell runs")
	g, err := m.b.Exec(ctx, Cmd{Argv: []string{"xdotool", "getwindowgeometry", "--shell", win}, User: "user", Env: map[string]string{"DISPLAY": ":0"}})
	require.NoError(t, err)
	geo := map[string]int{}
	for _, l := range strings.Fields(string(g.Stdout)) {
		k, v, _ := strings.Cut(l, "=")
		geo[k], _ = strconv.Atoi(v)
	}
	return geo["X"] + geo["WIDTH"]/2, geo["Y"] + geo["HEIGHT"]/2
}

func ip(v int) *int       { return &v }
func sp(v string) *string { return &v }
func mouse(t *testing.T, m *Machine, display string) string {
	t.Helper()
	r, err := m.b.Exec(ctxFor(t, 30*time.Second), Cmd{Argv: []string{"xdotool", "getmouselocation"}, User: "user", Env: map[string]string{"DISPLAY": display}})
	require.NoError(t, err)
	require.Equal(t, 0, r.ExitCode, "%s", r.Stderr)
	f := strings.Fields(string(r.Stdout))
	require.GreaterOrEqual(t, len(f), 2)
	return f[0] + " " + f[1]
}

// TestDesktopMachine drives E2B's stock desktop stand-in the way the vendor
// SDK does: commands and files only.
func TestDesktopMachine(t *testing.T) {
	cli, id := sandbox(t, 2)
	b := NewDockerBackend(cli, id, 2)
	m := newMachine(t, b)
	ctx := ctxFor(t, 8*time.Minute)

	// Index 0 is the sandbox's own display :0, started through commands.
	s, err := m.StartScreen(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, client.Screen{ID: "a", Slot: 0, Display: ":0", State: "running"}, s)
	h, err := m.Health(ctx)
	require.NoError(t, err)
	require.True(t, h.OK, "display :0 answers")
	require.Equal(t, shared.StateStopped, h.Agent, "no agent runs on a desktop machine, though the image has codex")

	agent, err := m.AcquireLease(ctx, "a", KindAgent, "run-1", 10*time.Minute)
	require.NoError(t, err)

	t.Run("observe", func(t *testing.T) {
		o, err := m.Observe(ctx, "a", agent.LeaseID)
		require.NoError(t, err)
		require.False(t, o.Unchanged)
		img := decodeObs(t, o)
		require.Equal(t, 1280, o.Width)
		require.Equal(t, 800, o.Height)
		require.Equal(t, image.Rect(0, 0, 1280, 800), img.Bounds())
		if p := os.Getenv("DESKTOP_SHOT"); p != "" {
			raw, _ := base64.StdEncoding.DecodeString(o.Image)
			require.NoError(t, os.WriteFile(p, raw, 0o644))
		}
		// XFCE drew something: the frame is not one flat colour. The
		// session may still be drawing its panel and background when :0
		// first answers (CI saw 8 colours once): frames are taken until
		// it is drawn, for at most a minute.
		drawn := func(img image.Image) int {
			colours := map[[3]uint32]bool{}
			for y := 0; y < 800; y += 20 {
				for x := 0; x < 1280; x += 20 {
					r, g, bb, _ := img.At(x, y).RGBA()
					colours[[3]uint32{r >> 12, g >> 12, bb >> 12}] = true
				}
			}
			return len(colours)
		}
		n := drawn(img)
		for end := time.Now().Add(time.Minute); n <= 8 && time.Now().Before(end); {
			time.Sleep(500 * time.Millisecond)
			o, err := m.Observe(ctx, "a", agent.LeaseID)
			require.NoError(t, err)
			if !o.Unchanged {
				n = drawn(decodeObs(t, o))
			}
		}
		require.Greater(t, n, 8, "the desktop is drawn (panel, background)")
		// The same frame again comes back elided (the panel clock may tick
		// between two frames: a few tries).
		unchanged := false
		for i := 0; i < 5 && !unchanged; i++ {
			o2, err := m.Observe(ctx, "a", agent.LeaseID)
			require.NoError(t, err)
			unchanged = o2.Unchanged
			if unchanged {
				require.Empty(t, o2.Image)
				require.NotEmpty(t, o2.FrameHash)
			}
		}
		require.True(t, unchanged, "an identical frame is returned as unchanged")
	})

	t.Run("act reaches X", func(t *testing.T) {
		r, err := m.Act(ctx, "a", agent.LeaseID, []shared.Action{{Type: shared.ActionMove, X: ip(321), Y: ip(234)}})
		require.NoError(t, err)
		require.Equal(t, shared.Point{X: 321, Y: 234}, r.Observation.Pointer)
		require.Equal(t, "x:321 y:234", mouse(t, m, ":0"))

		// A terminal, clicked and typed into: the text runs as a command.
		cx, cy := openTerminal(t, m, "a", agent.LeaseID)
		marker := fmt.Sprintf("typed-%d", time.Now().UnixNano())
		r, err = m.Act(ctx, "a", agent.LeaseID, []shared.Action{
			{Type: shared.ActionClick, X: ip(cx), Y: ip(cy)},
			{Type: shared.ActionType, Text: sp("echo " + marker + " > /home/user/open-bot-home/typed.txt\n")},
		})
		require.NoError(t, err)
		var results []struct {
			OK bool `json:"ok"`
		}
		require.NoError(t, json.Unmarshal(r.Results, &results))
		require.Len(t, results, 2)
		require.True(t, results[0].OK && results[1].OK, "%s", r.Results)
		require.Equal(t, fmt.Sprintf("x:%d y:%d", cx, cy), mouse(t, m, ":0"))
		var got []byte
		for i := 0; i < 50; i++ {
			got, err = m.ReadFile(ctx, "typed.txt", 1<<10)
			if err == nil && len(got) > 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.Equal(t, marker+"\n", string(got), "the typed command ran in the clicked terminal")
		// Out of the screen: 400 invalid_action, nothing done.
		_, err = m.Act(ctx, "a", agent.LeaseID, []shared.Action{{Type: shared.ActionClick, X: ip(1280), Y: ip(0)}})
		requireCode(t, err, shared.CodeInvalidAction)
	})

	t.Run("second screen on :1", func(t *testing.T) {
		s, err := m.StartScreen(ctx, "b")
		require.NoError(t, err)
		require.Equal(t, client.Screen{ID: "b", Slot: 1, Display: ":1", State: "running"}, s)
		r, err := b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "ps -eo args | grep -E '^(Xvfb :1|x11vnc -display :1|/usr/bin/python3 /usr/bin/websockify|xfce4-session)' | sort"}})
		require.NoError(t, err)
		out := string(r.Stdout)
		require.Contains(t, out, "Xvfb :1 ")
		require.Contains(t, out, "x11vnc -display :1 -rfbport 5902 -localhost -viewonly")
		require.Contains(t, out, "x11vnc -display :1 -rfbport 5903 -localhost -shared")
		require.Contains(t, out, "websockify --web /usr/share/novnc 6082 localhost:5902")
		lb, err := m.AcquireLease(ctx, "b", KindAgent, "run-2", 10*time.Minute)
		require.NoError(t, err)
		o, err := m.Observe(ctx, "b", lb.LeaseID)
		require.NoError(t, err)
		decodeObs(t, o)
		_, err = m.Act(ctx, "b", lb.LeaseID, []shared.Action{{Type: shared.ActionMove, X: ip(77), Y: ip(66)}})
		require.NoError(t, err)
		require.Equal(t, "x:77 y:66", mouse(t, m, ":1"), "screen b's input went to :1")
		require.NotEqual(t, "x:77 y:66", mouse(t, m, ":0"))

		// Its own x11vnc through websockify, reached at the backend's port URL.
		link, err := m.ViewerToken(ctx, "b", "view", "", time.Minute)
		require.NoError(t, err)
		ws, err := m.DialVNC(ctx, "b", link)
		require.NoError(t, err)
		defer ws.CloseNow()
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(msg), "RFB 003."), "the RFB greeting, got %q", msg)
		_, err = m.DialVNC(ctx, "a", link)
		requireCode(t, err, shared.CodeUnauthorized)

		// A third screen on a two-slot sandbox: MULTI_SCREEN_UNAVAILABLE.
		requireCode(t, m.CheckScreen(ctx, "c"), shared.CodeMultiScreen)
		_, err = m.StartScreen(ctx, "c")
		requireCode(t, err, shared.CodeMultiScreen)
	})

	t.Run("single-screen backend", func(t *testing.T) {
		one := newMachine(t, NewDockerBackend(cli, id, 1))
		require.NoError(t, one.CheckScreen(ctx, "x"))
		_, err := one.StartScreen(ctx, "x")
		require.NoError(t, err)
		requireCode(t, one.CheckScreen(ctx, "y"), shared.CodeMultiScreen)
		_, err = one.StartScreen(ctx, "y")
		requireCode(t, err, shared.CodeMultiScreen)
	})

	t.Run("person preempts agent", func(t *testing.T) {
		// An agent's batch in flight when a person takes the screen ends
		// with user_has_control and no frame.
		done := make(chan error, 1)
		var res client.ActResult
		go func() {
			var err error
			res, err = m.Act(ctx, "a", agent.LeaseID, []shared.Action{{Type: shared.ActionWait, Ms: ip(5000)}, {Type: shared.ActionMove, X: ip(5), Y: ip(5)}})
			done <- err
		}()
		time.Sleep(500 * time.Millisecond)
		person, err := m.AcquireLease(ctx, "a", KindUser, "alice", time.Minute)
		require.NoError(t, err)
		err = <-done
		requireCode(t, err, shared.CodeUserHasControl)
		require.Empty(t, res.Observation.Image, "no frame after the person took the screen")
		require.NotEqual(t, "x:5 y:5", mouse(t, m, ":0"), "the batch's later input never ran")

		_, err = m.Observe(ctx, "a", agent.LeaseID)
		requireCode(t, err, shared.CodeUserHasControl)
		_, err = m.AcquireLease(ctx, "a", KindAgent, "run-1", 10*time.Minute)
		requireCode(t, err, shared.CodeUserHasControl)
		o, err := m.Observe(ctx, "a", person.LeaseID)
		require.NoError(t, err, "the person sees the screen")
		decodeObs(t, o)

		// A control link of the person gets the control x11vnc; its stream
		// ends when the person gives the screen back.
		link, err := m.ViewerToken(ctx, "a", "control", "alice", time.Minute)
		require.NoError(t, err)
		ws, err := m.DialVNC(ctx, "a", link)
		require.NoError(t, err)
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(msg), "RFB 003."))
		require.NoError(t, m.ReleaseLease(ctx, "a", person.LeaseID))
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			if _, _, err = ws.Read(rctx); err != nil {
				break
			}
		}
		require.NoError(t, rctx.Err(), "the control stream ended with the lease, not by the deadline: %v", err)
		require.True(t, errors.Is(err, net.ErrClosed) || websocket.CloseStatus(err) == websocket.StatusPolicyViolation, "closed by the machine: %v", err)

		agent2, err := m.AcquireLease(ctx, "a", KindAgent, "run-1", 10*time.Minute)
		require.NoError(t, err, "the screen is free again")
		_, err = m.Observe(ctx, "a", agent2.LeaseID)
		require.NoError(t, err)
		requireCode(t, m.ReleaseLease(ctx, "a", agent.LeaseID), shared.CodeNotFound)
	})

	t.Run("workspace round trip", func(t *testing.T) {
		payload := []byte(fmt.Sprintf("round trip %d\n", time.Now().UnixNano()))
		require.NoError(t, m.WriteFile(ctx, "rt/deep/hello.txt", payload))
		list, err := m.ListFiles(ctx, "rt/deep")
		require.NoError(t, err)
		require.Contains(t, string(list), `"name":"hello.txt","type":"file","size":`+strconv.Itoa(len(payload)))
		rc, err := m.ExportWorkspace(ctx, 0)
		require.NoError(t, err)
		archive, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		names := tarNames(t, bytes.NewReader(archive))
		require.Contains(t, names, "./rt/deep/hello.txt")

		r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"rm", "-r", "rt"}})
		require.NoError(t, err)
		require.Equal(t, 0, r.ExitCode, r.Stderr)
		_, err = m.ReadFile(ctx, "rt/deep/hello.txt", 1<<10)
		requireCode(t, err, shared.CodeNotFound)

		sum, err := m.ImportWorkspace(ctx, bytes.NewReader(archive))
		require.NoError(t, err)
		require.GreaterOrEqual(t, sum.Files, 2, "hello.txt and typed.txt")
		got, err := m.ReadFile(ctx, "rt/deep/hello.txt", 1<<10)
		require.NoError(t, err)
		require.Equal(t, payload, got)
		r, err = m.Exec(ctx, client.ExecRequest{Argv: []string{"stat", "-c", "%U", "rt/deep/hello.txt"}})
		require.NoError(t, err)
		require.Equal(t, "user\n", r.Stdout, "imported as the user")

		// An entry outside the workspace is refused before tar sees it.
		var evil bytes.Buffer
		tw := tar.NewWriter(&evil)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "../escape.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
		_, _ = tw.Write([]byte("x"))
		require.NoError(t, tw.Close())
		_, err = m.ImportWorkspace(ctx, &evil)
		requireCode(t, err, shared.CodeFSSandboxDenied)
		_, err = m.ReadFile(ctx, "rt", 10)
		require.Error(t, err)
	})

	t.Run("exec, events and agent", func(t *testing.T) {
		r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "pwd; id -un; echo $HOME"}})
		require.NoError(t, err)
		require.Equal(t, "/home/user/open-bot-home\nuser\n/home/user/open-bot-home\n", r.Stdout)
		_, err = m.Exec(ctx, client.ExecRequest{Argv: []string{"true"}, Cwd: "/etc"})
		requireCode(t, err, shared.CodeFSSandboxDenied)

		ev, err := m.DialEvents(ctx)
		require.NoError(t, err)
		defer ev.CloseNow()
		l, err := m.AcquireLease(ctx, "b", KindUser, "bob", time.Minute)
		require.NoError(t, err)
		var e struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
		defer ecancel()
		for e.Type != shared.EventPreempted {
			_, msg, err := ev.Read(ectx)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(msg, &e))
		}
		require.Equal(t, "b", e.Data["screen"])
		require.NoError(t, m.ReleaseLease(ctx, "b", l.LeaseID))

		// No agent runs here (the image has codex): the model key would be
		// the sandbox user's to read (TestDesktopAgentNoModelKey).
		_, err = m.DialAgent(ctx, nil)
		requireCode(t, err, shared.CodeUnavailable)

		_, err = m.ReadPage(ctx, "a")
		requireCode(t, err, shared.CodeUnavailable)
		requireCode(t, m.TypeSecret(ctx, "a", "", "https://example.com", "s3cret", false), shared.CodeUnavailable)
		_, err = m.BrowserPages(ctx, "a")
		requireCode(t, err, shared.CodeUnavailable)
		// No managed browser, so no CDP session (issue 34).
		_, err = m.DialCDP(ctx, "a", "")
		requireCode(t, err, shared.CodeUnavailable)
		require.Contains(t, err.Error(), "CDP needs botd's managed browser")
	})

	t.Run("open a URL", func(t *testing.T) {
		l, err := m.AcquireLease(ctx, "a", KindAgent, "run-1", 10*time.Minute)
		require.NoError(t, err)
		_, err = m.Open(ctx, "a", l.LeaseID, "file:///etc/passwd")
		requireCode(t, err, shared.CodeBadRequest)
		raw, err := m.Open(ctx, "a", l.LeaseID, "http://127.0.0.1:9/desktopm")
		require.NoError(t, err)
		require.Contains(t, string(raw), `"url":"http://127.0.0.1:9/desktopm"`)
		win := waitWindow(t, b, "chromium", 150)
		require.NotEmpty(t, win, "a browser window opened on :0")
	})

	t.Run("forget", func(t *testing.T) {
		require.NoError(t, m.ForgetScreen(ctx, "b"))
		r, err := b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "sleep 1; ps -eo args | grep -c '^Xvfb :1 ' || true"}})
		require.NoError(t, err)
		require.Equal(t, "0\n", string(r.Stdout), "screen b's Xvfb stopped")
		s, err := m.StartScreen(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, 1, s.Slot, "the freed slot is reused")
	})
}

// BenchmarkDesktopObserve measures one observation of the desktop machine,
// side by side on one sandbox: "command" is docker exec of scrot +
// xdotool, the JPEG back through the exec stream; the "held" rows are the
// worker's held RFB session (below). It reports the p50 and p90 in ms.
func BenchmarkDesktopObserve(b *testing.B) {
	cli, id := sandbox(b, 1)
	// held: a still screen, nothing since the last update (the JPEG is
	// reused, as botd skips an unchanged frame); held-encode: the same with
	// the JPEG made anew each time (a changed frame, no refresh needed);
	// held-refresh: as after an act, a refresh answered first, then the
	// JPEG made (the worst case).
	for _, mode := range []string{"command", "held", "held-encode", "held-refresh"} {
		b.Run(mode, func(b *testing.B) {
			isHeld := mode != "command"
			m, err := New(Options{Backend: NewDockerBackend(cli, id, 1), HeldStream: isHeld})
			require.NoError(b, err)
			defer m.Close()
			ctx := ctxFor(b, 10*time.Minute)
			_, err = m.StartScreen(ctx, "a")
			require.NoError(b, err)
			l, err := m.AcquireLease(ctx, "a", KindAgent, "bench", time.Hour)
			require.NoError(b, err)
			if isHeld {
				require.Eventually(b, func() bool { st, _ := m.StreamState("a"); return st == "live" }, time.Minute, 50*time.Millisecond)
			}
			// A move, so the held stream knows the pointer.
			_, err = m.Act(ctx, "a", l.LeaseID, []shared.Action{{Type: shared.ActionMove, X: ip(300), Y: ip(200)}})
			require.NoError(b, err)
			held, refreshes := m.heldFrames.Load(), m.HeldRefreshes()
			s := m.screens["a"]
			d := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				switch mode {
				case "held-encode":
					s.held.c = nil
				case "held-refresh":
					s.held.c, s.settledAt = nil, time.Now()
				}
				start := time.Now()
				if _, err := m.Observe(ctx, "a", l.LeaseID); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			b.StopTimer()
			if isHeld && m.heldFrames.Load()-held != int64(b.N) {
				b.Fatalf("%d of %d observations came from the held stream", m.heldFrames.Load()-held, b.N)
			}
			if r := m.HeldRefreshes() - refreshes; mode == "held-refresh" && r != int64(b.N) || mode != "held-refresh" && r > int64(b.N)/10 {
				b.Fatalf("%s: %d of %d observations waited for a refresh", mode, r, b.N)
			}
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(d[len(d)*9/10].Microseconds())/1000, "p90_ms")
		})
	}
}

package main

// Issue 36 row 6: a local bot squats the X display numbers another screen
// (of its own computer or of another computer on the host) would take next.
// Xvfb listens on the abstract unix name @/tmp/.X11-unix/X<d> as well as
// on the path, and abstract names are per network namespace, not per
// user: a bot that binds one first makes that display's Xvfb die with
// "Cannot establish any listening sockets". The attack runs as the real bot
// user (setpriv) against a real botd starting real Xvfb stacks. Displays
// 2000-2040, view ports 35200-35263 (and kernel-chosen ones).
//
// The second row squats every display number of the botd's first 32 (the
// numbers display = base+slot gave out when slots were 0..31) and every
// view and control port of those slots: a display comes from a range far
// wider than the screen count, and a screen's ports from the kernel when
// its own are taken, so no fixed set of numbers blocks a screen.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"image/jpeg"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// xsqViewPortBase is below the kernel's ephemeral range (32768-60999
// here): the squatter binds all 64 ports from it, and one an outgoing
// connection of another test had taken made it fail (EADDRINUSE) in CI.
const (
	xsqDisplayBase  = 2000
	xsqViewPortBase = 24600
)

// xSquatter binds the abstract X socket names of displays as user, as a
// bot would (any user may bind any free abstract name in its network
// namespace), and holds them until the test ends.
func xSquatter(t *testing.T, user string, displays []int) {
	t.Helper()
	squat(t, user, displays, nil)
}

// squat binds, as user, the abstract X names of displays and the TCP ports
// on 127.0.0.1 (where botd's view ports listen in these tests), and holds them until the
// test ends.
func squat(t *testing.T, user string, displays, ports []int) {
	t.Helper()
	const script = `import socket, sys
held = []
for a in sys.argv[1:]:
    kind, n = a.split(":")
    if kind == "x":
        s = socket.socket(socket.AF_UNIX)
        s.bind("\0/tmp/.X11-unix/X" + n)
    else:
        s = socket.socket(socket.AF_INET)
        s.bind(("127.0.0.1", int(n)))
    s.listen(1)
    held.append(s)
print("squatting", flush=True)
sys.stdin.read()
`
	args := []string{"--reuid=" + user, "--regid=" + user, "--init-groups", "--reset-env", "--", "python3", "-c", script}
	for _, d := range displays {
		args = append(args, "x:"+strconv.Itoa(d))
	}
	for _, p := range ports {
		args = append(args, "p:"+strconv.Itoa(p))
	}
	cmd := exec.Command("setpriv", args...)
	cmd.Dir = "/"
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	require.Equal(t, "squatting\n", line, "the squatter did not bind its names: %s", stderr.String())
	// The names are really held, by the bot: without them this row proves
	// nothing.
	bound := abstractXNames(t)
	for _, d := range displays {
		require.True(t, bound[d], "display %d's abstract name is not bound", d)
	}
	for _, p := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			ln.Close()
		}
		require.Error(t, err, "port %d is not held", p)
	}
}

// abstractXNames lists the displays whose abstract name
// @/tmp/.X11-unix/X<d> is bound in this network namespace.
func abstractXNames(t testing.TB) map[int]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/unix")
	require.NoError(t, err)
	out := map[int]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[len(f)-1], "@/tmp/.X11-unix/X") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(f[len(f)-1], "@/tmp/.X11-unix/X")); err == nil {
			out[n] = true
		}
	}
	return out
}

// xsqCall is an authorized API request to d.
func xsqCall(d *daemon, method, path string, body any) (int, []byte) {
	rt := &redTeam{d: d}
	return rt.call(method, path, body)
}

// xsqDisplay is screen id's display number (-1 when it has none).
func xsqDisplay(t testing.TB, d *daemon, id string) int {
	t.Helper()
	rt := &redTeam{d: d}
	for _, s := range rt.runningScreens(t) {
		if s.id == id {
			return s.display
		}
	}
	return -1
}

func TestRedTeamXSquat(t *testing.T) {
	testenv.RequireTools(t, "Xvfb", "x11vnc", "xfwm4", "chromium", "setpriv", "python3")
	d := startDaemon(t, tempHome(t), randomKey("xsquat-token-"),
		"DISPLAY_BASE="+strconv.Itoa(xsqDisplayBase), "VIEW_PORT_BASE="+strconv.Itoa(xsqViewPortBase), "MAX_SCREENS=4")
	d.waitHealthy(90 * time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("botd logs:\n%s", tailLines(d.logs(), 60))
		}
	})
	status, body := xsqCall(d, "POST", "/screens/first/start", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	first := xsqDisplay(t, d, "first")
	require.GreaterOrEqual(t, first, xsqDisplayBase, "the first screen has no display")

	rows := []rtRow{
		{"bot squats the abstract X names of the next displays: the next screen starts past them at once and shows a real screen", "bot", func(t *testing.T) {
			// The next eight display numbers the probe would hand out.
			var squatted []int
			for n := first + 1; len(squatted) < 8; n++ {
				squatted = append(squatted, n)
			}
			xSquatter(t, "bot", squatted)

			disp := xsqStartObserve(t, d, "second")
			require.Greater(t, disp, squatted[len(squatted)-1], "the second screen must start past the squatted displays")
			// The squatter never got the screen: its names are still its own
			// and the screen's X server holds its own.
			bound := abstractXNames(t)
			require.True(t, bound[squatted[0]], "the squatter's names are gone")
			require.True(t, bound[disp], "the screen's Xvfb does not hold @/tmp/.X11-unix/X%d", disp)
		}},
		{"bot squats all 32 display numbers base..base+31 and their view and control ports: the next screen still starts and shows a real screen", "bot", func(t *testing.T) {
			// Every number of the 32 that botd's own screens do not hold:
			// their abstract X names and their view and control ports.
			ownDisp, ownPort := map[int]bool{}, map[int]bool{}
			for _, s := range (&redTeam{d: d}).runningScreens(t) {
				ownDisp[s.display] = true
			}
			list, _ := (&redTeam{d: d}).screens(t)
			for _, s := range list {
				if s.Ports != nil {
					ownPort[s.Ports.View], ownPort[s.Ports.Control] = true, true
				}
			}
			var displays, ports []int
			for n := xsqDisplayBase; n < xsqDisplayBase+32; n++ {
				if !ownDisp[n] {
					displays = append(displays, n)
				}
			}
			for p := xsqViewPortBase; p < xsqViewPortBase+2*32; p++ {
				if !ownPort[p] {
					ports = append(ports, p)
				}
			}
			require.GreaterOrEqual(t, len(displays), 30)
			squat(t, "bot", displays, ports)

			disp := xsqStartObserve(t, d, "third")
			require.GreaterOrEqual(t, disp, xsqDisplayBase+32, "the third screen must start past the squatted displays")
			bound := abstractXNames(t)
			require.True(t, bound[displays[0]], "the squatter's names are gone")
			require.True(t, bound[disp], "the screen's Xvfb does not hold @/tmp/.X11-unix/X%d", disp)
			// Its view and control ports are its own: botd listens there.
			s := (&redTeam{d: d}).screen(t, "third")
			require.NotNil(t, s.Ports, "the third screen has no ports")
			for _, p := range []int{s.Ports.View, s.Ports.Control} {
				require.False(t, p >= xsqViewPortBase && p < xsqViewPortBase+64 && !ownPort[p], "port %d is one the squatter holds", p)
				c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), 5*time.Second)
				require.NoError(t, err, "the third screen's port %d does not listen", p)
				c.Close()
			}
		}},
		{"bot squats the view and control ports of all 32 slots, no display: the next screen still starts, on ports the kernel picks, and shows a real screen", "bot", func(t *testing.T) {
			ownPort := map[int]bool{}
			list, _ := (&redTeam{d: d}).screens(t)
			for _, s := range list {
				if s.Ports != nil {
					ownPort[s.Ports.View], ownPort[s.Ports.Control] = true, true
				}
			}
			var ports []int
			for p := xsqViewPortBase; p < xsqViewPortBase+2*32; p++ {
				if !ownPort[p] {
					ports = append(ports, p)
				}
			}
			squat(t, "bot", nil, ports)

			disp := xsqStartObserve(t, d, "fourth")
			require.Less(t, disp, xsqDisplayBase+32, "the display is free: no need to go past base+31")
			s := (&redTeam{d: d}).screen(t, "fourth")
			require.NotNil(t, s.Ports, "the fourth screen has no ports")
			require.NotEqual(t, s.Ports.View, s.Ports.Control)
			for _, p := range []int{s.Ports.View, s.Ports.Control} {
				require.False(t, p >= xsqViewPortBase && p < xsqViewPortBase+64 && !ownPort[p], "port %d is one the squatter holds", p)
				c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), 5*time.Second)
				require.NoError(t, err, "the fourth screen's port %d does not listen", p)
				c.Close()
			}
		}},
	}
	for _, row := range rows {
		t.Run(row.position+": "+row.name, row.attack)
	}
}

// xsqStartObserve starts screen id on d (no waiting for a squatter: one
// start's worth of time), observes it under an agent lease and checks the
// observation is a real JPEG of the screen; it returns the screen's
// display number.
func xsqStartObserve(t *testing.T, d *daemon, id string) int {
	t.Helper()
	began := time.Now()
	status, body := xsqCall(d, "POST", "/screens/"+id+"/start", nil)
	require.Equal(t, http.StatusOK, status, "screen %s did not start while a bot squats: %s", id, body)
	require.Less(t, time.Since(began), 60*time.Second)
	disp := xsqDisplay(t, d, id)
	require.GreaterOrEqual(t, disp, xsqDisplayBase, "screen %s has no display", id)

	status, body = xsqCall(d, "POST", "/screens/"+id+"/lease", map[string]any{"kind": "agent", "holder": "redteam"})
	require.Equal(t, http.StatusOK, status, string(body))
	var l struct {
		LeaseID string `json:"leaseId"`
	}
	require.NoError(t, json.Unmarshal(body, &l))
	status, body = xsqCall(d, "POST", "/screens/"+id+"/observe", map[string]any{"leaseId": l.LeaseID})
	require.Equal(t, http.StatusOK, status, string(body))
	var obs struct {
		Image  []byte `json:"image"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
	}
	require.NoError(t, json.Unmarshal(body, &obs))
	img, err := jpeg.Decode(bytes.NewReader(obs.Image))
	require.NoError(t, err, "observe returned no JPEG")
	require.Equal(t, obs.Width, img.Bounds().Dx())
	require.Equal(t, obs.Height, img.Bounds().Dy())
	require.Positive(t, obs.Width)
	xsqCall(d, "DELETE", "/screens/"+id+"/lease/"+l.LeaseID, nil)
	return disp
}

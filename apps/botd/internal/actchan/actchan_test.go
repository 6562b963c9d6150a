package actchan

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// recScreen records what a channel asked of it; refuse, when set, is the
// error every act gets (a person took the screen).
type recScreen struct {
	mu      sync.Mutex
	acts    [][]shared.Action
	clip    string
	refuse  error
	pointer shared.Point
}

func (r *recScreen) Act(_ context.Context, a []shared.Action) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse != nil {
		return r.refuse
	}
	r.acts = append(r.acts, a)
	for _, x := range a {
		switch {
		case len(x.Path) > 0:
			r.pointer = x.Path[len(x.Path)-1]
		case x.X != nil:
			r.pointer = shared.Point{X: *x.X, Y: *x.Y}
		}
	}
	return nil
}

func (r *recScreen) Pointer(context.Context) (shared.Point, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pointer, nil
}
func (r *recScreen) Size() (int, int)                          { return 1280, 800 }
func (r *recScreen) Clipboard(context.Context) (string, error) { return r.clip, nil }
func (r *recScreen) SetClipboard(_ context.Context, t string) error {
	r.clip = t
	return nil
}

// runPy runs code the way OSWorld's execute does (its pyautogui prefix)
// with a channel to s and the installed modules.
func runPy(t *testing.T, s Screen, dir, code string) (string, string, error) {
	t.Helper()
	child, stop, err := Open(t.Context(), s)
	require.NoError(t, err)
	defer stop()
	cmd := exec.Command("python3", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; "+code)
	cmd.Env = []string{EnvFD + "=3", "PYTHONPATH=" + dir, "PATH=/usr/bin:/bin"}
	cmd.ExtraFiles = []*os.File{child}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Start()
	child.Close()
	if err == nil {
		err = cmd.Wait()
	}
	return out.String(), errb.String(), err
}

// TestChannelWithTheModules runs OSWorld-style pyautogui code against the
// channel: each call arrives as the act route's actions, in order, one
// request a call; position() and size() come from the screen; a screen
// that refuses (a person's takeover) fails the code with the reason; the
// modules are installed root-owned and read-only to others.
func TestChannelWithTheModules(t *testing.T) {
	testenv.RequireTools(t, "python3")
	dir, err := Install(t.TempDir())
	require.NoError(t, err)
	fi, err := os.Stat(dir + "/pyautogui/__init__.py")
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())

	s := &recScreen{}
	out, stderr, err := runPy(t, s, dir, `pyautogui.click(100, 200); pyautogui.doubleClick(x=5, y=6); pyautogui.typewrite("hi"); pyautogui.hotkey("ctrl", "s"); pyautogui.scroll(-2, x=10, y=20); pyautogui.dragTo(300, 400, duration=0.1); print(tuple(pyautogui.position()), tuple(pyautogui.size()))`)
	require.NoError(t, err, stderr)
	require.Equal(t, "(300, 400) (1280, 800)", strings.TrimSpace(out))
	var types []string
	for _, a := range s.acts {
		for _, x := range a {
			types = append(types, x.Type)
		}
	}
	require.Equal(t, []string{"click", "double_click", "type", "keypress", "scroll", "drag"}, types, "%s", js(s.acts))
	click := s.acts[0][0]
	require.Equal(t, 100, *click.X)
	require.Equal(t, 200, *click.Y)
	require.Equal(t, []string{"ctrl", "s"}, s.acts[3][0].Keys)
	require.Equal(t, 240, *s.acts[4][0].ScrollY, "scroll(-2) is two wheel clicks down")
	require.Equal(t, shared.Point{X: 300, Y: 400}, s.acts[5][0].Path[len(s.acts[5][0].Path)-1])

	// A refused act fails the code with the screen's reason.
	s.refuse = shared.Errorf(http.StatusConflict, shared.CodeUserHasControl, "a user has control of screen alice")
	_, stderr, err = runPy(t, s, dir, `pyautogui.click(1, 1)`)
	require.Error(t, err)
	require.Contains(t, stderr, "a person has taken control of this screen (user_has_control)")

	// An action the screen would refuse as invalid never reaches it.
	s.refuse = nil
	n := len(s.acts)
	_, stderr, err = runPy(t, s, dir, `pyautogui.click(5000, 10)`)
	require.Error(t, err, "a click off the screen must fail")
	require.Len(t, s.acts, n, stderr)
}

// TestChannelBounds: a request line over MaxRequest is refused and ends
// the channel; garbage and an action off the screen are answered with an
// error, not acted on.
func TestChannelBounds(t *testing.T) {
	s := &recScreen{}
	child, stop, err := Open(t.Context(), s)
	require.NoError(t, err)
	defer stop()
	defer child.Close()
	_ = child.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = child.Write([]byte("not json\n"))
	require.NoError(t, err)
	buf := make([]byte, 4096)
	n, err := child.Read(buf)
	require.NoError(t, err)
	require.Contains(t, string(buf[:n]), `"ok":false`)
	// An action off the screen is refused here too, not only by the
	// module.
	_, err = child.Write([]byte(`{"act":[{"type":"click","x":5000,"y":10}]}` + "\n"))
	require.NoError(t, err)
	n, err = child.Read(buf)
	require.NoError(t, err)
	require.Contains(t, string(buf[:n]), `"code":"invalid_action"`)
	big := strings.Repeat("a", MaxRequest+10) + "\n"
	go func() { _, _ = child.Write([]byte(big)) }()
	n, _ = child.Read(buf)
	require.Contains(t, string(buf[:n]), "a request is at most "+strconv.Itoa(MaxRequest))
	require.Empty(t, s.acts)
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestPythonModules runs the modules' own unit tests (python/test_shim.py:
// the exact requests each pyautogui call sends, against a fake channel).
func TestPythonModules(t *testing.T) {
	testenv.RequireTools(t, "python3")
	cmd := exec.Command("python3", "-m", "unittest", "-v", "test_shim")
	cmd.Dir = "python"
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "OK")
	t.Logf("%s", lastLines(string(out), 3))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

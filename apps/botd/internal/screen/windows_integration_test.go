package screen

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Windows and clipboard tests use displays :1400+ (view ports 28640+).
const winDisplayBase = 1400

type winWindow struct {
	ID        string
	Title     string
	App       string
	Box       shared.Rect
	Focused   bool
	Minimized bool
}

func listWindows(t *testing.T, mux http.Handler, screen, leaseID string) []winWindow {
	t.Helper()
	r := call(t, mux, "POST", "/screens/"+screen+"/windows", map[string]any{"leaseId": leaseID})
	require.Equal(t, http.StatusOK, r.status, r.body)
	raw, _ := r.body["windows"].([]any)
	var out []winWindow
	for _, v := range raw {
		m := v.(map[string]any)
		b := m["box"].(map[string]any)
		w := winWindow{ID: m["id"].(string), Title: m["title"].(string), App: m["app"].(string),
			Box:     shared.Rect{X: int(b["x"].(float64)), Y: int(b["y"].(float64)), W: int(b["w"].(float64)), H: int(b["h"].(float64))},
			Focused: m["focused"] == true, Minimized: m["minimized"] == true}
		out = append(out, w)
	}
	return out
}

func findApp(ws []winWindow, app string) *winWindow {
	for i := range ws {
		if strings.EqualFold(ws[i].App, app) {
			return &ws[i]
		}
	}
	return nil
}

// waitWindows polls the window list until ok says so.
func waitWindows(t *testing.T, mux http.Handler, screen, leaseID, what string, ok func([]winWindow) bool) []winWindow {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ws := listWindows(t, mux, screen, leaseID)
		if ok(ws) {
			return ws
		}
		require.True(t, time.Now().Before(deadline), "%s: the window list stayed %+v", what, ws)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIntegrationWindows: an application's window is listed with its
// program, title and box; focus, move, resize and close act on it through
// the window manager; an action on a window that closed is window_gone.
func TestIntegrationWindows(t *testing.T) {
	e := newIT(t, 1, winDisplayBase)
	ctx := testenv.Context(t, 3*time.Minute)
	mux := http.NewServeMux()
	e.m.Routes(mux)
	_, err := e.m.Register("win")
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire("win", lease.Agent, "run", 5*time.Minute)
	require.NoError(t, err)
	_, err = e.m.Ensure(ctx, "win")
	require.NoError(t, err)

	// The bare desktop: the panel and the desktop are not windows.
	for _, w := range listWindows(t, mux, "win", l.ID) {
		require.NotContains(t, []string{"Xfce4-panel", "Xfdesktop"}, w.App, "panels and the desktop are left out: %+v", w)
	}
	r := call(t, mux, "POST", "/screens/win/launch", map[string]any{"leaseId": l.ID, "app": "editor"})
	require.Equal(t, http.StatusOK, r.status, r.body)
	r = call(t, mux, "POST", "/screens/win/launch", map[string]any{"leaseId": l.ID, "app": "terminal"})
	require.Equal(t, http.StatusOK, r.status, r.body)
	ws := waitWindows(t, mux, "win", l.ID, "mousepad and the terminal open", func(ws []winWindow) bool {
		return findApp(ws, "Mousepad") != nil && findApp(ws, "Xfce4-terminal") != nil
	})
	ed := findApp(ws, "Mousepad")
	require.Contains(t, ed.Title, "Mousepad", "%+v", ed)
	require.Greater(t, ed.Box.W, 100)
	require.Greater(t, ed.Box.H, 100)

	act := func(a map[string]any) apiResp {
		t.Helper()
		return call(t, mux, "POST", "/screens/win/act", map[string]any{"leaseId": l.ID, "actions": []any{a}})
	}
	// Focus the editor: it becomes the focused window.
	r = act(map[string]any{"type": "focus_window", "window": ed.ID})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "win", l.ID, "the editor focused", func(ws []winWindow) bool {
		w := findApp(ws, "Mousepad")
		return w != nil && w.Focused
	})
	// Move its frame's corner to (100,120), then size its frame 600x400.
	r = act(map[string]any{"type": "move_window", "window": ed.ID, "x": 100, "y": 120})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "win", l.ID, "the editor moved", func(ws []winWindow) bool {
		w := findApp(ws, "Mousepad")
		return w != nil && w.Box.X == 100 && w.Box.Y == 120
	})
	r = act(map[string]any{"type": "resize_window", "window": ed.ID, "width": 600, "height": 400})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "win", l.ID, "the editor resized", func(ws []winWindow) bool {
		w := findApp(ws, "Mousepad")
		return w != nil && w.Box.X == 100 && w.Box.Y == 120 && w.Box.W == 600 && w.Box.H == 400
	})
	// Focus the terminal: the editor is no longer focused.
	term := findApp(listWindows(t, mux, "win", l.ID), "Xfce4-terminal")
	require.NotNil(t, term)
	r = act(map[string]any{"type": "focus_window", "window": term.ID})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "win", l.ID, "the terminal focused", func(ws []winWindow) bool {
		w, e := findApp(ws, "Xfce4-terminal"), findApp(ws, "Mousepad")
		return w != nil && w.Focused && e != nil && !e.Focused
	})
	// Close the editor (an unmodified document closes without asking).
	r = act(map[string]any{"type": "close_window", "window": ed.ID})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "win", l.ID, "the editor closed", func(ws []winWindow) bool { return findApp(ws, "Mousepad") == nil })

	// Acting on it now: window_gone, and the screen and lease are unharmed.
	r = act(map[string]any{"type": "focus_window", "window": ed.ID})
	require.Equal(t, http.StatusNotFound, r.status, r.body)
	require.Equal(t, string(shared.CodeWindowGone), r.body["error"].(map[string]any)["code"])
	r = act(map[string]any{"type": "move_window", "window": "0x7fffffff", "x": 1, "y": 1})
	require.Equal(t, http.StatusNotFound, r.status, r.body)
	r = act(map[string]any{"type": "focus_window", "window": "terminal"})
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	r = act(map[string]any{"type": "resize_window", "window": term.ID, "width": 10, "height": 400})
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	r = act(map[string]any{"type": "move", "x": 5, "y": 5})
	require.Equal(t, http.StatusOK, r.status, "the lease still acts: %v", r.body)

	// Another holder cannot list the windows.
	r = call(t, mux, "POST", "/screens/win/windows", map[string]any{"leaseId": "ls_nope"})
	require.Equal(t, http.StatusConflict, r.status, r.body)
}

// TestIntegrationClipboard: text set through botd is what the screen's own
// X clients paste, text an X client copies is what botd reads, a screen
// never sees another's clipboard, and oversize text is refused whole.
func TestIntegrationClipboard(t *testing.T) {
	testenv.RequireTools(t, "xclip")
	e := newIT(t, 2, winDisplayBase+4)
	ctx := testenv.Context(t, 3*time.Minute)
	mux := http.NewServeMux()
	e.m.Routes(mux)
	leases := map[string]string{}
	for _, id := range []string{"clip-a", "clip-b"} {
		_, err := e.m.Register(id)
		require.NoError(t, err)
		l, err := e.m.Leases().Acquire(id, lease.Agent, "run-"+id, 5*time.Minute)
		require.NoError(t, err)
		leases[id] = l.ID
		_, err = e.m.Ensure(ctx, id)
		require.NoError(t, err)
	}
	read := func(id string) string {
		t.Helper()
		r := call(t, mux, "POST", "/screens/"+id+"/clipboard/read", map[string]any{"leaseId": leases[id]})
		require.Equal(t, http.StatusOK, r.status, r.body)
		return r.body["text"].(string)
	}
	require.Equal(t, "", read("clip-a"), "a fresh screen's clipboard is empty")

	text := "héllo ✓ from botd\nsecond line"
	r := call(t, mux, "POST", "/screens/clip-a/clipboard/write", map[string]any{"leaseId": leases["clip-a"], "text": text})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, text, read("clip-a"))

	// Another X client on that display (as the desktop user) pastes it.
	env := func(id string) []string {
		ps := e.procs(t, id)
		return (&procBackend{m: e.m}).env(ps.slot, ps.runDir)
	}
	code, out := runAs(t, e.desktop, env("clip-a"), "xclip", "-selection", "clipboard", "-o")
	require.Equal(t, 0, code, out)
	require.Equal(t, text, out)
	// The other screen's clipboard is its own.
	require.Equal(t, "", read("clip-b"), "screen b never sees a's clipboard")

	// An X client on b copies (xclip forks to serve the selection; its
	// output goes nowhere, so the shell's end is the copy's): botd reads
	// it on b, a keeps its own. xclip asks for the selection just before
	// it forks, and the request leaves only when the child first waits for
	// an event: a child starved of CPU claims it later (rehearsal 42 read
	// "" right after the shell's end), so the read waits for the claim.
	code, out = runAs(t, e.desktop, env("clip-b"), "sh", "-c", `printf 'copied on b' | xclip -selection clipboard -i >/dev/null 2>&1`)
	require.Equal(t, 0, code, out)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := call(t, mux, "POST", "/screens/clip-b/clipboard/read", map[string]any{"leaseId": leases["clip-b"]})
		if assert.Equal(c, http.StatusOK, r.status, r.body) {
			assert.Equal(c, "copied on b", r.body["text"])
		}
	}, 30*time.Second, 100*time.Millisecond, "botd reads on b what an X client on b copied")
	require.Equal(t, text, read("clip-a"))

	// Over 1 MiB: refused, and the clipboard keeps what it had.
	big := strings.Repeat("x", shared.MaxClipboardBytes+1)
	r = call(t, mux, "POST", "/screens/clip-a/clipboard/write", map[string]any{"leaseId": leases["clip-a"], "text": big})
	require.Equal(t, http.StatusRequestEntityTooLarge, r.status, r.body)
	require.Equal(t, text, read("clip-a"))
	// Exactly 1 MiB is fine, both ways.
	full := strings.Repeat("y", shared.MaxClipboardBytes)
	r = call(t, mux, "POST", "/screens/clip-a/clipboard/write", map[string]any{"leaseId": leases["clip-a"], "text": full})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, full, read("clip-a"))

	// Without the lease: refused.
	r = call(t, mux, "POST", "/screens/clip-a/clipboard/read", map[string]any{"leaseId": leases["clip-b"]})
	require.Equal(t, http.StatusConflict, r.status, r.body)
	r = call(t, mux, "POST", "/screens/clip-a/clipboard/write", map[string]any{"leaseId": leases["clip-a"]})
	require.Equal(t, http.StatusBadRequest, r.status, "text is required: %v", r.body)
}

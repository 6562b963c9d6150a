package main

// The window and clipboard tools through the worker's direct tool route,
// against a real botd (display 1420, view ports 28720+).

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

func TestToolsWindowsAndClipboard(t *testing.T) {
	requireIntegration(t, "xclip", "mousepad")
	_, modelURL := hangingModel(t)
	c := startComputerWith(t, scripted(modelURL), 1420, "MAX_SCREENS=2", "VIEW_PORT_BASE=28720")
	env := startWorkerWith(t, c, "scripted-model", nil, "alice", "bob")

	windows := func() []shared.Window {
		t.Helper()
		st, res := env.tool(t, "alice", "computer_windows", map[string]any{})
		require.Equal(t, http.StatusOK, st, res.text())
		var ws shared.Windows
		require.NoError(t, json.Unmarshal([]byte(res.text()), &ws), res.text())
		return ws.Windows
	}
	find := func(ws []shared.Window, app string) *shared.Window {
		for i := range ws {
			if strings.EqualFold(ws[i].App, app) {
				return &ws[i]
			}
		}
		return nil
	}
	st, res := env.tool(t, "alice", "launch_app", map[string]any{"app": "editor"})
	require.Equal(t, http.StatusOK, st, res.text())
	var ed *shared.Window
	waitFor(t, "the editor's window", 30*time.Second, func() bool { ed = find(windows(), "Mousepad"); return ed != nil })

	// Move it by id through computer_act; the list shows the new box.
	st, res = env.tool(t, "alice", "computer_act", map[string]any{"actions": []any{
		map[string]any{"type": "move_window", "window": ed.ID, "x": 40, "y": 60},
		map[string]any{"type": "resize_window", "window": ed.ID, "width": 500, "height": 300},
	}})
	require.Equal(t, http.StatusOK, st, res.text())
	waitFor(t, "the editor moved and resized", 20*time.Second, func() bool {
		w := find(windows(), "Mousepad")
		return w != nil && w.Box == shared.Rect{X: 40, Y: 60, W: 500, H: 300}
	})
	// A window id that is not on the screen: window_gone, the tool says so.
	st, res = env.tool(t, "alice", "computer_act", map[string]any{"actions": []any{map[string]any{"type": "focus_window", "window": "0x7ffffff0"}}})
	require.Equal(t, http.StatusNotFound, st, res.text())
	require.Contains(t, res.text(), "window_gone")

	// The clipboard: set, read back, and pasted by the editor.
	st, res = env.tool(t, "alice", "clipboard_write", map[string]any{"text": "pasted from the clipboard ✓"})
	require.Equal(t, http.StatusOK, st, res.text())
	st, res = env.tool(t, "alice", "clipboard_read", map[string]any{})
	require.Equal(t, http.StatusOK, st, res.text())
	require.JSONEq(t, `{"text":"pasted from the clipboard ✓"}`, res.text())
	st, res = env.tool(t, "alice", "computer_act", map[string]any{"actions": []any{
		map[string]any{"type": "focus_window", "window": ed.ID},
		map[string]any{"type": "wait", "ms": 300},
		map[string]any{"type": "keypress", "keys": []string{"ctrl", "v"}},
	}})
	require.Equal(t, http.StatusOK, st, res.text())
	// Put something else on the clipboard, then copy the editor's whole
	// text: it is what was pasted into it.
	st, res = env.tool(t, "alice", "clipboard_write", map[string]any{"text": "something else"})
	require.Equal(t, http.StatusOK, st, res.text())
	st, res = env.tool(t, "alice", "computer_act", map[string]any{"actions": []any{
		map[string]any{"type": "keypress", "keys": []string{"ctrl", "a"}},
		map[string]any{"type": "keypress", "keys": []string{"ctrl", "c"}},
	}})
	require.Equal(t, http.StatusOK, st, res.text())
	waitFor(t, "the editor's copy of what it pasted", 10*time.Second, func() bool {
		_, res := env.tool(t, "alice", "clipboard_read", map[string]any{})
		return res.text() == `{"text":"pasted from the clipboard ✓"}`
	})
	// Bob's screen has a clipboard of its own.
	st, res = env.tool(t, "bob", "clipboard_read", map[string]any{})
	require.Equal(t, http.StatusOK, st, res.text())
	require.JSONEq(t, `{"text":""}`, res.text())
	// Bob cannot read alice's.
	st, res = env.tool(t, "bob", "clipboard_read", map[string]any{"screen": "alice"})
	require.Equal(t, http.StatusForbidden, st, res.text())
	// Exactly 1 MiB goes through; one byte more is refused before botd.
	st, res = env.tool(t, "alice", "clipboard_write", map[string]any{"text": strings.Repeat("q", shared.MaxClipboardBytes)})
	require.Equal(t, http.StatusOK, st, res.text())
	st, res = env.tool(t, "alice", "clipboard_read", map[string]any{})
	require.Equal(t, http.StatusOK, st)
	require.Len(t, res.text(), shared.MaxClipboardBytes+len(`{"text":""}`))
	st, res = env.tool(t, "alice", "clipboard_write", map[string]any{"text": strings.Repeat("z", shared.MaxClipboardBytes+1)})
	require.Equal(t, http.StatusRequestEntityTooLarge, st, res.text())
	require.Contains(t, res.text(), "payload_too_large")
}

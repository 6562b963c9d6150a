package screen

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/atspi"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Desktop element tests use displays :1480+ and view ports 34000+.
const (
	deskDisplayBase  = 1480
	deskViewPortBase = 34000
)

// atspiTools are what desktop elements need beside the desktop.
var atspiTools = []string{"/usr/libexec/at-spi-bus-launcher", "/usr/libexec/at-spi2-registryd", "/usr/share/dbus-1/services/org.a11y.Bus.service", "thunar", "xfce4-terminal"}

func newDeskIT(t testing.TB, base, port int) *itEnv {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, desktopTools...)
	for _, p := range atspiTools {
		if strings.HasPrefix(p, "/") {
			if _, err := os.Stat(p); err != nil {
				testenv.Unavailable(t, "%s (at-spi2-core) is missing: run scripts/provision.sh", p)
			}
		} else {
			testenv.RequireTools(t, p)
		}
	}
	testenv.RequireUsers(t)
	home, err := os.MkdirTemp("", "screen-desk-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	d, err := osuser.Lookup("desktop")
	require.NoError(t, err)
	b, err := osuser.Lookup("bot")
	require.NoError(t, err)
	require.NoError(t, osuser.PrepareDirs(osuser.Layout(home, d, b)))
	m := New(Options{Home: home, DisplayBase: base, ViewPortBase: port, MaxScreens: 2, Desktop: d, Log: zerolog.Nop(), ExtraEnv: itExtraEnv()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	return &itEnv{m: m, home: home, desktop: d, bot: b}
}

// deskObserve observes screen id with elements through the route.
func deskObserve(t *testing.T, mux http.Handler, id, leaseID string) []shared.Element {
	t.Helper()
	// "elements_unavailable" (the desktop did not settle its elements in
	// 3 s) is the route's honest answer on a loaded host (rehearsal 51, on
	// the second screen): looked at again, up to 30 s; any other error fails.
	var r apiResp
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		r = call(t, mux, "POST", "/screens/"+id+"/observe", map[string]any{"leaseId": leaseID, "elements": true})
		require.Equal(t, http.StatusOK, r.status, r.body)
		ee, _ := r.body["elementsError"].(map[string]any)
		if ee == nil || ee["code"] != "elements_unavailable" || time.Now().After(deadline) {
			break
		}
		t.Logf("%s: %v; looking again", id, ee["message"])
	}
	require.Nil(t, r.body["elementsError"], "elements error: %v", r.body["elementsError"])
	raw, _ := r.body["elements"].([]any)
	var out []shared.Element
	for _, v := range raw {
		m := v.(map[string]any)
		b := m["box"].(map[string]any)
		e := shared.Element{ID: m["id"].(string), Role: m["role"].(string), Name: m["name"].(string),
			Box: shared.Box{X: int(b["x"].(float64)), Y: int(b["y"].(float64)), W: int(b["w"].(float64)), H: int(b["h"].(float64))}}
		if s, ok := m["value"].(string); ok {
			e.Value = &s
		}
		for _, s := range asList(m["states"]) {
			e.States = append(e.States, s.(string))
		}
		out = append(out, e)
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

// waitElem polls the observation until an element passes ok.
func waitElem(t *testing.T, mux http.Handler, id, leaseID, what string, ok func(shared.Element) bool) (shared.Element, []shared.Element) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list := deskObserve(t, mux, id, leaseID)
		for _, e := range list {
			if ok(e) {
				return e, list
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never listed; elements: %+v", what, list)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestIntegrationDesktopElements: the editor's elements come from AT-SPI on
// the screen's own bus, in screen pixels and with stable ids; a click by
// element id opens its menu (AT-SPI says so); a password field never
// carries its value; another screen's programs never show; unknown and
// stale ids are clear errors with the lease unharmed; type into an element
// focuses it and its value shows the text.
func TestIntegrationDesktopElements(t *testing.T) {
	e := newDeskIT(t, deskDisplayBase, deskViewPortBase)
	ctx := testenv.Context(t, 4*time.Minute)
	mux := http.NewServeMux()
	e.m.Routes(mux)
	for _, id := range []string{"dka", "dkb"} {
		_, err := e.m.Register(id)
		require.NoError(t, err)
	}
	la, err := e.m.Leases().Acquire("dka", lease.Agent, "run", 5*time.Minute)
	require.NoError(t, err)
	lb, err := e.m.Leases().Acquire("dkb", lease.Agent, "run", 5*time.Minute)
	require.NoError(t, err)
	_, err = e.m.Ensure(ctx, "dka")
	require.NoError(t, err)
	_, err = e.m.Ensure(ctx, "dkb")
	require.NoError(t, err)

	r := call(t, mux, "POST", "/screens/dka/launch", map[string]any{"leaseId": la.ID, "app": "editor"})
	require.Equal(t, http.StatusOK, r.status, r.body)
	file, list := waitElem(t, mux, "dka", la.ID, "the editor's File menu", func(e shared.Element) bool {
		return e.Role == "menuitem" && e.Name == "File"
	})
	require.True(t, strings.HasPrefix(file.ID, "d"), "desktop ids start with d: %+v", file)
	require.Greater(t, file.Box.W, 0)
	require.Greater(t, file.Box.H, 0)
	t.Logf("editor: %d elements, File %+v", len(list), file)
	for _, el := range list {
		t.Logf("  %s %s %q %v %+v", el.ID, el.Role, el.Name, el.States, el.Box)
	}
	// Stable: the same ids on the next observation of the unchanged desktop.
	// On a loaded host the panel may still be adding its launchers' menu
	// buttons when the editor shows (rehearsal 47: three more buttons on
	// the second look), so the looks repeat until two in a row agree; ids
	// that changed with every observation never would.
	ids := func(l []shared.Element) []string {
		var out []string
		for _, e := range l {
			out = append(out, e.ID+"|"+e.Role+"|"+e.Name)
		}
		sort.Strings(out)
		return out
	}
	prev := ids(list)
	for deadline := time.Now().Add(30 * time.Second); ; {
		cur := ids(deskObserve(t, mux, "dka", la.ID))
		if slices.Equal(prev, cur) {
			break
		}
		require.True(t, time.Now().Before(deadline), "ids are stable across observes: no two looks in a row agreed in 30 s; the last two:\n%v\n%v", prev, cur)
		t.Logf("the desktop changed between two looks: %v -> %v", prev, cur)
		prev = cur
		time.Sleep(500 * time.Millisecond)
	}

	// Screen b's list never has screen a's editor.
	for _, el := range deskObserve(t, mux, "dkb", lb.ID) {
		require.NotEqual(t, "File", el.Name, "screen b lists screen a's editor: %+v", el)
	}

	// Click File by id: AT-SPI reports the menu selected (open) and its
	// items showing.
	_, rd, sock, err := e.m.DesktopElements(ctx, "dka")
	require.NoError(t, err)
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "click", "element": file.ID}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := rd.Read(ctx, sock, file.ID)
		require.NoError(t, err)
		if contains(p.States, "selected") || contains(p.States, "expanded") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the File menu never opened: %+v", p)
		time.Sleep(50 * time.Millisecond)
	}
	// The open menu's items are listed now.
	waitElem(t, mux, "dka", la.ID, "the open menu's Save As", func(e shared.Element) bool {
		return e.Role == "menuitem" && strings.HasPrefix(e.Name, "Save As")
	})
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "keypress", "keys": []string{"Escape"}}}})
	require.Equal(t, http.StatusOK, r.status, r.body)

	// A window over the editor's File item: element_covered, nothing
	// clicked.
	r = call(t, mux, "POST", "/screens/dka/launch", map[string]any{"leaseId": la.ID, "app": "terminal"})
	require.Equal(t, http.StatusOK, r.status, r.body)
	ws := waitWindows(t, mux, "dka", la.ID, "the terminal open", func(ws []winWindow) bool { return findApp(ws, "Xfce4-terminal") != nil })
	term := findApp(ws, "Xfce4-terminal")
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "move_window", "window": term.ID, "x": file.Box.X - 40, "y": file.Box.Y - 40}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "dka", la.ID, "the terminal over the File item", func(ws []winWindow) bool {
		w := findApp(ws, "Xfce4-terminal")
		return w != nil && w.Box.X == file.Box.X-40 && w.Box.Y == file.Box.Y-40
	})
	covered := deskObserve(t, mux, "dka", la.ID)
	for _, el := range covered {
		require.NotEqual(t, file.ID, el.ID, "a covered element is listed: %+v", el)
	}
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "click", "element": file.ID}}})
	require.Contains(t, fmt.Sprint(r.body), string(shared.CodeElementCovered), "%d %v", r.status, r.body)
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "close_window", "window": term.ID}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "dka", la.ID, "the terminal closed", func(ws []winWindow) bool { return findApp(ws, "Xfce4-terminal") == nil })

	// The editor closed: its File item is element_stale.
	ed := findApp(listWindows(t, mux, "dka", la.ID), "Mousepad")
	require.NotNil(t, ed)
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "close_window", "window": ed.ID}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	waitWindows(t, mux, "dka", la.ID, "the editor closed", func(ws []winWindow) bool { return findApp(ws, "Mousepad") == nil })
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "click", "element": file.ID}}})
	require.Contains(t, fmt.Sprint(r.body), string(shared.CodeElementStale), "%d %v", r.status, r.body)

	// type into an element (screen b's editor): botd clicks it, gives it
	// the focus through AT-SPI, types; its value says so.
	r = call(t, mux, "POST", "/screens/dkb/launch", map[string]any{"leaseId": lb.ID, "app": "editor"})
	require.Equal(t, http.StatusOK, r.status, r.body)
	text, _ := waitElem(t, mux, "dkb", lb.ID, "screen b's editor text", func(e shared.Element) bool { return e.Role == "textbox" })
	r = call(t, mux, "POST", "/screens/dkb/act", map[string]any{"leaseId": lb.ID, "actions": []any{map[string]any{"type": "type", "element": text.ID, "text": "hello desktop"}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.NotContains(t, fmt.Sprint(r.body["results"]), "element_", "%v", r.body)
	waitElem(t, mux, "dkb", lb.ID, "the typed value", func(e shared.Element) bool {
		return e.ID == text.ID && e.Value != nil && *e.Value == "hello desktop"
	})

	// Unknown id: element_not_found; the lease still acts.
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "click", "element": "d00000000ff"}}})
	require.Contains(t, fmt.Sprint(r.body), string(shared.CodeElementNotFound), "%d %v", r.status, r.body)
	r = call(t, mux, "POST", "/screens/dka/act", map[string]any{"leaseId": la.ID, "actions": []any{map[string]any{"type": "move", "x": 3, "y": 3}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

var _ = atspi.IsID

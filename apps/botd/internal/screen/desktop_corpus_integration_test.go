package screen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/atspi"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// The desktop corpus (issue 23, requirement 7): XFCE's panel, the editor
// (mousepad), one of its menus opened, the terminal (xfce4-terminal) and
// the file manager (Thunar), each on a real screen, one at a time.
//
// Found: each program has a list of the controls a person sees on it
// (kept here, by name and role); each must be in the observation's
// elements. Hit: every interactive element the observation reports for
// the program is clicked by its id through the act route (botd clicks at
// its current centre), and AT-SPI must then report an event from that very
// object within two seconds: for buttons and menu items the state the
// press causes (armed, pressed, selected, checked), for text boxes and the
// terminal the focus (or the caret it moves), for tabs, list items and
// cells their selection; failing an event, a state the click left on that
// same object (read back from it). An event from another object of the
// program, or a window the click opened, does not count. After each click, Escape closes any menu and the
// windows it opened are closed, so the next click meets the same desktop.
//
// Left out of the clicks, and listed: the panel's launcher for the web
// browser (it would start a second Chromium next to botd's) and the clock
// (its name is the date).

// deskProgram is one corpus entry.
type deskProgram struct {
	name string
	// launch is the app to launch ("" for the panel).
	launch string
	// app matches the program's AT-SPI application name.
	app string
	// expect are role|name of controls that must be found.
	expect []string
	// menu: open the editor's menu with this name first, and click only
	// the items of that menu.
	menu string
}

var deskCorpus = []deskProgram{
	{name: "panel", app: "xfce4-panel", expect: []string{"button|Applications", "button|Xfce Terminal", "button|Thunar File Manager", "button|Mousepad", "button|Chromium Web Browser"}},
	{name: "mousepad", launch: "editor", app: "mousepad", expect: []string{"menuitem|File", "menuitem|Edit", "menuitem|Search", "menuitem|View", "menuitem|Document", "menuitem|Help", "textbox|"}},
	{name: "mousepad Document menu", launch: "", app: "mousepad", menu: "Document", expect: []string{"menuitem|Word Wrap", "menuitem|Auto Indent", "menuitem|Tab Size", "menuitem|Filetype", "menuitem|Line Ending"}},
	{name: "xfce4-terminal", launch: "terminal", app: "xfce4-terminal", expect: []string{"menuitem|File", "menuitem|Edit", "menuitem|View", "menuitem|Terminal", "menuitem|Tabs", "menuitem|Help", "terminal|"}},
	{name: "thunar", launch: "files", app: "thunar", expect: []string{"menuitem|File", "menuitem|Edit", "menuitem|View", "menuitem|Go", "menuitem|Bookmarks", "menuitem|Help"}},
}

// deskSkip are elements not clicked (see above).
func deskSkip(e atspi.Element) bool {
	return e.App == "xfce4-panel" && (strings.Contains(e.Name, "Chromium") || strings.Contains(e.Name, "Web Browser") || strings.HasPrefix(e.Name, "20"))
}

func deskHas(list []atspi.Element, app, want string) bool {
	role, name, _ := strings.Cut(want, "|")
	for _, e := range list {
		if !strings.EqualFold(e.App, app) || e.Role != role {
			continue
		}
		if name == "" || strings.TrimSpace(e.Name) == name {
			return true
		}
	}
	return false
}

type deskResult struct {
	name                   string
	expected, found        int
	clicked, hit, excluded int
	disabled, reobserved   int
	misses                 []string
	kinds                  map[string]int
}

// runDeskCorpus runs the corpus on screen id (running, leased by leaseID).
func runDeskCorpus(tb testing.TB, ctx context.Context, e *itEnv, mux http.Handler, id string, l lease.Lease) []deskResult {
	read := func() []atspi.Element {
		tb.Helper()
		rctx, cancel := context.WithTimeout(ctx, ElementsTimeout)
		defer cancel()
		list, _, _, err := e.m.DesktopElements(rctx, id)
		require.NoError(tb, err)
		return list
	}
	// The panel registers its bus as the session starts.
	var rd *atspi.Reader
	var sock string
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, r, s, err := e.m.DesktopElements(ctx, id)
		if err == nil && deskHas(list, "xfce4-panel", "button|Applications") {
			rd, sock = r, s
			break
		}
		require.True(tb, time.Now().Before(deadline), "the panel's elements never came: %v %+v", err, list)
		time.Sleep(200 * time.Millisecond)
	}
	w, err := rd.Watch(ctx, sock)
	require.NoError(tb, err)
	defer w.Close()

	act := func(a map[string]any) apiResp {
		return callTB(tb, mux, "POST", "/screens/"+id+"/act", map[string]any{"leaseId": l.ID, "actions": []any{a}})
	}
	windows := func() []shared.Window {
		ws, err := e.m.Windows(ctx, id, l.ID)
		require.NoError(tb, err)
		return ws
	}
	// restore closes menus and the windows a click opened, and gives the
	// program's window the focus again.
	restore := func(before []shared.Window, app string) {
		act(map[string]any{"type": "keypress", "keys": []string{"Escape"}})
		had := map[string]bool{}
		for _, w := range before {
			had[w.ID] = true
		}
		for _, w := range windows() {
			if !had[w.ID] {
				act(map[string]any{"type": "close_window", "window": w.ID})
			}
		}
		for _, w := range before {
			if strings.EqualFold(w.App, app) {
				act(map[string]any{"type": "focus_window", "window": w.ID})
			}
		}
		time.Sleep(150 * time.Millisecond)
	}

	// defocus clicks the desktop where no window is (between the panels).
	defocus := func(ws []shared.Window) {
		for y := 60; y < Height-80; y += 20 {
			for x := 10; x < Width-10; x += 20 {
				free := true
				for _, w := range ws {
					if !w.Minimized && x >= w.Box.X-2 && x < w.Box.X+w.Box.W+2 && y >= w.Box.Y-2 && y < w.Box.Y+w.Box.H+2 {
						free = false
						break
					}
				}
				if free {
					act(map[string]any{"type": "click", "x": x, "y": y})
					time.Sleep(300 * time.Millisecond)
					return
				}
			}
		}
	}

	info, ok := e.m.Info(id)
	require.True(tb, ok)
	baseline := windows()
	var results []deskResult
	for _, p := range deskCorpus {
		res := deskResult{name: p.name, expected: len(p.expect), kinds: map[string]int{}}
		if p.launch != "" {
			// Each program starts on the desktop as it was: a window a
			// launcher click opened after its restore looked (a slow start
			// under load) is closed, and the program's last instance on
			// this display has exited: mousepad is one process per
			// session, and a launch that reaches a dying one opens nothing
			// (fresh-clone CI, stop 44).
			deskSettle(tb, info.Display, p.app, baseline, windows, act)
			r := act(map[string]any{"type": "wait", "ms": 1})
			require.Equal(tb, http.StatusOK, r.status, r.body)
			r = callTB(tb, mux, "POST", "/screens/"+id+"/launch", map[string]any{"leaseId": l.ID, "app": p.launch})
			require.Equal(tb, http.StatusOK, r.status, r.body)
			deadline := time.Now().Add(60 * time.Second)
			for !deskHasWindow(windows(), p.app) {
				require.True(tb, time.Now().Before(deadline), "%s: launched %q, and no window of %s came in 60 s", p.name, p.launch, p.app)
				time.Sleep(200 * time.Millisecond)
			}
		}
		openMenu := func() {}
		if p.menu != "" {
			openMenu = func() {
				for _, el := range read() {
					if el.App == p.app && el.Role == "menuitem" && el.Name == p.menu {
						act(map[string]any{"type": "click", "element": el.ID})
						time.Sleep(200 * time.Millisecond)
						return
					}
				}
			}
			openMenu()
		}
		// Wait until the program shows its controls (or 30 s).
		var list []atspi.Element
		deadline := time.Now().Add(30 * time.Second)
		for {
			list = read()
			n := 0
			for _, x := range p.expect {
				if deskHas(list, p.app, x) {
					n++
				}
			}
			res.found = n
			if n == len(p.expect) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, x := range p.expect {
			if !deskHas(list, p.app, x) {
				res.misses = append(res.misses, "not found: "+x)
			}
		}
		if res.found < len(p.expect) {
			for _, el := range list {
				tb.Logf("  %s listed: %s %s %q %v", p.name, el.App, el.Role, el.Name, el.States)
			}
		}
		// The program's window(s) now, for restore.
		before := windows()
		var targets []atspi.Element
		inMenu := map[string]bool{}
		if p.menu != "" {
			// Only the menu's own items: those not in the closed editor.
			act(map[string]any{"type": "keypress", "keys": []string{"Escape"}})
			time.Sleep(200 * time.Millisecond)
			closed := map[string]bool{}
			for _, el := range read() {
				closed[el.ID] = true
			}
			for _, el := range list {
				if el.App == p.app && !closed[el.ID] {
					inMenu[el.ID] = true
				}
			}
		}
		for _, el := range list {
			if !strings.EqualFold(el.App, p.app) || !el.Interactive {
				continue
			}
			if p.menu != "" && !inMenu[el.ID] {
				continue
			}
			if deskSkip(el) {
				res.excluded++
				continue
			}
			targets = append(targets, el)
		}
		for _, el := range targets {
			if p.menu != "" {
				// A menu rebuilds some items as it opens: act on the id of
				// the observation after opening it, as a model would.
				openMenu()
				fresh := el
				for _, x := range read() {
					if x.App == el.App && x.Role == el.Role && x.Name == el.Name {
						fresh = x
						break
					}
				}
				el = fresh
			}
			if contains(el.States, "disabled") {
				res.disabled++
				continue
			}
			res.clicked++
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			pre, _ := rd.Read(pctx, sock, el.ID)
			pcancel()
			if contains(pre.States, "focused") {
				// Already focused (the editor's text, the terminal): a
				// click on the empty desktop takes the focus from its
				// window, so the click under test must give it back.
				defocus(windows())
				pctx, pcancel = context.WithTimeout(ctx, 2*time.Second)
				pre, _ = rd.Read(pctx, sock, el.ID)
				pcancel()
			}
			pctx, pcancel = context.WithTimeout(ctx, 2*time.Second)
			atPoint, _ := rd.AtPoint(pctx, sock, el, el.Box.Center())
			pcancel()
			mark := w.Mark()
			r := act(map[string]any{"type": "click", "element": el.ID})
			if p.menu != "" && strings.Contains(fmt.Sprint(r.body["results"]), string(shared.CodeElementStale)) {
				// As the error says: observe again, then act on the new id.
				for _, x := range read() {
					if x.App == el.App && x.Role == el.Role && x.Name == el.Name {
						el = x
						break
					}
				}
				res.reobserved++
				r = act(map[string]any{"type": "click", "element": el.ID})
			}
			if r.status != http.StatusOK || strings.Contains(fmt.Sprint(r.body["results"]), "element_") {
				res.misses = append(res.misses, fmt.Sprintf("%s %q: act %d %v", el.Role, el.Name, r.status, r.body["results"]))
				restore(before, p.app)
				continue
			}
			got := ""
			deadline := time.Now().Add(2 * time.Second)
			for got == "" && time.Now().Before(deadline) {
				for _, ev := range w.Since(mark) {
					// Only the very object clicked counts: not its program,
					// not a window it opened (issue 35).
					if ev.Sender == el.Bus && ev.Path == el.Path {
						got = "event " + ev.Kind
						break
					}
				}
				if got == "" {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if got == "" {
				// The state the click left on the element itself.
				rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
				post, err := rd.Read(rctx, sock, el.ID)
				rcancel()
				if err == nil {
					for _, st := range []string{"focused", "selected", "checked", "pressed", "expanded"} {
						if contains(post.States, st) && !contains(pre.States, st) {
							got = "state " + st
							break
						}
					}
				}
			}
			if got == "" {
				var seen []string
				for _, ev := range w.Since(mark) {
					seen = append(seen, fmt.Sprintf("%s@%s", ev.Kind, ev.Path))
				}
				res.misses = append(res.misses, fmt.Sprintf("%s %q at %+v (%s): at point %v, no AT-SPI event or state from it (saw %d: %.160s)", el.Role, el.Name, el.Box, el.Path, atPoint, len(seen), strings.Join(seen, " ")))
			} else {
				res.hit++
				res.kinds[el.Role+"→"+got]++
			}
			restore(before, p.app)
		}
		if p.launch != "" || p.menu != "" {
			// Close the program's windows before the next one (the editor
			// stays for its menu).
			next := ""
			for i, q := range deskCorpus {
				if q.name == p.name && i+1 < len(deskCorpus) {
					next = deskCorpus[i+1].name
				}
			}
			if !strings.HasPrefix(next, p.name) {
				for _, w := range windows() {
					if strings.EqualFold(w.App, p.app) {
						act(map[string]any{"type": "close_window", "window": w.ID})
					}
				}
			}
		}
		results = append(results, res)
	}

	return results
}

// deskHasWindow: a window of app (its class) is listed.
func deskHasWindow(ws []shared.Window, app string) bool {
	for _, w := range ws {
		if strings.EqualFold(w.App, app) {
			return true
		}
	}
	return false
}

// deskProcs are the pids of the processes named comm on display.
func deskProcs(display, comm string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "DISPLAY="+display {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// deskSettle closes the windows not in baseline and waits (15 s) for app's
// processes on display to exit; one still there is ended (SIGTERM, then 5 s).
func deskSettle(tb testing.TB, display, app string, baseline []shared.Window, windows func() []shared.Window, act func(map[string]any) apiResp) {
	tb.Helper()
	had := map[string]bool{}
	for _, w := range baseline {
		had[w.ID] = true
	}
	for _, w := range windows() {
		if !had[w.ID] {
			tb.Logf("closing %s's window %q left from before", w.App, w.Title)
			act(map[string]any{"type": "close_window", "window": w.ID})
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(deskProcs(display, app)) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if left := deskProcs(display, app); len(left) > 0 {
		tb.Logf("%s on %s still runs after its windows closed (pids %v): ending it", app, display, left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		deadline = time.Now().Add(5 * time.Second)
		for len(deskProcs(display, app)) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// callTB is call for tests and benchmarks.
func callTB(tb testing.TB, h http.Handler, method, path string, body any) apiResp {
	tb.Helper()
	b, err := json.Marshal(body)
	require.NoError(tb, err)
	req := httptest.NewRequest(method, path, bytes.NewReader(b))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	out := apiResp{status: rec.Code}
	_ = json.Unmarshal(rec.Body.Bytes(), &out.body)
	return out
}

func TestIntegrationDesktopCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("the desktop corpus is long")
	}
	e := newDeskIT(t, deskDisplayBase+4, deskViewPortBase+20)
	ctx := testenv.Context(t, 8*time.Minute)
	mux := http.NewServeMux()
	e.m.Routes(mux)
	const id = "dcorp"
	_, err := e.m.Register(id)
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire(id, lease.Agent, "run", 30*time.Minute)
	require.NoError(t, err)
	_, err = e.m.Ensure(ctx, id)
	require.NoError(t, err)

	results := runDeskCorpus(t, ctx, e, mux, id, l)
	totalExp, totalFound, totalClicked, totalHit := 0, 0, 0, 0
	for _, r := range results {
		totalExp += r.expected
		totalFound += r.found
		totalClicked += r.clicked
		totalHit += r.hit
		t.Logf("%-24s found %2d/%2d  hit %2d/%2d  (left out: %d, disabled: %d, re-observed after element_stale: %d)  verified by: %v", r.name, r.found, r.expected, r.hit, r.clicked, r.excluded, r.disabled, r.reobserved, r.kinds)
		for _, m := range r.misses {
			t.Logf("    miss: %s", m)
		}
	}
	pf := 100 * float64(totalFound) / float64(totalExp)
	ph := 100 * float64(totalHit) / float64(max(totalClicked, 1))
	t.Logf("desktop corpus: found %d/%d (%.1f%%), hit %d/%d (%.1f%%)", totalFound, totalExp, pf, totalHit, totalClicked, ph)
	if f := os.Getenv("DESKTOP_CORPUS_OUT"); f != "" {
		var b strings.Builder
		for _, r := range results {
			fmt.Fprintf(&b, "%s\tfound %d/%d\thit %d/%d\n", r.name, r.found, r.expected, r.hit, r.clicked)
		}
		_ = os.WriteFile(f, []byte(b.String()), 0o644)
	}
	for _, r := range results {
		minHit, ok := deskMinHit[r.name]
		if !ok {
			minHit = 100
		}
		if r.found < r.expected {
			t.Errorf("%s: found %d of %d", r.name, r.found, r.expected)
		}
		if h := 100 * float64(r.hit) / float64(max(r.clicked, 1)); h < minHit {
			t.Errorf("%s: hit %d of %d (%.1f%%) < %.1f%%", r.name, r.hit, r.clicked, h, minHit)
		}
	}
	require.GreaterOrEqual(t, pf, 100.0, "desktop elements found")
	require.GreaterOrEqual(t, ph, deskMinHitAll, "desktop elements hit")
}

// The desktop corpus's claims (issue 35), with only an event on (or a
// state of) the very object clicked credited: every expected control found
// on every program; every click verified except where the click's only
// effect is elsewhere: the panel's launchers start a program (1 of 4
// verified: the Applications menu button), Thunar's Open Parent and Home move
// the view (13 of 15); and Mousepad's Document menu, whose window entry
// ("Untitled 1") can go stale between the observation and the click when
// the menu redraws (7 of 8, seen in a fresh-clone CI). Measured: 41 of 46
// and 35 of 41 over the corpus (the number of clicks varies with the
// programs' state), so the claim is 85 %.
var deskMinHit = map[string]float64{"panel": 25, "thunar": 86.6, "mousepad Document menu": 87.5}

const deskMinHitAll = 85.0

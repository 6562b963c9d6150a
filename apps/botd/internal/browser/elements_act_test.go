package browser_test

import (
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/atspi"
	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
	"github.com/open-bot/computer/pkg/shared"
)

// findEl is the first element with role and name.
func findEl(t *testing.T, els []shared.Element, role, name string) shared.Element {
	t.Helper()
	for _, e := range els {
		if e.Role == role && e.Name == name {
			return e
		}
	}
	t.Fatalf("no %s %q among %+v", role, name, els)
	return shared.Element{}
}

// TestElementsAct drives element targets through /act on a real screen:
// a click and a type by element id land on the element (the page records
// the click; the field gets the text), a batch keeps its order, and an
// unknown, stale, covered or off-screen element fails its action with its
// own code while the observation still comes back and the lease still
// holds. A password field's value is never in the elements.
func TestElementsAct(t *testing.T) {
	e := startCorpusEnv(t)
	ctx := browsertest.Ctx(t, 5*time.Minute)
	lg := e.site.log
	openPage := func(name string, frames int) {
		t.Helper()
		lg.reset()
		e.open(t, e.site.a+"/"+name+".html")
		if !lg.waitFor(20*time.Second, func() bool { return len(lg.truths) >= frames }) {
			t.Fatalf("%s: no truth", name)
		}
	}
	hitsNow := func() []string {
		lg.mu.Lock()
		defer lg.mu.Unlock()
		return append([]string(nil), lg.hits...)
	}
	elems := func() ([]shared.Element, string) {
		t.Helper()
		o, _, body, err := e.observe(true)
		if err != nil {
			t.Fatal(err)
		}
		if o.ElementsError != nil {
			t.Fatalf("elementsError %+v", o.ElementsError)
		}
		return o.Elements, body
	}

	openPage("01-form-basic", 1)
	els, body := elems()
	if strings.Contains(body, "hunter2-secret") {
		t.Fatal("the password field's value is in the observation")
	}
	pw := findEl(t, els, "textbox", "Password")
	if pw.Value != nil {
		t.Fatalf("password element carries a value: %q", *pw.Value)
	}
	name := findEl(t, els, "textbox", "Full name")
	if name.Value == nil || *name.Value != "Ada" {
		t.Fatalf("name field value %v", name.Value)
	}
	submit := findEl(t, els, "button", "Create account")
	reset := findEl(t, els, "button", "Clear")
	email := findEl(t, els, "textbox", "Email")
	// Ids are stable across observations of an unchanged page. Only the
	// page's elements: the desktop's (the XFCE panel's, atspi ids) come and
	// go with the session (a cold CI run saw 4 more panel elements in the
	// first observation than in the second).
	pageOnly := func(all []shared.Element) []shared.Element {
		var out []shared.Element
		for _, el := range all {
			if !atspi.IsID(el.ID) {
				out = append(out, el)
			}
		}
		return out
	}
	again, _ := elems()
	els, again = pageOnly(els), pageOnly(again)
	if len(els) < 6 {
		t.Fatalf("the form's elements: %+v", els)
	}
	if len(again) != len(els) {
		t.Fatalf("second observation has %d elements, first %d:\nfirst  %+v\nsecond %+v", len(again), len(els), els, again)
	}
	for i := range els {
		if again[i].ID != els[i].ID || again[i].Box != els[i].Box {
			t.Fatalf("element %d changed between observations: %+v vs %+v", i, els[i], again[i])
		}
	}

	// A batch of element clicks lands in order.
	res, code, rbody := e.act(map[string]any{"type": "click", "element": submit.ID}, map[string]any{"type": "click", "element": reset.ID})
	if code != 200 || len(res) != 2 || !res[0].OK || !res[1].OK {
		t.Fatalf("act by element: %d %s", code, rbody)
	}
	if !lg.waitFor(5*time.Second, func() bool { return len(lg.hits) >= 2 }) {
		t.Fatalf("clicks by element did not reach the page: %v", hitsNow())
	}
	if h := hitsNow(); h[0] != "submit" || h[1] != "reset" {
		t.Fatalf("clicks landed on %v, want [submit reset]", h)
	}
	// type into an element focuses it first.
	res, code, rbody = e.act(map[string]any{"type": "type", "element": email.ID, "text": "bo@example.org"})
	if code != 200 || len(res) != 1 || !res[0].OK {
		t.Fatalf("type by element: %d %s", code, rbody)
	}
	b, err := e.bs.Browser(ctx, corpusScreen)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EvalFront(ctx, `if (document.getElementById("e").value !== "bo@example.org") throw new Error("email is " + JSON.stringify(document.getElementById("e").value)); 1`); err != nil {
		t.Fatalf("typed into the element: %v", err)
	}

	// Unknown id: its own code, the observation still returned, the lease
	// still good.
	res, code, rbody = e.act(map[string]any{"type": "click", "element": "e987654321"}, map[string]any{"type": "click", "element": submit.ID})
	if code != 200 || len(res) != 1 || res[0].Error == nil || res[0].Error.Code != shared.CodeElementNotFound || !strings.Contains(rbody, `"observation"`) {
		t.Fatalf("unknown element: %d %s", code, rbody)
	}
	// Covered: an overlay appears over the page after the observation.
	if err := b.EvalFront(ctx, `const d = document.createElement("div"); d.id = "ov"; d.style.cssText = "position:fixed;inset:0;background:rgba(0,0,0,.3)"; document.body.appendChild(d); 1`); err != nil {
		t.Fatal(err)
	}
	n := len(hitsNow())
	res, code, rbody = e.act(map[string]any{"type": "click", "element": submit.ID})
	if code != 200 || len(res) != 1 || res[0].Error == nil || res[0].Error.Code != shared.CodeElementCovered {
		t.Fatalf("covered element: %d %s", code, rbody)
	}
	if err := b.EvalFront(ctx, `document.getElementById("ov").remove(); 1`); err != nil {
		t.Fatal(err)
	}
	if len(hitsNow()) != n {
		t.Fatalf("a click went out for a covered element: %v", hitsNow())
	}
	// The lease still holds: the same element clicks fine now.
	res, code, rbody = e.act(map[string]any{"type": "click", "element": submit.ID})
	if code != 200 || len(res) != 1 || !res[0].OK {
		t.Fatalf("click after the overlay went: %d %s", code, rbody)
	}

	// Covered controls are left out of the list: a page-wide overlay with
	// a dialog on it shows the dialog's buttons, not the ones beneath.
	openPage("10-overlay-modal", 1)
	els, _ = elems()
	findEl(t, els, "button", "Accept all")
	for _, el := range els {
		if strings.HasPrefix(el.Name, "Behind overlay") {
			t.Fatalf("a covered button is listed: %+v", el)
		}
	}

	// Off screen: the page scrolls away from an observed element.
	openPage("16-scrolled", 1)
	els, _ = elems()
	like := findEl(t, els, "button", "Like 12")
	if err := b.EvalFront(ctx, `window.scrollTo(0, 0); 1`); err != nil {
		t.Fatal(err)
	}
	res, code, rbody = e.act(map[string]any{"type": "click", "element": like.ID})
	if code != 200 || len(res) != 1 || res[0].Error == nil || res[0].Error.Code != shared.CodeElementOffscreen {
		t.Fatalf("off-screen element: %d %s", code, rbody)
	}
	// Stale: the page it was on is gone.
	openPage("05-table-basic", 1)
	res, code, rbody = e.act(map[string]any{"type": "click", "element": like.ID})
	if code != 200 || len(res) != 1 || res[0].Error == nil || res[0].Error.Code != shared.CodeElementStale {
		t.Fatalf("stale element: %d %s", code, rbody)
	}
	// Bad input is refused before anything runs.
	if _, code, rbody = e.act(map[string]any{"type": "click", "element": "e1", "x": 3, "y": 4}); code != 400 || !strings.Contains(rbody, "invalid_action") {
		t.Fatalf("element and x/y: %d %s", code, rbody)
	}
	if _, code, rbody = e.act(map[string]any{"type": "keypress", "element": "e1", "keys": []string{"a"}}); code != 400 {
		t.Fatalf("element on keypress: %d %s", code, rbody)
	}
	// Leases as before: a stale lease cannot act on an element.
	code, rbody = e.call("POST", "/screens/"+corpusScreen+"/act", map[string]any{"leaseId": "nope", "actions": []map[string]any{{"type": "click", "element": submit.ID}}}, nil)
	if code != 409 || !strings.Contains(rbody, string(shared.CodeLeaseRequired)) {
		t.Fatalf("stale lease: %d %s", code, rbody)
	}

	// A page that never settles (its renderer spins): the observation
	// still comes back with its screenshot and says why there are no
	// elements; the lease and the screen are unharmed.
	if err := b.EvalFront(ctx, `setTimeout(() => { for (;;) {} }, 50); 1`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	o, _, obody, err := e.observe(true)
	if err != nil {
		t.Fatalf("observe of a hung page: %v", err)
	}
	if o.ElementsError == nil || o.ElementsError.Code != shared.CodeElementsUnavailable || len(o.Elements) != 0 || !strings.Contains(obody, `"frameHash"`) {
		t.Fatalf("hung page: %+v %.300s", o.ElementsError, obody)
	}
	if _, code, rbody = e.act(map[string]any{"type": "move", "x": 5, "y": 5}); code != 200 {
		t.Fatalf("act after a hung page: %d %s", code, rbody)
	}
}

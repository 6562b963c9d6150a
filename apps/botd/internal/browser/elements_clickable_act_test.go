package browser_test

import (
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
	"github.com/open-bot/computer/pkg/shared"
)

// TestElementsActClickable drives role-less clickables (issue 35) through
// /act like any element: a click by id lands on the span it names (the
// page records it), the id is the same on the next observation, and the
// act-time checks hold for them too: covered after the observation fails
// element_covered without a click going out, and a page's full-area cover
// hides what is under it from the list.
func TestElementsActClickable(t *testing.T) {
	e := startCorpusEnv(t)
	ctx := browsertest.Ctx(t, 5*time.Minute)
	lg := e.site.log
	openPage := func(name string) {
		t.Helper()
		lg.reset()
		e.open(t, e.site.a+"/"+name+".html")
		if !lg.waitFor(20*time.Second, func() bool { return len(lg.truths) >= 1 }) {
			t.Fatalf("%s: no truth", name)
		}
	}
	elems := func() []shared.Element {
		t.Helper()
		o, _, _, err := e.observe(true)
		if err != nil {
			t.Fatal(err)
		}
		if o.ElementsError != nil {
			t.Fatalf("elementsError %+v", o.ElementsError)
		}
		return o.Elements
	}
	hitsNow := func() []string {
		lg.mu.Lock()
		defer lg.mu.Unlock()
		return append([]string(nil), lg.hits...)
	}

	openPage("32-span-links")
	els := elems()
	span := findEl(t, els, "clickable", "the pointerdown article")
	for _, el := range els {
		if el.Name == "underlined text that does nothing" || el.Name == "with bold" {
			t.Fatalf("listed an element with no way to click it: %+v", el)
		}
	}
	again := elems()
	if a := findEl(t, again, "clickable", "the pointerdown article"); a.ID != span.ID || a.Box != span.Box {
		t.Fatalf("the clickable changed between observations")
	}
	res, code, body := e.act(map[string]any{"type": "click", "element": span.ID})
	if code != 200 || len(res) != 1 || !res[0].OK {
		t.Fatalf("click a clickable by id: %d %s", code, body)
	}
	if !lg.waitFor(5*time.Second, func() bool { return len(lg.hits) >= 1 }) || hitsNow()[0] != "l-pointerdown" {
		t.Fatalf("the click by id landed on %v, want [l-pointerdown]", hitsNow())
	}

	// Covered after the observation: refused at act time, no click.
	b, err := e.bs.Browser(ctx, corpusScreen)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EvalFront(ctx, `const d = document.createElement("div"); d.style.cssText = "position:fixed;inset:0;background:rgba(0,0,0,.3)"; document.body.appendChild(d); 1`); err != nil {
		t.Fatal(err)
	}
	n := len(hitsNow())
	res, code, body = e.act(map[string]any{"type": "click", "element": span.ID})
	if code != 200 || len(res) != 1 || res[0].Error == nil || res[0].Error.Code != shared.CodeElementCovered {
		t.Fatalf("covered clickable: %d %s", code, body)
	}
	if len(hitsNow()) != n {
		t.Fatalf("a click went out for a covered clickable: %v", hitsNow())
	}

	// A full-area cover: it is listed, what it covers is not.
	openPage("31-cover")
	els = elems()
	findEl(t, els, "clickable", "Click here to start")
	for _, el := range els {
		if strings.HasPrefix(el.Name, "Under the cover") {
			t.Fatalf("a control under the cover is listed: %+v", el)
		}
	}
}

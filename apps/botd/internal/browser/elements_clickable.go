package browser

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/domdebugger"
	"github.com/chromedp/cdproto/runtime"

	"github.com/open-bot/computer/apps/botd/internal/cdp"
	"github.com/open-bot/computer/pkg/shared"
)

// Clickables (issue 35): what a person can click that has no role — a div
// or span with a click handler (a page's "click to start" cover, a link
// written as a span, a card, the div a React onClick renders, the options
// of a hand-made dropdown). Such an element is listed with role
// "clickable" and a name from its text, under the same hidden, covered and
// off-screen rules, ids and act-time checks as every other element.
//
// The signals come from the DOM snapshot the elements already read, and
// from one DevTools call per target made beside the accessibility tree:
//   - isClickable: Blink's own "responds to mouse clicks" (a click,
//     mousedown or mouseup listener, added with addEventListener or set as
//     an on… property or attribute; links; editable content);
//   - DOMDebugger.getEventListeners on the document, whole subtree through
//     same-origin frames and shadow roots: the nodes with a pointerdown or
//     pointerup listener (which isClickable does not count; a page script
//     cannot see listeners, DevTools can);
//   - the onclick attribute;
//   - cursor: pointer, when the parent's cursor is not pointer too (the
//     pointer of a child is inherited: the outermost element that has it is
//     the one listed).
//
// Not listed: a node inside a listed control (its click is the control's),
// a native control the accessibility tree left out (a link behind a modal
// dialog), a node the tree says is inert, a wrapper around one listed
// control and nothing else to read (a card whose only text is its link:
// the link is listed), a listener-only
// container holding several listed controls (delegation: React's root, a
// list's handler), anything whose centre falls on a listed control inside
// it (a click there goes to that control), html, body, labels (their
// control is listed), and nodes with pointer-events: none. A heading or
// image inside a listed clickable is not listed apart: its text names the
// clickable.

// clickableSkipTags are elements never listed as clickable: the document's
// own, labels (their control is listed) and frames (their content is).
var clickableSkipTags = map[string]bool{
	"HTML": true, "BODY": true, "LABEL": true, "IFRAME": true, "FRAME": true, "#document": true,
	"OPTION": true, "OPTGROUP": true, "AREA": true, "MAP": true,
}

// nativeControlTags (and links with an href) are controls the
// accessibility tree lists under their own role: one it left out is inert (behind a modal dialog) or hidden, not
// a clickable.
var nativeControlTags = map[string]bool{
	"BUTTON": true, "INPUT": true, "SELECT": true, "TEXTAREA": true, "SUMMARY": true,
}

// inertNodes are the nodes the accessibility tree says are inert (behind
// a modal dialog, or under inert): no click reaches them.
func inertNodes(nodes []*accessibility.Node) map[cdpapi.BackendNodeID]bool {
	out := map[cdpapi.BackendNodeID]bool{}
	for _, n := range nodes {
		if !n.Ignored || n.BackendDOMNodeID == 0 {
			continue
		}
		for _, r := range n.IgnoredReasons {
			switch r.Name {
			case "inertElement", "inertSubtree", "activeModalDialog":
				out[n.BackendDOMNodeID] = true
			}
		}
	}
	return out
}

// clickSignal says why node ni of d may be clicked: 0 not at all, else
// clickListener (a click-type listener or an onclick attribute) or
// clickPointer (the outermost element of a cursor: pointer).
func (d *doc) clickSignal(ni int, clickable map[int]bool, pointer map[cdpapi.BackendNodeID]bool) int {
	if d.snap.Nodes.NodeType[ni] != 1 || d.layoutOf[ni] < 0 {
		return 0
	}
	if clickable[ni] || pointer[d.snap.Nodes.BackendNodeID[ni]] || d.attr(ni, "onclick") != "" {
		return clickListener
	}
	li := d.layoutOf[ni]
	if d.style(li, stCursor) != "pointer" {
		return 0
	}
	p := int(d.snap.Nodes.ParentIndex[ni])
	for p >= 0 && d.layoutOf[p] < 0 {
		// A shadow root or display: contents has no layout: its host's
		// (or its own parent's) cursor is what it inherits.
		p = int(d.snap.Nodes.ParentIndex[p])
	}
	if p >= 0 && d.style(d.layoutOf[p], stCursor) == "pointer" {
		return 0
	}
	return clickPointer
}

const (
	clickListener = 1
	clickPointer  = 2
)

// addClickables adds the clickable elements of document d that the
// accessibility tree did not list (see above).
func (b *Browser) addClickables(sc *scan, d *doc, main bool, pointer, inert map[cdpapi.BackendNodeID]bool) {
	nodes := d.snap.Nodes
	if len(nodes.NodeType) != len(nodes.ParentIndex) {
		return
	}
	clickable := map[int]bool{}
	if ic := nodes.IsClickable; ic != nil {
		for _, i := range ic.Index {
			clickable[int(i)] = true
		}
	}
	// listed: this document's nodes already listed as controls (the
	// accessibility tree's interactive roles), then the clickables added.
	listed := map[int]*candidate{}
	for _, c := range sc.all {
		if c.d == d && (interactiveRoles[c.el.Role] || c.el.Role == "clickable") {
			listed[c.node] = c
		}
	}
	fn := b.frameNumber(d.frame, main)
	var added []*candidate
	signal := map[int]int{}
	for ni := range nodes.ParentIndex {
		sig := d.clickSignal(ni, clickable, pointer)
		if sig == 0 {
			continue
		}
		tag := strings.ToUpper(d.str(int64(nodes.NodeName[ni])))
		if clickableSkipTags[tag] || nativeControlTags[tag] || tag == "A" && d.attr(ni, "href") != "" || d.style(d.layoutOf[ni], stPointerEvents) == "none" || inert[nodes.BackendNodeID[ni]] {
			continue
		}
		id := "e" + strconv.FormatInt(int64(nodes.BackendNodeID[ni]), 10)
		if fn != 0 {
			id += "f" + strconv.Itoa(fn)
		}
		if _, dup := sc.byID[id]; dup {
			continue // listed already (a link, a heading, an image…)
		}
		// Inside a listed control: its click is the control's.
		inside := false
		for p := int(nodes.ParentIndex[ni]); p >= 0; p = int(nodes.ParentIndex[p]) {
			if c := listed[p]; c != nil && c.el.Role != "clickable" {
				inside = true
				break
			}
		}
		if inside {
			continue
		}
		c := &candidate{d: d, node: ni, el: shared.Element{ID: id, Role: "clickable", Name: clickableName(d, ni)}}
		signal[ni] = sig
		added = append(added, c)
		listed[ni] = c
	}
	if len(added) == 0 {
		return
	}
	// The listed nodes under each clickable.
	under := map[int][]*candidate{}
	for ni, c := range listed {
		for p := int(nodes.ParentIndex[ni]); p >= 0; p = int(nodes.ParentIndex[p]) {
			if listed[p] != nil && listed[p].el.Role == "clickable" {
				under[p] = append(under[p], c)
			}
		}
	}
	kept := map[int]bool{}
	for _, c := range added {
		b.place(c)
		kids := under[c.node]
		switch {
		case len(kids) == 1 && strings.TrimSpace(d.textOutside(c.node, kids[0].node)) == "":
			continue // a wrapper around one control: the control is listed
		case len(kids) >= 2 && signal[c.node] == clickListener && d.style(d.layoutOf[c.node], stCursor) != "pointer":
			continue // a delegating container
		}
		if c.why == "" && len(kids) > 0 {
			// A click at the centre must reach this element, not a listed
			// one inside it.
			p := c.el.Box.Center()
			x, y := float64(p.X)+0.5, float64(p.Y)+0.5
			hidden := false
			for _, k := range kids {
				kb := k.el.Box
				if k.why == "" && x >= float64(kb.X) && x < float64(kb.X+kb.W) && y >= float64(kb.Y) && y < float64(kb.Y+kb.H) {
					hidden = true
					break
				}
			}
			if hidden {
				continue
			}
		}
		sc.all = append(sc.all, c)
		sc.byID[c.el.ID] = c
		kept[c.node] = true
	}
	if len(kept) == 0 {
		return
	}
	// A heading or an image inside a listed clickable is part of it (its
	// text is the clickable's name): listed apart, it would take the
	// clickable's clicks.
	out := sc.all[:0]
	for _, c := range sc.all {
		if c.d == d && c.el.Role != "clickable" && !interactiveRoles[c.el.Role] {
			in := false
			for p := int(nodes.ParentIndex[c.node]); p >= 0; p = int(nodes.ParentIndex[p]) {
				if kept[p] {
					in = true
					break
				}
			}
			if in {
				delete(sc.byID, c.el.ID)
				continue
			}
		}
		out = append(out, c)
	}
	sc.all = out
}

// clickableName is a clickable's name: its aria-label, title or alt, else
// its text, else the alt or title of an image inside it.
func clickableName(d *doc, ni int) string {
	for _, a := range []string{"aria-label", "title", "alt"} {
		if v := strings.TrimSpace(d.attr(ni, a)); v != "" {
			return cut(v)
		}
	}
	if t := cut(d.text(ni)); t != "" {
		return t
	}
	pi := d.snap.Nodes.ParentIndex
	for j := ni + 1; j < len(pi) && d.isAncestor(ni, j); j++ {
		if strings.EqualFold(d.str(int64(d.snap.Nodes.NodeName[j])), "IMG") || strings.EqualFold(d.str(int64(d.snap.Nodes.NodeName[j])), "svg") {
			for _, a := range []string{"alt", "aria-label", "title"} {
				if v := strings.TrimSpace(d.attr(j, a)); v != "" {
					return cut(v)
				}
			}
		}
	}
	return ""
}

// textOutside is the text under node ni that is not under node skip.
func (d *doc) textOutside(ni, skip int) string {
	var b strings.Builder
	pi := d.snap.Nodes.ParentIndex
	for j := ni + 1; j < len(pi) && b.Len() < 4*shared.MaxElementName; j++ {
		if !d.isAncestor(ni, j) {
			break
		}
		if d.snap.Nodes.NodeType[j] == 3 && !d.isAncestor(skip, j) {
			b.WriteString(d.str(int64(d.snap.Nodes.NodeValue[j])))
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// pointerListeners is one target's nodes with a pointerdown or pointerup
// listener; done is closed when it answered (nodes is empty when it could
// not be read: the clickables then rest on the snapshot alone).
type pointerListeners struct {
	done  chan struct{}
	nodes map[cdpapi.BackendNodeID]bool
}

// pointerListenerWait bounds the listener reading: a page whose script
// thread is busy answers late, and the elements do not wait for it.
const pointerListenerWait = 2 * time.Second

// fetchPointerListeners asks target s for the nodes of its documents that
// have a pointerdown or pointerup listener.
func fetchPointerListeners(ctx context.Context, s *cdp.Session) *pointerListeners {
	pl := &pointerListeners{done: make(chan struct{}), nodes: map[cdpapi.BackendNodeID]bool{}}
	go func() {
		defer close(pl.done)
		ctx, cancel := context.WithTimeout(ctx, pointerListenerWait)
		defer cancel()
		yes := true
		const group = "botd-elements"
		r, err := cdpapi.Call(ctx, s, runtime.Evaluate, runtime.EvaluateParams{Expression: "document", ObjectGroup: group, Silent: &yes})
		if err != nil || r.Result == nil || r.Result.ObjectID == "" {
			return
		}
		defer func() {
			go func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pointerListenerWait)
				defer cancel()
				_, _ = cdpapi.Call(rctx, s, runtime.ReleaseObjectGroup, runtime.ReleaseObjectGroupParams{ObjectGroup: group})
			}()
		}()
		all := int64(-1)
		l, err := cdpapi.Call(ctx, s, domdebugger.GetEventListeners, domdebugger.GetEventListenersParams{ObjectID: r.Result.ObjectID, Depth: &all, Pierce: &yes})
		if err != nil {
			return
		}
		for _, e := range l.Listeners {
			if e.BackendNodeID != 0 && (e.Type == "pointerdown" || e.Type == "pointerup") {
				pl.nodes[e.BackendNodeID] = true
			}
		}
	}()
	return pl
}

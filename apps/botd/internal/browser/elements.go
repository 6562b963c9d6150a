package browser

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/browser"
	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/domsnapshot"
	"github.com/chromedp/cdproto/target"

	"github.com/open-bot/computer/apps/botd/internal/cdp"
	"github.com/open-bot/computer/pkg/shared"
)

// Elements (issue 23): the screen's Chromium tells what is on its page as
// a list of {id, role, name, value, states, box}, in screen pixels.
//
// Where each part comes from, per target (the page, and every
// cross-origin iframe, which is a target of its own that
// Target.setAutoAttach{flatten} hands us a session for):
//   - role, name, value and states: Accessibility.getFullAXTree, once per
//     document (the page's and each same-origin iframe's);
//   - boxes, visibility, overflow clips, paint order: one
//     DOMSnapshot.captureSnapshot, which covers every document of the
//     target at once (boxes in document coordinates, layout units: the
//     page zoom is in them);
//   - the page's place on the screen: Browser.getWindowForTarget (the
//     window's bounds) and the viewport's offset in the window (outer
//     minus inner size, the toolbar above it).
//
// One snapshot per target instead of one DOM.getBoxModel per node is what
// keeps a long page cheap (BenchmarkElements measures both; on this
// machine, p50: 1.7 vs 5.1 ms for a 32-node form, 3.1 vs 9.9 ms for 75
// nodes, 82 vs 397 ms for a 3,000-node list). Past bigPage nodes the
// accessibility tree is read only for the on-screen nodes that may be
// controls (the whole tree of that list cost ~300 ms).
//
// An element is left out when hidden, off screen (outside the viewport,
// its iframe or a scrolling ancestor) or covered at its centre by
// something painted later (a modal's backdrop). Ids are "e<backendNodeId>"
// for the page's own document and "e<backendNodeId>f<n>" in frames (n
// numbers the browser's frames as first seen): the same on every
// observation of an unchanged page.

// elemState is one browser's element bookkeeping.
type elemState struct {
	// mu guards frames, issued, last and attached.
	mu sync.Mutex
	// frames numbers frames as first seen, for ids.
	frames map[cdpapi.FrameID]int
	// issued remembers the role of every id an observation returned, so
	// an id that now names another node (or none) is stale, not unknown.
	issued map[string]string
	// attached holds the auto-attached iframe targets under each session.
	attached map[target.SessionID]*children
}

// children are the iframe targets attached under one session.
type children struct {
	// mu guards list.
	mu   sync.Mutex
	list map[target.ID]*cdp.Session
}

// The styles the snapshot returns for every layout node, in this order.
var snapStyles = []string{"visibility", "pointer-events", "overflow-x", "overflow-y", "border-left-width", "border-top-width", "padding-left", "padding-top", "-webkit-text-security", "cursor"}

const (
	stVisibility = iota
	stPointerEvents
	stOverflowX
	stOverflowY
	stBorderLeft
	stBorderTop
	stPadLeft
	stPadTop
	stTextSecurity
	stCursor
)

// rect is a rectangle in float pixels.
type rect struct{ x0, y0, x1, y1 float64 }

func (r rect) empty() bool { return r.x1-r.x0 < 1 || r.y1-r.y0 < 1 }

func (r rect) and(o rect) rect {
	return rect{math.Max(r.x0, o.x0), math.Max(r.y0, o.y0), math.Min(r.x1, o.x1), math.Min(r.y1, o.y1)}
}

func (r rect) contains(x, y float64) bool { return x >= r.x0 && x < r.x1 && y >= r.y0 && y < r.y1 }

// doc is one document of a snapshot placed on the screen.
type doc struct {
	snap    *domsnapshot.DocumentSnapshot
	strs    []string
	session *cdp.Session
	frame   cdpapi.FrameID
	// ox, oy: where the document's (0,0) minus its scroll lands on the
	// screen; a layout box (x,y) is at (ox+x*u, oy+y*u).
	ox, oy, u float64
	// clip is the part of the screen the document shows (its viewport,
	// cut by every frame around it).
	clip rect
	// parent and owner: the document holding this one's frame element
	// (nil for the page's own document).
	parent *doc
	owner  int
	// layoutOf maps a node index to its layout index (-1: none).
	layoutOf []int
	// byBackend maps a backend node id to its node index.
	byBackend map[cdpapi.BackendNodeID]int
	// main is true for the front page's own document.
	main bool
	// zoom is the page's layout units per CSS pixel (page zoom × device
	// scale: devicePixelRatio).
	zoom float64
}

func (d *doc) str(i int64) string {
	if i < 0 || int(i) >= len(d.strs) {
		return ""
	}
	return d.strs[i]
}

// style is layout node li's value of snapStyles[k].
func (d *doc) style(li, k int) string {
	st := d.snap.Layout.Styles
	if li < 0 || li >= len(st) || k >= len(st[li]) {
		return ""
	}
	return d.str(st[li][k])
}

// bounds is layout node li's box in document coordinates.
func (d *doc) bounds(li int) rect {
	b := d.snap.Layout.Bounds[li]
	if len(b) < 4 {
		return rect{}
	}
	return rect{b[0], b[1], b[0] + b[2], b[1] + b[3]}
}

// toScreen maps a document rectangle onto the screen.
func (d *doc) toScreen(r rect) rect {
	return rect{d.ox + r.x0*d.u, d.oy + r.y0*d.u, d.ox + r.x1*d.u, d.oy + r.y1*d.u}
}

// contentBox is frame owner node ni's content box (inside border and
// padding) in document coordinates.
func (d *doc) contentBox(ni int) (rect, bool) {
	li := d.layoutOf[ni]
	if li < 0 {
		return rect{}, false
	}
	r := d.bounds(li)
	px := func(k int) float64 {
		v, _ := strconv.ParseFloat(strings.TrimSuffix(d.style(li, k), "px"), 64)
		return v
	}
	r.x0 += px(stBorderLeft) + px(stPadLeft)
	r.y0 += px(stBorderTop) + px(stPadTop)
	// The right and bottom edges are left as they are: the frame's own
	// viewport clips its content anyway.
	return r, true
}

// isAncestor reports whether node a is node n or one of its ancestors.
func (d *doc) isAncestor(a, n int) bool {
	pi := d.snap.Nodes.ParentIndex
	for n >= 0 && n < len(pi) {
		if n == a {
			return true
		}
		n = int(pi[n])
	}
	return false
}

// covered reports whether something painted after node ni (not inside it,
// not around it) takes pointer events at document point (x,y); then the
// same for the frame element that holds this document, in its parent.
func (d *doc) covered(ni int, x, y float64) bool {
	li := d.layoutOf[ni]
	if li >= 0 && len(d.snap.Layout.PaintOrders) == len(d.snap.Layout.NodeIndex) {
		mine := d.snap.Layout.PaintOrders[li]
		for lj, nj := range d.snap.Layout.NodeIndex {
			if d.snap.Layout.PaintOrders[lj] <= mine || !d.bounds(lj).contains(x, y) {
				continue
			}
			n := int(nj)
			if d.isAncestor(ni, n) || d.isAncestor(n, ni) {
				continue
			}
			if d.style(lj, stPointerEvents) == "none" || d.style(lj, stVisibility) != "visible" {
				continue
			}
			if d.snap.Nodes.NodeType != nil && n < len(d.snap.Nodes.NodeType) && d.snap.Nodes.NodeType[n] == 3 {
				// A text node's box is its parent's business; its element
				// is checked on its own.
				continue
			}
			return true
		}
	}
	if d.parent == nil {
		return false
	}
	// The point in the parent document: through the frame element's box.
	p := d.parent
	cb, ok := p.contentBox(d.owner)
	if !ok {
		return false
	}
	sx, sy := d.snap.ScrollOffsetX, d.snap.ScrollOffsetY
	return p.covered(d.owner, cb.x0+(x-sx)*d.u/p.u, cb.y0+(y-sy)*d.u/p.u)
}

// clipOf is node ni's visible part in document coordinates: its box cut by
// every ancestor that clips its overflow.
func (d *doc) clipOf(ni int) (rect, bool) {
	li := d.layoutOf[ni]
	if li < 0 {
		return rect{}, false
	}
	r := d.bounds(li)
	pi := d.snap.Nodes.ParentIndex
	for n := int(pi[ni]); n >= 0; n = int(pi[n]) {
		lj := d.layoutOf[n]
		if lj < 0 {
			continue
		}
		ox, oy := d.style(lj, stOverflowX), d.style(lj, stOverflowY)
		if (ox == "visible" || ox == "") && (oy == "visible" || oy == "") {
			continue
		}
		name := d.str(int64(d.snap.Nodes.NodeName[n]))
		if name == "HTML" || name == "BODY" || name == "#document" {
			continue // the viewport clips those
		}
		r = r.and(d.bounds(lj))
	}
	return r, true
}

// attr is node ni's attribute name ("" when absent).
func (d *doc) attr(ni int, name string) string {
	if ni >= len(d.snap.Nodes.Attributes) {
		return ""
	}
	a := d.snap.Nodes.Attributes[ni]
	for i := 0; i+1 < len(a); i += 2 {
		if strings.EqualFold(d.str(a[i]), name) {
			return d.str(a[i+1])
		}
	}
	return ""
}

func newDoc(snap *domsnapshot.DocumentSnapshot, strs []string, s *cdp.Session) *doc {
	d := &doc{snap: snap, strs: strs, session: s, u: 1, byBackend: map[cdpapi.BackendNodeID]int{}}
	n := len(snap.Nodes.ParentIndex)
	d.layoutOf = make([]int, n)
	for i := range d.layoutOf {
		d.layoutOf[i] = -1
	}
	for li, ni := range snap.Layout.NodeIndex {
		if int(ni) < n {
			d.layoutOf[ni] = li
		}
	}
	for i, b := range snap.Nodes.BackendNodeID {
		d.byBackend[b] = i
	}
	d.frame = cdpapi.FrameID(d.str(int64(snap.FrameID)))
	return d
}

// candidate is one element found, with why it may not be shown.
type candidate struct {
	el   shared.Element
	d    *doc
	node int
	// why is "" for a shown element, else offscreen, covered or hidden.
	why string
}

// scan is one reading of the page's elements.
type scan struct {
	zoom  float64
	all   []*candidate
	byID  map[string]*candidate
	shown []shared.Element
	// secret: the fields that received a secret (secretfields.go).
	secret *secretSet
	// masksOnly: only masks is wanted (the boxes to paint over).
	masksOnly bool
	masks     []shared.Box
}

// interactiveRoles are roles a person acts on.
var interactiveRoles = map[string]bool{
	"button": true, "link": true, "textbox": true, "searchbox": true, "checkbox": true, "radio": true,
	"combobox": true, "listbox": true, "option": true, "menuitem": true, "menuitemcheckbox": true,
	"menuitemradio": true, "tab": true, "switch": true, "slider": true, "spinbutton": true, "treeitem": true,
	"DisclosureTriangle": true, "PopUpButton": true, "ToggleButton": true, "MenuListOption": true,
}

// labelledRoles are shown when they have a name, interactive or not.
var labelledRoles = map[string]bool{
	"heading": true, "img": true, "image": true, "dialog": true, "alertdialog": true, "alert": true,
}

// valueRoles carry a value worth showing.
var valueRoles = map[string]bool{
	"textbox": true, "searchbox": true, "combobox": true, "slider": true, "spinbutton": true,
}

func axString(v *accessibility.Value) string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	var s any
	if err := jsonv2.Unmarshal(v.Value, &s, cdp.DecodeOptions()); err != nil {
		return ""
	}
	switch x := s.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

// cut shortens s to at most shared.MaxElementName characters.
func cut(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= shared.MaxElementName {
		return s
	}
	r := []rune(s)
	return string(r[:shared.MaxElementName-1]) + "…"
}

// states turns AX properties into the element's states.
func states(props []*accessibility.Property) (out []string, focusable bool) {
	for _, p := range props {
		v := axString(p.Value)
		switch p.Name {
		case accessibility.PropertyNameFocusable:
			focusable = v == "true"
		case accessibility.PropertyNameFocused, accessibility.PropertyNameDisabled, accessibility.PropertyNameSelected,
			accessibility.PropertyNameRequired, accessibility.PropertyNameReadonly:
			if v == "true" {
				out = append(out, string(p.Name))
			}
		case accessibility.PropertyNameChecked, accessibility.PropertyNamePressed:
			switch v {
			case "true":
				out = append(out, string(p.Name))
			case "mixed":
				out = append(out, "mixed")
			}
		case accessibility.PropertyNameExpanded:
			if v == "true" {
				out = append(out, "expanded")
			} else if v == "false" {
				out = append(out, "collapsed")
			}
		case accessibility.PropertyNameInvalid:
			if v != "" && v != "false" {
				out = append(out, "invalid")
			}
		}
	}
	return out, focusable
}

// errNoElements is the answer when the page cannot be read for elements.
func elementsUnavailable(format string, args ...any) error {
	return shared.Errorf(http.StatusServiceUnavailable, shared.CodeElementsUnavailable, format, args...)
}

// frameNumber is frame f's number in ids (0 for the page's own document).
func (b *Browser) frameNumber(f cdpapi.FrameID, main bool) int {
	if main {
		return 0
	}
	b.elems.mu.Lock()
	defer b.elems.mu.Unlock()
	if b.elems.frames == nil {
		b.elems.frames = map[cdpapi.FrameID]int{}
	}
	n, ok := b.elems.frames[f]
	if !ok {
		n = len(b.elems.frames) + 1
		b.elems.frames[f] = n
	}
	return n
}

// autoAttach makes sure the iframe targets under session s are attached
// (flat sessions) and returns them.
func (b *Browser) autoAttach(ctx context.Context, s *cdp.Session) *children {
	b.elems.mu.Lock()
	if b.elems.attached == nil {
		b.elems.attached = map[target.SessionID]*children{}
	}
	ch := b.elems.attached[s.ID()]
	if ch != nil {
		b.elems.mu.Unlock()
		return ch
	}
	ch = &children{list: map[target.ID]*cdp.Session{}}
	b.elems.attached[s.ID()] = ch
	b.elems.mu.Unlock()

	attached := cdpapi.Events(b.ctx, s, target.AttachedToTarget)
	detached := cdpapi.Events(b.ctx, s, target.DetachedFromTarget)
	go func() {
		for ev, err := range attached {
			if err != nil {
				return
			}
			if ev.TargetInfo == nil || ev.TargetInfo.Type != "iframe" {
				continue
			}
			ch.mu.Lock()
			ch.list[ev.TargetInfo.TargetID] = b.conn.Session(ev.SessionID)
			ch.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range detached {
			if err != nil {
				return
			}
			ch.mu.Lock()
			for id, cs := range ch.list {
				if cs.ID() == ev.SessionID {
					delete(ch.list, id)
				}
			}
			ch.mu.Unlock()
		}
	}()
	flatten := true
	// Attached iframes arrive as events before the reply.
	if _, err := cdpapi.Call(ctx, s, target.SetAutoAttach, target.SetAutoAttachParams{AutoAttach: true, Flatten: &flatten}); err != nil {
		b.log.Debug().Err(err).Msg("setAutoAttach")
		b.elems.mu.Lock()
		delete(b.elems.attached, s.ID())
		b.elems.mu.Unlock()
	}
	return ch
}

func (c *children) snapshot() map[target.ID]*cdp.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[target.ID]*cdp.Session, len(c.list))
	for k, v := range c.list {
		out[k] = v
	}
	return out
}

// viewportScript measures the page's viewport: its size without
// scrollbars (CSS px), the inner and outer window sizes and the device
// pixel ratio (page zoom × device scale).
const viewportScript = `[document.documentElement.clientWidth, document.documentElement.clientHeight, innerWidth, innerHeight, outerWidth, outerHeight, devicePixelRatio]`

// Elements reads the visible elements of the page in front.
func (b *Browser) Elements(ctx context.Context) ([]shared.Element, error) {
	sc, err := b.scanFront(ctx)
	if err != nil {
		return nil, err
	}
	return sc.shown, nil
}

// SecretBoxes lists the screen boxes to paint over in a screenshot of the
// page in front: the fields that received a secret and show their text
// now (all of them but masked password fields), or the whole viewport
// when the page counts whole (secretfields.go). None when no field of the
// page received a secret.
func (b *Browser) SecretBoxes(ctx context.Context) ([]shared.Box, error) {
	sc, err := b.scanFrontWith(ctx, true)
	if err != nil {
		return nil, err
	}
	return sc.masks, nil
}

// scanFront reads every element candidate of the page in front.
func (b *Browser) scanFront(ctx context.Context) (*scan, error) {
	return b.scanFrontWith(ctx, false)
}

// scanFrontWith is scanFront; with masksOnly it only finds the boxes of
// the fields that received a secret (and returns at once when there are
// none).
func (b *Browser) scanFrontWith(ctx context.Context, masksOnly bool) (*scan, error) {
	if err := b.alive(); err != nil {
		return nil, err
	}
	t, err := b.front(ctx)
	if err != nil {
		return nil, err
	}
	s, err := b.session(ctx, t.TargetID)
	if err != nil {
		return nil, err
	}
	secret := b.secretFieldsOf(ctx, s)
	if masksOnly && secret == nil {
		return &scan{masksOnly: true}, nil
	}
	// The window, the viewport, the snapshot and the page's accessibility
	// tree are asked for at once; they do not depend on each other.
	kids := b.autoAttach(ctx, s)
	pre := fetchTarget(ctx, s)
	var vp [7]float64
	vpErr := make(chan error, 1)
	go func() { vpErr <- b.eval(ctx, s, 0, viewportScript, &vp) }()
	win, err := cdpapi.Call(ctx, b.conn.Browser(), browser.GetWindowForTarget, browser.GetWindowForTargetParams{TargetID: t.TargetID})
	verr := <-vpErr
	<-pre.done
	if err != nil {
		return nil, b.wrap(err)
	}
	sc := &scan{byID: map[string]*candidate{}, shown: []shared.Element{}, zoom: 1, secret: secret, masksOnly: masksOnly}
	if win.Bounds == nil || win.Bounds.WindowState == browser.WindowStateMinimized {
		return sc, nil
	}
	if verr != nil {
		return nil, b.wrap(verr)
	}
	var left, top float64
	if win.Bounds.Left != nil {
		left = float64(*win.Bounds.Left)
	}
	if win.Bounds.Top != nil {
		top = float64(*win.Bounds.Top)
	}
	dpr := vp[6]
	if dpr <= 0 {
		dpr = 1
	}
	sc.zoom = dpr
	// The viewport sits at the bottom of the window, centred across it
	// (the toolbar is above it; no frame below or beside it).
	innerW, innerH := vp[2]*dpr, vp[3]*dpr
	ox := left + math.Max(0, (vp[4]-innerW)/2)
	oy := top + math.Max(0, vp[5]-innerH)
	clip := rect{ox, oy, ox + vp[0]*dpr, oy + vp[1]*dpr}.and(rect{0, 0, float64(b.o.Width), float64(b.o.Height)})
	// Layout units are CSS pixels times the layout zoom (page zoom ×
	// device scale), which is the screen's pixels: one unit per pixel.
	if err := b.scanTarget(ctx, sc, s, kids, pre, nil, -1, ox, oy, 1, clip, true, 0); err != nil {
		return nil, err
	}
	if masksOnly {
		return sc, nil
	}
	// Document order, the shown ones first up to the cap.
	b.elems.mu.Lock()
	if b.elems.issued == nil || len(b.elems.issued) > maxIssued {
		// Bounded: past the cap only this observation's ids stay known
		// (older ones then answer element_not_found, not element_stale).
		b.elems.issued = map[string]string{}
	}
	for _, c := range sc.all {
		if c.why != "" {
			continue
		}
		if len(sc.shown) >= shared.MaxElements {
			c.why = "capped"
			continue
		}
		sc.shown = append(sc.shown, c.el)
		b.elems.issued[c.el.ID] = c.el.Role
	}
	b.elems.mu.Unlock()
	return sc, nil
}

// fetched is one target's snapshot, asked for as early as possible; done
// is closed when it answered.
type fetched struct {
	done chan struct{}
	snap domsnapshot.CaptureSnapshotResult
	err  error
}

func fetchTarget(ctx context.Context, s *cdp.Session) *fetched {
	f := &fetched{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		yes := true
		f.snap, f.err = cdpapi.Call(ctx, s, domsnapshot.CaptureSnapshot, domsnapshot.CaptureSnapshotParams{ComputedStyles: snapStyles, IncludePaintOrder: &yes})
	}()
	return f
}

// bigPage is the number of DOM nodes past which a target's accessibility
// tree is read node by node (Accessibility.getPartialAXTree for the nodes
// on screen that can be controls) instead of whole: the whole tree of a
// 1,000-item list took ~300 ms, most of it for nodes nobody sees.
const bigPage = 1500

// partialCandidate reports whether node ni may be a control or a labelled
// element worth asking the accessibility tree about.
func (d *doc) partialCandidate(ni int, clickable map[int]bool) bool {
	if d.snap.Nodes.NodeType[ni] != 1 {
		return false
	}
	switch strings.ToUpper(d.str(int64(d.snap.Nodes.NodeName[ni]))) {
	case "A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY", "H1", "H2", "H3", "H4", "H5", "H6", "IMG", "DIALOG", "OPTION":
		return true
	}
	if clickable[ni] {
		return true
	}
	for _, a := range []string{"role", "tabindex", "contenteditable", "aria-label"} {
		if d.attr(ni, a) != "" {
			return true
		}
	}
	return false
}

// partialAX asks for the accessibility node of every node of d that is on
// screen and may be a control.
func (b *Browser) partialAX(ctx context.Context, d *doc) []*accessibility.Node {
	clickable := map[int]bool{}
	if ic := d.snap.Nodes.IsClickable; ic != nil {
		for _, i := range ic.Index {
			clickable[int(i)] = true
		}
	}
	var ids []cdpapi.BackendNodeID
	for ni := range d.snap.Nodes.ParentIndex {
		if d.layoutOf[ni] < 0 || !d.partialCandidate(ni, clickable) {
			continue
		}
		vis, _ := d.clipOf(ni)
		if d.toScreen(vis).and(d.clip).empty() {
			continue
		}
		ids = append(ids, d.snap.Nodes.BackendNodeID[ni])
	}
	out := make([][]*accessibility.Node, len(ids))
	var wg sync.WaitGroup
	no := false
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := cdpapi.Call(ctx, d.session, accessibility.GetPartialAXTree, accessibility.GetPartialAXTreeParams{BackendNodeID: id, FetchRelatives: &no})
			if err == nil {
				out[i] = r.Nodes
			}
		}()
	}
	wg.Wait()
	var nodes []*accessibility.Node
	for _, ns := range out {
		nodes = append(nodes, ns...)
	}
	return nodes
}

// maxIssued bounds how many issued ids a browser remembers.
const maxIssued = 20000

// maxFrameDepth bounds how deep nested cross-origin frames are followed.
const maxFrameDepth = 4

// scanTarget reads one target (the page, or a cross-origin iframe whose
// frame element is node owner of parent): its snapshot, its documents'
// accessibility trees, then its own iframe targets.
func (b *Browser) scanTarget(ctx context.Context, sc *scan, s *cdp.Session, kids *children, pre *fetched, parent *doc, owner int, ox, oy, u float64, clip rect, main bool, depth int) error {
	if pre == nil {
		pre = fetchTarget(ctx, s)
	}
	<-pre.done
	snap, err := pre.snap, pre.err
	if err != nil {
		if parent != nil {
			return nil // an iframe that went away meanwhile
		}
		return b.wrap(err)
	}
	if len(snap.Documents) == 0 {
		return nil
	}
	docs := make([]*doc, len(snap.Documents))
	for i, ds := range snap.Documents {
		docs[i] = newDoc(ds, snap.Strings, s)
		docs[i].zoom = sc.zoom
	}
	// Place each document: the first at (ox,oy) within clip; the others
	// inside their frame element (contentDocumentIndex) in their parent.
	root := docs[0]
	root.ox, root.oy, root.u, root.clip, root.parent, root.owner, root.main = ox-root.snap.ScrollOffsetX*u, oy-root.snap.ScrollOffsetY*u, u, clip, parent, owner, main
	placed := map[int]bool{0: true}
	for changed := true; changed; {
		changed = false
		for pi, p := range docs {
			if !placed[pi] || p.snap.Nodes.ContentDocumentIndex == nil {
				continue
			}
			cdi := p.snap.Nodes.ContentDocumentIndex
			for k, ni := range cdi.Index {
				ci := int(cdi.Value[k])
				if ci <= 0 || ci >= len(docs) || placed[ci] {
					continue
				}
				cb, ok := p.contentBox(int(ni))
				placed[ci] = true
				changed = true
				c := docs[ci]
				c.parent, c.owner, c.u = p, int(ni), p.u
				if !ok {
					c.clip = rect{}
					continue
				}
				fr := p.toScreen(cb)
				c.ox, c.oy = fr.x0-c.snap.ScrollOffsetX*c.u, fr.y0-c.snap.ScrollOffsetY*c.u
				c.clip = p.clip.and(fr).and(p.toScreen(mustClip(p, int(ni))))
			}
		}
	}
	if sc.masksOnly {
		if parent == nil {
			sc.masks = secretMasks(sc.secret, docs, clip)
		}
		return nil
	}
	// The accessibility tree of each placed document, all at once.
	type axRes struct {
		nodes []*accessibility.Node
		err   error
	}
	res := make([]axRes, len(docs))
	// Beside it, the pointer listeners of the target's nodes (clickables).
	lst := fetchPointerListeners(ctx, s)
	var wg sync.WaitGroup
	total := 0
	for _, d := range docs {
		total += len(d.snap.Nodes.ParentIndex)
	}
	for i, d := range docs {
		if !placed[i] || d.clip.empty() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if total > bigPage {
				res[i].nodes = b.partialAX(ctx, d)
				return
			}
			r, err := cdpapi.Call(ctx, s, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{FrameID: d.frame})
			if err != nil {
				res[i].err = err
				return
			}
			res[i].nodes = r.Nodes
		}()
	}
	wg.Wait()
	<-lst.done
	for i, d := range docs {
		if res[i].err != nil {
			if i == 0 && parent == nil {
				return b.wrap(res[i].err)
			}
			continue
		}
		b.addCandidates(sc, d, res[i].nodes, d.main && i == 0)
		b.addClickables(sc, d, d.main && i == 0, lst.nodes, inertNodes(res[i].nodes))
	}
	if depth >= maxFrameDepth || kids == nil {
		return nil
	}
	// Cross-origin iframes: targets of their own, placed through their
	// frame element in this target's documents.
	for id, cs := range kids.snapshot() {
		fo, err := cdpapi.Call(ctx, s, dom.GetFrameOwner, dom.GetFrameOwnerParams{FrameID: cdpapi.FrameID(id)})
		if err != nil {
			continue
		}
		for _, d := range docs {
			ni, ok := d.byBackend[fo.BackendNodeID]
			if !ok {
				continue
			}
			cb, ok := d.contentBox(ni)
			if !ok || d.clip.empty() {
				break
			}
			fr := d.toScreen(cb)
			fclip := d.clip.and(fr).and(d.toScreen(mustClip(d, ni)))
			if fclip.empty() {
				break
			}
			if err := b.scanTarget(ctx, sc, cs, b.autoAttach(ctx, cs), nil, d, ni, fr.x0, fr.y0, d.u, fclip, false, depth+1); err != nil {
				b.log.Debug().Err(err).Msg("elements of a cross-origin frame")
			}
			break
		}
	}
	return nil
}

// mustClip is node ni's overflow clip, or an empty rectangle.
func mustClip(d *doc, ni int) rect {
	r, _ := d.clipOf(ni)
	return r
}

// addCandidates turns a document's accessibility nodes into candidates.
func (b *Browser) addCandidates(sc *scan, d *doc, nodes []*accessibility.Node, main bool) {
	fn := b.frameNumber(d.frame, main)
	for _, n := range nodes {
		if n.BackendDOMNodeID == 0 {
			continue
		}
		role, name := axString(n.Role), cut(axString(n.Name))
		st, focusable := states(n.Properties)
		if n.Ignored {
			// aria-hidden hides a control from screen readers, not from a
			// person: a control hidden only that way is still listed.
			ni, ok := d.byBackend[n.BackendDOMNodeID]
			if !ok || !onlyAriaHidden(n.IgnoredReasons) {
				continue
			}
			if role, name = nativeRole(d, ni); role == "" {
				continue
			}
			st = append(st, "aria-hidden")
		} else if n.Role == nil {
			continue
		}
		switch {
		case interactiveRoles[role]:
		case labelledRoles[role] && name != "":
		case focusable && name != "" && role != "RootWebArea" && role != "WebArea" && role != "Iframe":
		default:
			continue
		}
		ni, ok := d.byBackend[n.BackendDOMNodeID]
		if !ok {
			continue
		}
		id := "e" + strconv.FormatInt(int64(n.BackendDOMNodeID), 10)
		if fn != 0 {
			id += "f" + strconv.Itoa(fn)
		}
		if _, dup := sc.byID[id]; dup {
			continue
		}
		c := &candidate{d: d, node: ni, el: shared.Element{ID: id, Role: role, Name: name, States: st}}
		// A field that received a secret carries no value (type-secret
		// types only into inputs and text areas, whose name never comes
		// from their text).
		secret := sc.secret.has(d.session, n.BackendDOMNodeID)
		if valueRoles[role] && !isPassword(d, ni) && !secret {
			if v := axString(n.Value); v != "" {
				v = cut(v)
				c.el.Value = &v
			}
		}
		b.place(c)
		sc.all = append(sc.all, c)
		sc.byID[id] = c
	}
}

// onlyAriaHidden reports whether aria-hidden is all that hides a node.
func onlyAriaHidden(reasons []*accessibility.Property) bool {
	if len(reasons) == 0 {
		return false
	}
	for _, r := range reasons {
		if r.Name != "ariaHiddenElement" && r.Name != "ariaHiddenSubtree" {
			return false
		}
	}
	return true
}

// nativeRole is the role and name of a native control from the DOM (for
// nodes the accessibility tree leaves out): "" when it is not one.
func nativeRole(d *doc, ni int) (role, name string) {
	tag := strings.ToUpper(d.str(int64(d.snap.Nodes.NodeName[ni])))
	switch tag {
	case "BUTTON":
		role = "button"
	case "A":
		if d.attr(ni, "href") == "" {
			return "", ""
		}
		role = "link"
	case "SELECT":
		role = "combobox"
	case "TEXTAREA":
		role = "textbox"
	case "INPUT":
		switch strings.ToLower(d.attr(ni, "type")) {
		case "checkbox":
			role = "checkbox"
		case "radio":
			role = "radio"
		case "button", "submit", "reset", "image":
			role = "button"
		case "hidden":
			return "", ""
		default:
			role = "textbox"
		}
	default:
		return "", ""
	}
	for _, a := range []string{"aria-label", "title", "alt", "placeholder"} {
		if v := d.attr(ni, a); v != "" {
			return role, cut(v)
		}
	}
	if tag == "INPUT" && role == "button" {
		return role, cut(d.attr(ni, "value"))
	}
	return role, cut(d.text(ni))
}

// text is the text under node ni (its text nodes, in order).
func (d *doc) text(ni int) string {
	var b strings.Builder
	pi := d.snap.Nodes.ParentIndex
	for j := ni + 1; j < len(pi) && b.Len() < 4*shared.MaxElementName; j++ {
		if !d.isAncestor(ni, j) {
			break
		}
		if d.snap.Nodes.NodeType[j] == 3 {
			b.WriteString(d.str(int64(d.snap.Nodes.NodeValue[j])))
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// isPassword reports whether node ni is a password field (its value is
// never read out).
func isPassword(d *doc, ni int) bool {
	return strings.EqualFold(d.str(int64(d.snap.Nodes.NodeName[ni])), "INPUT") && strings.EqualFold(strings.TrimSpace(d.attr(ni, "type")), "password")
}

// place gives a candidate its screen box and decides whether it is shown.
func (b *Browser) place(c *candidate) {
	d := c.d
	li := d.layoutOf[c.node]
	if li < 0 {
		c.why = "hidden"
		return
	}
	if v := d.style(li, stVisibility); v != "" && v != "visible" {
		c.why = "hidden"
		return
	}
	vis, _ := d.clipOf(c.node)
	full := d.bounds(li)
	if full.empty() {
		c.why = "hidden"
		return
	}
	on := d.toScreen(vis).and(d.clip)
	if on.empty() {
		c.why = "offscreen"
		c.el.Box = toBox(d.toScreen(full))
		return
	}
	c.el.Box = toBox(on)
	// The centre, back in document coordinates, must not be under
	// something painted later.
	cx, cy := (on.x0+on.x1)/2, (on.y0+on.y1)/2
	if d.covered(c.node, (cx-d.ox)/d.u, (cy-d.oy)/d.u) {
		c.why = "covered"
	}
}

// toBox rounds a screen rectangle inward to whole pixels.
func toBox(r rect) shared.Box {
	x0, y0 := int(math.Ceil(r.x0-0.01)), int(math.Ceil(r.y0-0.01))
	x1, y1 := int(math.Floor(r.x1+0.01)), int(math.Floor(r.y1+0.01))
	if x1 < x0 {
		x1 = x0
	}
	if y1 < y0 {
		y1 = y0
	}
	return shared.Box{X: x0, Y: y0, W: x1 - x0, H: y1 - y0}
}

// Resolve finds element id on the page as it is now and returns its
// centre, after a hit test there (DOM.getNodeForLocation) shows nothing
// else would take the click.
func (b *Browser) Resolve(ctx context.Context, id string) (shared.Point, error) {
	c, err := b.find(ctx, id)
	if err != nil {
		return shared.Point{}, err
	}
	p := c.el.Box.Center()
	if err := b.hitTest(ctx, c, p); err != nil {
		return shared.Point{}, err
	}
	return p, nil
}

// Focus gives element id the keyboard focus.
func (b *Browser) Focus(ctx context.Context, id string) error {
	c, err := b.find(ctx, id)
	if err != nil {
		return err
	}
	if _, err := cdpapi.Call(ctx, c.d.session, dom.Focus, dom.FocusParams{BackendNodeID: c.d.snap.Nodes.BackendNodeID[c.node]}); err != nil {
		if errors.Is(err, cdp.ErrDetached) {
			return errStale(id)
		}
		b.log.Debug().Err(err).Msg("focus element")
	}
	return nil
}

func errStale(id string) error {
	return shared.Errorf(http.StatusConflict, shared.CodeElementStale, "element %s is gone since it was observed (the page changed); observe again", id)
}

// find scans the page and returns element id if it is shown now, or the
// error saying why not.
func (b *Browser) find(ctx context.Context, id string) (*candidate, error) {
	b.elems.mu.Lock()
	role, ok := b.elems.issued[id]
	b.elems.mu.Unlock()
	if !ok {
		return nil, shared.Errorf(http.StatusNotFound, shared.CodeElementNotFound, "no element %s on this screen; use an id from the latest observation with elements", id)
	}
	sc, err := b.scanFront(ctx)
	if err != nil {
		return nil, err
	}
	c := sc.byID[id]
	if c == nil || c.el.Role != role {
		return nil, errStale(id)
	}
	switch c.why {
	case "":
		return c, nil
	case "offscreen":
		return nil, shared.Errorf(http.StatusConflict, shared.CodeElementOffscreen, "element %s is off screen; scroll it into view first", id)
	case "covered":
		return nil, shared.Errorf(http.StatusConflict, shared.CodeElementCovered, "element %s is covered by something else (a dialog or overlay?)", id)
	case "capped":
		return c, nil
	default:
		return nil, shared.Errorf(http.StatusConflict, shared.CodeElementStale, "element %s is hidden now; observe again", id)
	}
}

// hitTest asks the element's own target what is at screen point p and
// fails unless it is the element or inside it.
func (b *Browser) hitTest(ctx context.Context, c *candidate, p shared.Point) error {
	// DOM.getNodeForLocation takes a point of the target's top document in
	// CSS pixels, scroll included (it multiplies by the layout zoom and
	// subtracts the scroll itself).
	top := c.d
	for top.parent != nil && top.parent.session == top.session {
		top = top.parent
	}
	z := top.zoom
	if z <= 0 {
		z = 1
	}
	dx := (float64(p.X) + 0.5 - top.ox) / top.u / z
	dy := (float64(p.Y) + 0.5 - top.oy) / top.u / z
	no := false
	r, err := cdpapi.Call(ctx, c.d.session, dom.GetNodeForLocation, dom.GetNodeForLocationParams{X: int64(math.Floor(dx)), Y: int64(math.Floor(dy)), IncludeUserAgentShadowDOM: &no})
	if err != nil {
		if errors.Is(err, cdp.ErrDetached) {
			return errStale(c.el.ID)
		}
		// Nothing hit-testable there (an error, not a node).
		return shared.Errorf(http.StatusConflict, shared.CodeElementCovered, "element %s: nothing takes a click at its centre", c.el.ID)
	}
	hit, ok := c.d.byBackend[r.BackendNodeID]
	if ok && c.d.isAncestor(c.node, hit) {
		return nil
	}
	return shared.Errorf(http.StatusConflict, shared.CodeElementCovered, "element %s is covered at its centre (%d,%d) by something else", c.el.ID, p.X, p.Y)
}

// String is for logs.
func (c *candidate) String() string {
	return fmt.Sprintf("%s %s %q %+v %s", c.el.ID, c.el.Role, c.el.Name, c.el.Box, c.why)
}

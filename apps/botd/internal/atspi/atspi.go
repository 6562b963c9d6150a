// Package atspi reads the elements of a screen's desktop programs (Thunar,
// the terminal, the editor, XFCE's panel and menus) from AT-SPI, the
// accessibility tree GTK exports over D-Bus (issue 23).
//
// Every screen has its own session bus (the screen stack's dbus-daemon);
// the first GTK program that starts asks it for org.a11y.Bus, which
// activates at-spi-bus-launcher as the desktop user, and that starts the
// screen's accessibility bus at <runDir>/at-spi/bus_<display> with
// at-spi2-registryd on it. botd (root) connects to that bus directly: its
// configuration (accessibility.conf) lets root in, where the session bus
// lets in only its own user. The socket is in a desktop-owned directory,
// so after connecting and before saying anything, the peer's credentials
// must be the desktop user's (SO_PEERCRED): a link planted there to some
// root service is refused.
//
// One read walks each registered program's tree breadth first, one round
// of pipelined D-Bus calls per depth (role name, state, name; then the
// children and the on-screen box of what is showing), skipping subtrees
// that are not showing; it is bounded by the caller's deadline, MaxNodes
// and MaxChildren. Ids are "d" and ten hex digits of a hash of the
// program's bus name and the object's path: the same on every read of an
// unchanged desktop, never like the browser's "e…".
package atspi

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/pkg/shared"
)

// Limits of one read.
const (
	// MaxNodes caps the accessible objects visited in one read.
	MaxNodes = 4000
	// MaxChildren caps the children read of one object (a file list of
	// thousands of rows: the first ones are the visible ones).
	MaxChildren = 300
	// maxIssued caps the ids remembered per screen for act time.
	maxIssued = 20000
)

// D-Bus names of AT-SPI.
const (
	ifAccessible = "org.a11y.atspi.Accessible"
	ifComponent  = "org.a11y.atspi.Component"
	ifText       = "org.a11y.atspi.Text"
	ifValue      = "org.a11y.atspi.Value"
	registryName = "org.a11y.atspi.Registry"
	rootPath     = "/org/a11y/atspi/accessible/root"
	coordScreen  = uint32(0) // ATSPI_COORD_TYPE_SCREEN
)

// AT-SPI states (AtspiStateType bit numbers).
const (
	stActive      = 1
	stChecked     = 4
	stDefunct     = 6
	stEditable    = 7
	stEnabled     = 8
	stExpandable  = 9
	stExpanded    = 10
	stFocusable   = 11
	stFocused     = 12
	stIconified   = 15
	stPressed     = 20
	stSelectable  = 22
	stSelected    = 23
	stSensitive   = 24
	stShowing     = 25
	stVisible     = 30
	stInvalid     = 36 // ATSPI_STATE_INVALID_ENTRY
	stRequired    = 33
	stReadOnly    = 43
	stCheckable   = 41
	stIndetermine = 32
)

type states [2]uint32

func (s states) has(bit int) bool {
	if bit < 0 || bit >= 64 {
		return false
	}
	return s[bit/32]&(1<<(bit%32)) != 0
}

func toStates(v []uint32) states {
	var s states
	copy(s[:], v)
	return s
}

// roleMap maps AT-SPI role names to the element roles the browser uses
// (ARIA names), for the roles a person acts on.
var roleMap = map[string]string{
	"push button":         "button",
	"toggle button":       "button",
	"check box":           "checkbox",
	"radio button":        "radio",
	"menu item":           "menuitem",
	"menu":                "menuitem",
	"check menu item":     "menuitemcheckbox",
	"radio menu item":     "menuitemradio",
	"combo box":           "combobox",
	"text":                "textbox",
	"entry":               "textbox",
	"password text":       "textbox",
	"spin button":         "spinbutton",
	"slider":              "slider",
	"page tab":            "tab",
	"link":                "link",
	"tree item":           "treeitem",
	"list item":           "option",
	"table cell":          "gridcell",
	"icon":                "option",
	"terminal":            "terminal",
	"toggle":              "switch",
	"scroll bar":          "scrollbar",
	"table column header": "columnheader",
}

// labelledRoles are shown when they have a name, interactive or not.
var labelledRoles = map[string]string{
	"dialog": "dialog", "alert": "alertdialog", "heading": "heading",
}

// Element is one desktop element with what act time needs.
type Element struct {
	shared.Element
	// Top is the box of the element's top-level window (frame, dialog,
	// popup) as AT-SPI reports it, to match it to an X window.
	Top shared.Box
	// App is the program's name as it registered.
	App string
	// Interactive: a person acts on it (the corpus clicks these).
	Interactive bool
	// Bus and Path name the object on the accessibility bus; TopPath its
	// top-level window.
	Bus     string
	Path    dbus.ObjectPath
	TopPath dbus.ObjectPath
}

// ref names one accessible object.
type ref struct {
	Name string
	Path dbus.ObjectPath
}

// Reader reads elements from the accessibility buses of screens. It keeps
// one connection per bus socket and the ids it issued.
type Reader struct {
	// UID is the desktop user's: the only peer a bus socket may have.
	UID int
	// Skip names programs whose trees are left out (Chromium: the browser
	// part reads it over DevTools).
	Skip []string

	mu     sync.Mutex
	conns  map[string]*dbus.Conn
	issued map[string]map[string]ref // socket → id → object
}

// SocketPath is the accessibility bus of the screen whose runtime
// directory is runDir and display is display.
func SocketPath(runDir string, display int) string {
	return fmt.Sprintf("%s/at-spi/bus_%d", strings.TrimRight(runDir, "/"), display)
}

// ErrNoBus: no accessibility bus runs on the screen (no GTK program has
// started yet); the screen has no desktop elements.
var ErrNoBus = errors.New("no accessibility bus on this screen")

// conn returns a connection to the bus at sock.
func (r *Reader) conn(ctx context.Context, sock string) (*dbus.Conn, error) {
	r.mu.Lock()
	c := r.conns[sock]
	r.mu.Unlock()
	if c != nil && c.Connected() {
		return c, nil
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, ErrNoBus
		}
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	if err := checkPeer(uc, r.UID); err != nil {
		uc.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	}
	c, err = dbus.ConnectUnix(uc, dbus.WithContext(context.Background()))
	if err != nil {
		return nil, fmt.Errorf("accessibility bus: %w", err)
	}
	// ConnectUnix used the socket; later calls set their own deadlines
	// through their contexts.
	_ = uc.SetDeadline(time.Time{})
	r.mu.Lock()
	if r.conns == nil {
		r.conns = map[string]*dbus.Conn{}
	}
	if old := r.conns[sock]; old != nil && old != c {
		old.Close()
	}
	r.conns[sock] = c
	r.mu.Unlock()
	return c, nil
}

// Forget closes the connection to sock and forgets its ids (the screen
// stopped).
func (r *Reader) Forget(sock string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[sock]; c != nil {
		c.Close()
	}
	delete(r.conns, sock)
	delete(r.issued, sock)
}

// checkPeer refuses a socket whose listener is not the desktop user.
func checkPeer(c *net.UnixConn, uid int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != uid {
		return fmt.Errorf("accessibility bus: the socket's listener is uid %d, not the desktop user", cred.Uid)
	}
	return nil
}

// node is one object during a read.
type node struct {
	ref
	app      string
	depth    int
	top      *node
	parent   *node
	roleName string
	name     string
	st       states
	box      shared.Box
}

// Elements reads every registered program's showing elements from the
// bus at sock, in screen pixels, topmost programs' order as the registry
// lists them. w and h are the screen's size (elements wholly outside are
// left out).
func (r *Reader) Elements(ctx context.Context, sock string, w, h int) ([]Element, error) {
	c, err := r.conn(ctx, sock)
	if err != nil {
		return nil, err
	}
	var apps []ref
	if err := c.Object(registryName, rootPath).CallWithContext(ctx, ifAccessible+".GetChildren", 0).Store(&apps); err != nil {
		r.drop(sock, c, err)
		return nil, fmt.Errorf("accessibility registry: %w", err)
	}
	// The applications: their names first (one round).
	level := make([]*node, 0, len(apps))
	for _, a := range apps {
		level = append(level, &node{ref: a})
	}
	if err := r.readBasics(ctx, c, level); err != nil {
		return nil, err
	}
	var next []*node
	for _, n := range level {
		n.app = n.name
		if r.skipped(n.app) {
			continue
		}
		next = append(next, n)
	}
	level = next
	// One round per depth: the basics (role, state, name) and the
	// children of every node of the level, and the boxes of the level
	// above's showing candidates, all pipelined at once. The children of a
	// node that turns out not to be showing are dropped unread.
	var out []Element
	emit := func(boxed []*node) {
		for _, k := range boxed {
			if k.depth == 1 {
				continue
			}
			role, interactive := mapRole(k)
			b := k.box
			if role == "" || b.W <= 0 || b.H <= 0 || b.X+b.W <= 0 || b.Y+b.H <= 0 || b.X >= w || b.Y >= h {
				continue
			}
			// Cut to the screen (not to the top-level window: an open
			// menu's items are in its tree but outside its box).
			b = clip(b, shared.Box{W: w, H: h})
			if b.W <= 0 || b.H <= 0 {
				continue
			}
			out = append(out, Element{Element: shared.Element{ID: ID(k.Name, k.Path), Role: role, Name: cut(strings.TrimSpace(k.name)), States: stateNames(k), Box: b},
				Top: k.top.box, App: k.app, Interactive: interactive, Bus: k.Name, Path: k.Path, TopPath: k.top.Path})
		}
	}
	kids, err := r.children(ctx, c, level, MaxNodes)
	if err != nil {
		return nil, err
	}
	visited := len(level) + len(kids)
	level = kids
	var boxed []*node
	for len(level) > 0 || len(boxed) > 0 {
		var kids []*node
		var errs [3]error
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); errs[0] = r.readBasics(ctx, c, level) }()
		go func() { defer wg.Done(); kids, errs[1] = r.children(ctx, c, level, max(0, MaxNodes-visited)) }()
		go func() { defer wg.Done(); errs[2] = r.readBoxes(ctx, c, boxed) }()
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			return nil, err
		}
		emit(boxed)
		// What is showing goes on: its children are the next level, and
		// its box is read with them when it may be listed (or is a
		// top-level window).
		shown := map[*node]bool{}
		boxed = boxed[:0:0]
		for _, k := range level {
			if !k.st.has(stShowing) || !k.st.has(stVisible) || k.st.has(stDefunct) || k.st.has(stIconified) {
				continue
			}
			// A closed menu's items are not showing: not read at all
			// (GTK keeps every menu's items in the tree; an open menu
			// is selected).
			shown[k] = k.roleName != "menu" || k.st.has(stSelected) || k.st.has(stExpanded)
			if k.depth == 1 {
				boxed = append(boxed, k)
			} else if role, _ := mapRole(k); role != "" {
				boxed = append(boxed, k)
			}
		}
		var next []*node
		for _, k := range kids {
			if shown[k.parent] {
				next = append(next, k)
			}
		}
		visited += len(next)
		level = next
	}
	if err := r.readValues(ctx, c, out); err != nil {
		return nil, err
	}
	r.remember(sock, out)
	return out, nil
}

func (r *Reader) skipped(app string) bool {
	for _, s := range r.Skip {
		if strings.EqualFold(app, s) {
			return true
		}
	}
	return false
}

// drop forgets a connection that failed.
func (r *Reader) drop(sock string, c *dbus.Conn, err error) {
	if c.Connected() && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return
	}
	if !c.Connected() {
		r.mu.Lock()
		if r.conns[sock] == c {
			delete(r.conns, sock)
		}
		r.mu.Unlock()
	}
}

// readBasics reads role name, state and name of every node (one round).
func (r *Reader) readBasics(ctx context.Context, c *dbus.Conn, ns []*node) error {
	type pending struct {
		n              *node
		role, st, name *dbus.Call
	}
	ps := make([]pending, len(ns))
	for i, n := range ns {
		o := c.Object(n.Name, n.Path)
		ps[i] = pending{n: n,
			role: o.GoWithContext(ctx, ifAccessible+".GetRoleName", 0, nil),
			st:   o.GoWithContext(ctx, ifAccessible+".GetState", 0, nil),
			name: o.GoWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, nil, ifAccessible, "Name"),
		}
	}
	for _, p := range ps {
		for _, call := range []*dbus.Call{p.role, p.st, p.name} {
			select {
			case <-call.Done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if p.role.Err != nil || p.st.Err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p.n.st = states{} // gone while read: not showing
			continue
		}
		_ = p.role.Store(&p.n.roleName)
		var st []uint32
		_ = p.st.Store(&st)
		p.n.st = toStates(st)
		var v dbus.Variant
		if p.name.Err == nil && p.name.Store(&v) == nil {
			if s, ok := v.Value().(string); ok {
				p.n.name = s
			}
		}
	}
	return nil
}

// children reads the children of every node (one round), at most budget.
func (r *Reader) children(ctx context.Context, c *dbus.Conn, ns []*node, budget int) ([]*node, error) {
	calls := make([]*dbus.Call, len(ns))
	for i, n := range ns {
		calls[i] = c.Object(n.Name, n.Path).GoWithContext(ctx, ifAccessible+".GetChildren", 0, nil)
	}
	var out []*node
	for i, call := range calls {
		select {
		case <-call.Done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var kids []ref
		if call.Err != nil || call.Store(&kids) != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		if len(kids) > MaxChildren {
			kids = kids[:MaxChildren]
		}
		p := ns[i]
		for _, k := range kids {
			if len(out) >= budget {
				return out, nil
			}
			if k.Name == "" || k.Path == "" || k.Path == "/org/a11y/atspi/null" {
				continue
			}
			kn := &node{ref: k, app: p.app, depth: p.depth + 1, top: p.top, parent: p}
			if p.depth == 0 {
				kn.top = kn // a top-level window is its own
			}
			out = append(out, kn)
		}
	}
	return out, nil
}

// readBoxes reads the screen box of every node (one round).
func (r *Reader) readBoxes(ctx context.Context, c *dbus.Conn, ns []*node) error {
	calls := make([]*dbus.Call, len(ns))
	for i, n := range ns {
		calls[i] = c.Object(n.Name, n.Path).GoWithContext(ctx, ifComponent+".GetExtents", 0, nil, coordScreen)
	}
	for i, call := range calls {
		select {
		case <-call.Done:
		case <-ctx.Done():
			return ctx.Err()
		}
		var ext struct{ X, Y, W, H int32 }
		if call.Err != nil || call.Store(&ext) != nil {
			continue
		}
		ns[i].box = shared.Box{X: int(ext.X), Y: int(ext.Y), W: int(ext.W), H: int(ext.H)}
	}
	return nil
}

// readValues fills the values of text boxes (never a password field's),
// spin buttons and sliders (one round).
func (r *Reader) readValues(ctx context.Context, c *dbus.Conn, es []Element) error {
	type pending struct {
		i    int
		call *dbus.Call
		text bool
	}
	var ps []pending
	for i, e := range es {
		o := c.Object(e.Bus, e.Path)
		switch e.Role {
		case "textbox":
			if e.password() {
				continue
			}
			ps = append(ps, pending{i, o.GoWithContext(ctx, ifText+".GetText", 0, nil, int32(0), int32(shared.MaxElementName+1)), true})
		case "spinbutton", "slider":
			ps = append(ps, pending{i, o.GoWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, nil, ifValue, "CurrentValue"), false})
		}
	}
	for _, p := range ps {
		select {
		case <-p.call.Done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.call.Err != nil {
			continue
		}
		var s string
		if p.text {
			if p.call.Store(&s) != nil {
				continue
			}
		} else {
			var v dbus.Variant
			if p.call.Store(&v) != nil {
				continue
			}
			f, ok := v.Value().(float64)
			if !ok {
				continue
			}
			s = fmt.Sprintf("%g", f)
		}
		s = cut(s)
		es[p.i].Value = &s
	}
	return nil
}

// password marks a password field: AT-SPI's "password text" role (GTK
// gives it to an entry whose text is hidden).
func (e Element) password() bool {
	for _, s := range e.States {
		if s == "password" {
			return true
		}
	}
	return false
}

// mapRole is node n's element role ("" when not listed) and whether a
// person acts on it.
func mapRole(n *node) (string, bool) {
	if role, ok := roleMap[n.roleName]; ok {
		switch n.roleName {
		case "text":
			// GTK labels and read-only views are "text" too: only an
			// editable or focusable one is a text box.
			if !n.st.has(stEditable) && !n.st.has(stFocusable) {
				return "", false
			}
		case "table cell", "list item", "icon", "tree item":
			// A row's unnamed cells (its expander, its icon) are left
			// out: the named cell beside them stands for the row.
			if !n.st.has(stSelectable) && !n.st.has(stFocusable) || strings.TrimSpace(n.name) == "" {
				return "", false
			}
		case "scroll bar", "table column header":
			return role, false
		}
		return role, true
	}
	if role, ok := labelledRoles[n.roleName]; ok && strings.TrimSpace(n.name) != "" {
		return role, false
	}
	return "", false
}

// stateNames are node n's states in the browser's words.
func stateNames(n *node) []string {
	var out []string
	if n.roleName == "password text" {
		out = append(out, "password")
	}
	if n.st.has(stFocused) {
		out = append(out, "focused")
	}
	if !n.st.has(stEnabled) && !n.st.has(stSensitive) {
		out = append(out, "disabled")
	}
	if n.st.has(stSelected) {
		out = append(out, "selected")
	}
	if n.st.has(stIndetermine) {
		out = append(out, "mixed")
	} else if n.st.has(stChecked) {
		if n.roleName == "toggle button" {
			out = append(out, "pressed")
		} else {
			out = append(out, "checked")
		}
	} else if n.st.has(stPressed) {
		out = append(out, "pressed")
	}
	if n.st.has(stExpandable) {
		if n.st.has(stExpanded) {
			out = append(out, "expanded")
		} else {
			out = append(out, "collapsed")
		}
	}
	if n.st.has(stRequired) {
		out = append(out, "required")
	}
	if n.st.has(stReadOnly) {
		out = append(out, "readonly")
	}
	if n.st.has(stInvalid) {
		out = append(out, "invalid")
	}
	return out
}

// ID is the element id of object path on bus name.
func ID(bus string, path dbus.ObjectPath) string {
	h := fnv.New64a()
	h.Write([]byte(bus))
	h.Write([]byte{0})
	h.Write([]byte(path))
	return fmt.Sprintf("d%010x", h.Sum64()&(1<<40-1))
}

// IsID reports whether id is a desktop element id.
func IsID(id string) bool { return strings.HasPrefix(id, "d") }

// remember records the ids a read returned.
func (r *Reader) remember(sock string, es []Element) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.issued == nil {
		r.issued = map[string]map[string]ref{}
	}
	m := r.issued[sock]
	if m == nil || len(m)+len(es) > maxIssued {
		m = map[string]ref{}
		r.issued[sock] = m
	}
	for _, e := range es {
		m[e.ID] = ref{Name: e.Bus, Path: e.Path}
	}
}

// lookup is the object of an issued id.
func (r *Reader) lookup(sock, id string) (ref, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.issued[sock][id]
	return o, ok
}

// Current is what act time knows of an element now.
type Current struct {
	Box shared.Box
	// Top is the box of its top-level window.
	Top shared.Box
}

// Locate reads element id's current box on the bus at sock: element_not_found
// for an id no read returned, element_stale when it is gone or no longer
// showing, element_offscreen when its box is empty or off the w×h screen.
func (r *Reader) Locate(ctx context.Context, sock, id string, w, h int) (Current, error) {
	o, ok := r.lookup(sock, id)
	if !ok {
		return Current{}, shared.Errorf(http.StatusNotFound, shared.CodeElementNotFound, "no observation of this screen returned element %s; observe with elements first", id)
	}
	c, err := r.conn(ctx, sock)
	if err != nil {
		if errors.Is(err, ErrNoBus) {
			return Current{}, stale(id, "its program is gone")
		}
		return Current{}, err
	}
	obj := c.Object(o.Name, o.Path)
	var st []uint32
	if err := obj.CallWithContext(ctx, ifAccessible+".GetState", 0).Store(&st); err != nil {
		if ctx.Err() != nil {
			return Current{}, ctx.Err()
		}
		return Current{}, stale(id, "its program or window is gone")
	}
	s := toStates(st)
	if s.has(stDefunct) || !s.has(stShowing) || !s.has(stVisible) {
		return Current{}, stale(id, "it is no longer showing")
	}
	var ext struct{ X, Y, W, H int32 }
	if err := obj.CallWithContext(ctx, ifComponent+".GetExtents", 0, coordScreen).Store(&ext); err != nil {
		if ctx.Err() != nil {
			return Current{}, ctx.Err()
		}
		return Current{}, stale(id, "its box cannot be read")
	}
	cur := Current{Box: shared.Box{X: int(ext.X), Y: int(ext.Y), W: int(ext.W), H: int(ext.H)}}
	// Its top-level window: walk up the parents (few levels).
	p := o
	for i := 0; i < 64; i++ {
		var v dbus.Variant
		if err := c.Object(p.Name, p.Path).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, ifAccessible, "Parent").Store(&v); err != nil {
			break
		}
		var up ref
		if err := dbus.Store([]any{v.Value()}, &up); err != nil || up.Path == "" || up.Path == "/org/a11y/atspi/null" {
			break
		}
		if up.Path == rootPath {
			var e struct{ X, Y, W, H int32 }
			if c.Object(p.Name, p.Path).CallWithContext(ctx, ifComponent+".GetExtents", 0, coordScreen).Store(&e) == nil {
				cur.Top = shared.Box{X: int(e.X), Y: int(e.Y), W: int(e.W), H: int(e.H)}
			}
			break
		}
		p = up
	}
	b := clip(cur.Box, shared.Box{W: w, H: h})
	if b.W <= 0 || b.H <= 0 {
		return Current{}, shared.Errorf(http.StatusConflict, shared.CodeElementOffscreen, "element %s is outside the visible part of the screen", id)
	}
	cur.Box = b
	return cur, nil
}

// Focus gives element id the keyboard focus (Component.GrabFocus).
func (r *Reader) Focus(ctx context.Context, sock, id string) error {
	o, ok := r.lookup(sock, id)
	if !ok {
		return shared.Errorf(http.StatusNotFound, shared.CodeElementNotFound, "no observation of this screen returned element %s", id)
	}
	c, err := r.conn(ctx, sock)
	if err != nil {
		return stale(id, "its program is gone")
	}
	var ok2 bool
	if err := c.Object(o.Name, o.Path).CallWithContext(ctx, ifComponent+".GrabFocus", 0).Store(&ok2); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return stale(id, "it cannot take the focus")
	}
	return nil
}

// Probe is what the corpus test reads of an object to see a click land.
type Probe struct {
	States []string
	Role   string
	Name   string
}

// Read reads element id's role, name and states now (tests).
func (r *Reader) Read(ctx context.Context, sock, id string) (Probe, error) {
	o, ok := r.lookup(sock, id)
	if !ok {
		return Probe{}, fmt.Errorf("unknown id %s", id)
	}
	c, err := r.conn(ctx, sock)
	if err != nil {
		return Probe{}, err
	}
	n := &node{ref: o}
	if err := r.readBasics(ctx, c, []*node{n}); err != nil {
		return Probe{}, err
	}
	names := stateNames(n)
	for _, b := range []struct {
		bit  int
		name string
	}{{stShowing, "showing"}, {stActive, "active"}, {stFocusable, "focusable"}, {stSelectable, "selectable"}, {stCheckable, "checkable"}, {stDefunct, "defunct"}} {
		if n.st.has(b.bit) {
			names = append(names, b.name)
		}
	}
	sort.Strings(names)
	return Probe{States: names, Role: n.roleName, Name: n.name}, nil
}

func stale(id, why string) error {
	return shared.Errorf(http.StatusConflict, shared.CodeElementStale, "element %s is gone: %s; observe again", id, why)
}

// clip is b cut to c.
func clip(b, c shared.Box) shared.Box {
	x0, y0 := max(b.X, c.X), max(b.Y, c.Y)
	x1, y1 := min(b.X+b.W, c.X+c.W), min(b.Y+b.H, c.Y+c.H)
	if x1 <= x0 || y1 <= y0 {
		return shared.Box{}
	}
	return shared.Box{X: x0, Y: y0, W: x1 - x0, H: y1 - y0}
}

// cut shortens s to shared.MaxElementName runes, ending in "…".
func cut(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if utf8.RuneCountInString(s) <= shared.MaxElementName {
		return s
	}
	r := []rune(s)
	return string(r[:shared.MaxElementName]) + "…"
}

// Event is one AT-SPI event a Watcher saw.
type Event struct {
	// Sender is the program's bus name, Path the object.
	Sender string
	Path   dbus.ObjectPath
	// Kind is the event's interface member and detail, e.g.
	// "StateChanged:focused".
	Kind string
	// On: for a StateChanged, whether the state was set.
	On bool
}

// Watcher collects the AT-SPI events of one accessibility bus (tests: the
// desktop corpus sees a click land through them). Programs emit events
// only while a listener is registered with the registry; Watch registers
// one for object, window and focus events.
type Watcher struct {
	c  *dbus.Conn
	ch chan *dbus.Signal
	// mu guards seen.
	mu   sync.Mutex
	seen []Event
	done chan struct{}
}

// Watch starts collecting events on the bus at sock (its own connection).
func (r *Reader) Watch(ctx context.Context, sock string) (*Watcher, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	if err := checkPeer(uc, r.UID); err != nil {
		uc.Close()
		return nil, err
	}
	c, err := dbus.ConnectUnix(uc)
	if err != nil {
		return nil, err
	}
	w := &Watcher{c: c, ch: make(chan *dbus.Signal, 1024), done: make(chan struct{})}
	for _, iface := range []string{"org.a11y.atspi.Event.Object", "org.a11y.atspi.Event.Window", "org.a11y.atspi.Event.Focus"} {
		if err := c.AddMatchSignalContext(ctx, dbus.WithMatchInterface(iface)); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.Signal(w.ch)
	reg := c.Object(registryName, "/org/a11y/atspi/registry")
	for _, ev := range []string{"object:state-changed", "object:text-caret-moved", "window:", "focus:"} {
		if err := reg.CallWithContext(ctx, "org.a11y.atspi.Registry.RegisterEvent", 0, ev).Err; err != nil {
			c.Close()
			return nil, fmt.Errorf("register %s: %w", ev, err)
		}
	}
	go func() {
		defer close(w.done)
		for s := range w.ch {
			ev := Event{Sender: s.Sender, Path: s.Path}
			member := s.Name[strings.LastIndex(s.Name, ".")+1:]
			ev.Kind = member
			if len(s.Body) >= 2 {
				if detail, ok := s.Body[0].(string); ok && detail != "" {
					ev.Kind += ":" + detail
				}
				if v, ok := s.Body[1].(int32); ok {
					ev.On = v != 0
				}
			}
			w.mu.Lock()
			if len(w.seen) < 100000 {
				w.seen = append(w.seen, ev)
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// Mark is the number of events seen so far.
func (w *Watcher) Mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

// Since returns the events seen after mark.
func (w *Watcher) Since(mark int) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	if mark > len(w.seen) {
		return nil
	}
	return append([]Event(nil), w.seen[mark:]...)
}

// Close stops watching.
func (w *Watcher) Close() {
	w.c.Close()
}

// AtPoint reports whether AT-SPI's own hit test (Component.
// GetAccessibleAtPoint from the element's top-level window down to the
// deepest object) finds element e at screen point p (tests).
func (r *Reader) AtPoint(ctx context.Context, sock string, e Element, p shared.Point) (bool, error) {
	c, err := r.conn(ctx, sock)
	if err != nil {
		return false, err
	}
	cur := ref{Name: e.Bus, Path: e.TopPath}
	for i := 0; i < 64; i++ {
		if cur.Path == e.Path {
			return true, nil
		}
		var next ref
		if err := c.Object(cur.Name, cur.Path).CallWithContext(ctx, ifComponent+".GetAccessibleAtPoint", 0, int32(p.X), int32(p.Y), coordScreen).Store(&next); err != nil {
			return false, err
		}
		if next.Path == "" || next.Path == "/org/a11y/atspi/null" || next == cur {
			return false, nil
		}
		cur = next
	}
	return false, nil
}

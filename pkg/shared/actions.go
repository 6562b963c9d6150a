package shared

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on what one act request may ask for.
const (
	MaxActionsPerBatch = 50
	MaxTypeChars       = 10000
	MaxWaitMs          = 10000
	MaxDragPoints      = 100
	MaxKeysPerPress    = 8
	MaxScrollPixels    = 20000
)

// The nine action types of computerActionSchema.
const (
	ActionClick       = "click"
	ActionDoubleClick = "double_click"
	ActionDrag        = "drag"
	ActionKeypress    = "keypress"
	ActionMove        = "move"
	ActionScreenshot  = "screenshot"
	ActionScroll      = "scroll"
	ActionType        = "type"
	ActionWait        = "wait"

	// Window actions (the window's id from a screen's window list).
	ActionFocusWindow  = "focus_window"
	ActionCloseWindow  = "close_window"
	ActionMoveWindow   = "move_window"
	ActionResizeWindow = "resize_window"
)

// MinWindowSize is the smallest width or height resize_window accepts.
const MinWindowSize = 50

// Settle times after an action, before the screenshot.
const (
	SettleDefault = 450 * time.Millisecond
	SettleOpenURL = 500 * time.Millisecond
)

// Point is a screen coordinate in pixels, 1:1 with the screenshot.
type Point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// Action is one desktop action, told apart by Type, in the computer-use
// style models already speak. Only the fields of its type may be set.
type Action struct {
	Type    string   `json:"type"`
	X       *int     `json:"x,omitempty"`
	Y       *int     `json:"y,omitempty"`
	Button  string   `json:"button,omitempty"`
	Path    []Point  `json:"path,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	ScrollX *int     `json:"scroll_x,omitempty"`
	ScrollY *int     `json:"scroll_y,omitempty"`
	Text    *string  `json:"text,omitempty"`
	Ms      *int     `json:"ms,omitempty"`
	// Window is a window id ("0x…", from the screen's window list) for the
	// window actions; Width and Height are resize_window's new size.
	Window string `json:"window,omitempty"`
	Width  *int   `json:"width,omitempty"`
	Height *int   `json:"height,omitempty"`
	// Element targets an element of the last observation (its id) instead
	// of a point: click, double_click, move and scroll act at its centre,
	// type focuses it first. botd resolves it when the action runs.
	Element string `json:"element,omitempty"`
}

// IsWindowAction reports whether t is one of the window actions.
func IsWindowAction(t string) bool {
	switch t {
	case ActionFocusWindow, ActionCloseWindow, ActionMoveWindow, ActionResizeWindow:
		return true
	}
	return false
}

// Settle is how long to wait after a for the screen to settle.
func (a Action) Settle() time.Duration {
	switch a.Type {
	case ActionScreenshot, ActionMove, ActionWait:
		return 0
	}
	return SettleDefault
}

// ActionError names the offending action and field.
type ActionError struct {
	Index int
	Field string
	Msg   string
}

func (e *ActionError) Error() string {
	return fmt.Sprintf("actions[%d].%s: %s", e.Index, e.Field, e.Msg)
}

// ValidateActions checks a batch against a screen of w×h pixels. Element
// targets are refused (ValidateActionsElements accepts them).
func ValidateActions(actions []Action, w, h int) error {
	return validateActions(actions, w, h, false)
}

// ValidateActionsElements is ValidateActions for a machine that resolves
// element targets (botd): an action of ElementActions may carry "element"
// instead of x and y (type: besides its text).
func ValidateActionsElements(actions []Action, w, h int) error {
	return validateActions(actions, w, h, true)
}

func validateActions(actions []Action, w, h int, elements bool) error {
	if len(actions) == 0 {
		return &ActionError{Index: 0, Field: "type", Msg: "the batch is empty"}
	}
	if len(actions) > MaxActionsPerBatch {
		return &ActionError{Index: MaxActionsPerBatch, Field: "type", Msg: fmt.Sprintf("at most %d actions per batch", MaxActionsPerBatch)}
	}
	for i, a := range actions {
		if err := a.validate(w, h, elements); err != nil {
			err.Index = i
			return err
		}
	}
	return nil
}

// allowed lists the fields each type may carry besides "type".
var allowed = map[string]map[string]bool{
	ActionClick:       {"x": true, "y": true, "button": true},
	ActionDoubleClick: {"x": true, "y": true},
	ActionDrag:        {"path": true},
	ActionKeypress:    {"keys": true},
	ActionMove:        {"x": true, "y": true},
	ActionScreenshot:  {},
	ActionScroll:      {"x": true, "y": true, "scroll_x": true, "scroll_y": true},
	ActionType:        {"text": true},
	ActionWait:        {"ms": true},

	ActionFocusWindow:  {"window": true},
	ActionCloseWindow:  {"window": true},
	ActionMoveWindow:   {"window": true, "x": true, "y": true},
	ActionResizeWindow: {"window": true, "width": true, "height": true},
}

// fieldSet is one optional field and whether a carries it.
type fieldSet struct {
	name string
	set  bool
}

// present lists the optional fields in schema order, so the error for an
// action with several stray fields always names the same one.
func (a Action) present() []fieldSet {
	return []fieldSet{
		{"x", a.X != nil}, {"y", a.Y != nil}, {"button", a.Button != ""}, {"path", a.Path != nil},
		{"keys", a.Keys != nil}, {"scroll_x", a.ScrollX != nil}, {"scroll_y", a.ScrollY != nil},
		{"text", a.Text != nil}, {"ms", a.Ms != nil}, {"element", a.Element != ""},
		{"window", a.Window != ""}, {"width", a.Width != nil}, {"height", a.Height != nil},
	}
}

func (a Action) validate(w, h int, elements bool) *ActionError {
	fields, ok := allowed[a.Type]
	if !ok {
		return &ActionError{Field: "type", Msg: fmt.Sprintf("unknown action type %q (want one of click, double_click, drag, keypress, move, screenshot, scroll, type, wait, focus_window, close_window, move_window, resize_window)", a.Type)}
	}
	if a.Element != "" {
		switch {
		case !ElementActions[a.Type]:
			return &ActionError{Field: "element", Msg: fmt.Sprintf("not allowed on %s", a.Type)}
		case !elements:
			return &ActionError{Field: "element", Msg: "element targets are not supported on this machine; use x and y"}
		case len(a.Element) > 64 || !validElementID(a.Element):
			return &ActionError{Field: "element", Msg: "not an element id from an observation (like e12)"}
		case a.X != nil || a.Y != nil:
			return &ActionError{Field: "x", Msg: "give either element or x and y, not both"}
		}
	}
	for _, f := range a.present() {
		if f.name == "element" {
			continue
		}
		if f.set && !fields[f.name] {
			return &ActionError{Field: f.name, Msg: fmt.Sprintf("not allowed on %s", a.Type)}
		}
	}
	inside := func(field string, v, max int) *ActionError {
		if v < 0 || v >= max {
			return &ActionError{Field: field, Msg: fmt.Sprintf("%d is outside the screen (0..%d)", v, max-1)}
		}
		return nil
	}
	needXY := func() *ActionError {
		if a.Element != "" {
			return nil // resolved to the element's centre when it runs
		}
		if a.X == nil {
			return &ActionError{Field: "x", Msg: "required"}
		}
		if a.Y == nil {
			return &ActionError{Field: "y", Msg: "required"}
		}
		if err := inside("x", *a.X, w); err != nil {
			return err
		}
		return inside("y", *a.Y, h)
	}
	switch a.Type {
	case ActionClick:
		switch a.Button {
		case "", "left", "right", "middle":
		default:
			return &ActionError{Field: "button", Msg: fmt.Sprintf("%q is not left, right or middle", a.Button)}
		}
		return needXY()
	case ActionDoubleClick, ActionMove:
		return needXY()
	case ActionScroll:
		if err := needXY(); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			v    *int
		}{{"scroll_x", a.ScrollX}, {"scroll_y", a.ScrollY}} {
			if f.v != nil && (*f.v > MaxScrollPixels || *f.v < -MaxScrollPixels) {
				return &ActionError{Field: f.name, Msg: fmt.Sprintf("at most %d pixels", MaxScrollPixels)}
			}
		}
		if (a.ScrollX == nil || *a.ScrollX == 0) && (a.ScrollY == nil || *a.ScrollY == 0) {
			return &ActionError{Field: "scroll_y", Msg: "scroll_x or scroll_y must be non-zero"}
		}
	case ActionDrag:
		if len(a.Path) < 2 {
			return &ActionError{Field: "path", Msg: "needs at least 2 points"}
		}
		if len(a.Path) > MaxDragPoints {
			return &ActionError{Field: "path", Msg: fmt.Sprintf("at most %d points", MaxDragPoints)}
		}
		for j, p := range a.Path {
			if err := inside(fmt.Sprintf("path[%d].x", j), p.X, w); err != nil {
				return err
			}
			if err := inside(fmt.Sprintf("path[%d].y", j), p.Y, h); err != nil {
				return err
			}
		}
	case ActionKeypress:
		if len(a.Keys) == 0 {
			return &ActionError{Field: "keys", Msg: "required"}
		}
		if len(a.Keys) > MaxKeysPerPress {
			return &ActionError{Field: "keys", Msg: fmt.Sprintf("at most %d keys", MaxKeysPerPress)}
		}
		for j, k := range a.Keys {
			if _, ok := KeyName(k); !ok {
				return &ActionError{Field: fmt.Sprintf("keys[%d]", j), Msg: fmt.Sprintf("unknown key %q", k)}
			}
		}
	case ActionType:
		if a.Text == nil || *a.Text == "" {
			return &ActionError{Field: "text", Msg: "required"}
		}
		if !utf8.ValidString(*a.Text) {
			return &ActionError{Field: "text", Msg: "not valid UTF-8"}
		}
		if n := utf8.RuneCountInString(*a.Text); n > MaxTypeChars {
			return &ActionError{Field: "text", Msg: fmt.Sprintf("%d characters; at most %d", n, MaxTypeChars)}
		}
	case ActionWait:
		if a.Ms == nil {
			return &ActionError{Field: "ms", Msg: "required"}
		}
		if *a.Ms < 0 || *a.Ms > MaxWaitMs {
			return &ActionError{Field: "ms", Msg: fmt.Sprintf("must be 0..%d", MaxWaitMs)}
		}
	case ActionFocusWindow, ActionCloseWindow:
		return needWindow(a.Window)
	case ActionMoveWindow:
		if err := needWindow(a.Window); err != nil {
			return err
		}
		return needXY()
	case ActionResizeWindow:
		if err := needWindow(a.Window); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			v    *int
			max  int
		}{{"width", a.Width, w}, {"height", a.Height, h}} {
			if f.v == nil {
				return &ActionError{Field: f.name, Msg: "required"}
			}
			if *f.v < MinWindowSize || *f.v > f.max {
				return &ActionError{Field: f.name, Msg: fmt.Sprintf("%d: must be %d..%d", *f.v, MinWindowSize, f.max)}
			}
		}
	}
	return nil
}

// needWindow checks a window id's form ("0x" and up to 8 hex digits).
func needWindow(id string) *ActionError {
	if id == "" {
		return &ActionError{Field: "window", Msg: "required"}
	}
	if _, ok := ParseWindowID(id); !ok {
		return &ActionError{Field: "window", Msg: fmt.Sprintf("%q is not a window id (0x followed by hex digits, from the screen's window list)", cut(id, 40))}
	}
	return nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// validElementID reports whether id looks like an element id: ASCII
// letters, digits, '.', '_' and '-'.
func validElementID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return id != ""
}

// keyNames maps the case-insensitive names models use to X keysym names.
var keyNames = map[string]string{
	"ctrl": "Control_L", "control": "Control_L", "shift": "Shift_L", "alt": "Alt_L", "option": "Alt_L",
	"meta": "Super_L", "super": "Super_L", "cmd": "Super_L", "command": "Super_L", "win": "Super_L",
	"enter": "Return", "return": "Return", "tab": "Tab", "escape": "Escape", "esc": "Escape",
	"backspace": "BackSpace", "delete": "Delete", "del": "Delete", "insert": "Insert",
	"space": "space", "up": "Up", "down": "Down", "left": "Left", "right": "Right",
	"arrowup": "Up", "arrowdown": "Down", "arrowleft": "Left", "arrowright": "Right",
	"pageup": "Prior", "page_up": "Prior", "pagedown": "Next", "page_down": "Next",
	"home": "Home", "end": "End", "capslock": "Caps_Lock",
}

// KeyName maps a model's key name (case-insensitive) to an X keysym name:
// modifiers, enter, tab, escape, backspace, delete, arrows, page keys,
// f1–f12 and single printable characters.
func KeyName(k string) (string, bool) {
	if utf8.RuneCountInString(k) == 1 {
		r, _ := utf8.DecodeRuneInString(k)
		if r > 0x20 && r != utf8.RuneError && !unicode.IsControl(r) {
			return k, true
		}
		if r == ' ' {
			return "space", true
		}
		return "", false
	}
	l := strings.ToLower(k)
	if s, ok := keyNames[l]; ok {
		return s, true
	}
	if len(l) >= 2 && len(l) <= 3 && l[0] == 'f' {
		var n int
		if _, err := fmt.Sscanf(l[1:], "%d", &n); err == nil && n >= 1 && n <= 12 && fmt.Sprint(n) == l[1:] {
			return fmt.Sprintf("F%d", n), true
		}
	}
	return "", false
}

// DragSteps are the positions from a (exclusive) to b (inclusive), at most
// step pixels apart, so applications see a drag move rather than jump (the
// same path in botd and in the worker's command-driven desktop machine).
func DragSteps(a, b Point, step int) []Point {
	dx, dy := float64(b.X-a.X), float64(b.Y-a.Y)
	n := int(math.Ceil(math.Hypot(dx, dy) / float64(step)))
	if n < 1 {
		n = 1
	}
	out := make([]Point, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, Point{
			X: a.X + int(math.Round(dx*float64(i)/float64(n))),
			Y: a.Y + int(math.Round(dy*float64(i)/float64(n))),
		})
	}
	return out
}

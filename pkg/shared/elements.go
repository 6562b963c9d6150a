package shared

// Elements: what is on a screen as a list a model can act on, beside the
// screenshot (issue 23). Boxes are screen pixels, the same space as the
// screenshot and the clicks.

// Limits on one observation's elements.
const (
	// MaxElements caps how many elements one observation returns.
	MaxElements = 300
	// MaxElementName is the longest name (and value) an element carries, in
	// characters; longer ones are cut and end in "…".
	MaxElementName = 80
)

// Box is a rectangle in screen pixels.
type Box struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// Center is the box's middle pixel.
func (b Box) Center() Point { return Point{X: b.X + b.W/2, Y: b.Y + b.H/2} }

// Element is one visible, interactive or labelled thing on the screen. Its
// id stays the same across observations of an unchanged page; an act may
// target it instead of a point ({"type":"click","element":"e12"}). Value is
// never a password field's.
type Element struct {
	ID     string   `json:"id"`
	Role   string   `json:"role"`
	Name   string   `json:"name"`
	Value  *string  `json:"value,omitempty"`
	States []string `json:"states,omitempty"`
	Box    Box      `json:"box"`
}

// Error codes of element targets and element lists.
const (
	// CodeElementNotFound: an id no observation of this screen returned.
	CodeElementNotFound Code = "element_not_found"
	// CodeElementStale: the element (or its page) is gone since it was
	// observed; observe again.
	CodeElementStale Code = "element_stale"
	// CodeElementCovered: something else is on top of the element's centre.
	CodeElementCovered Code = "element_covered"
	// CodeElementOffscreen: the element is outside the visible part of the
	// screen (scroll it into view first).
	CodeElementOffscreen Code = "element_offscreen"
	// CodeElementsUnavailable: the screen's elements could not be read now
	// (no browser, or a page that never settles its tree).
	CodeElementsUnavailable Code = "elements_unavailable"
)

// ElementActions are the action types that may target an element instead
// of a point (type focuses the element first).
var ElementActions = map[string]bool{
	ActionClick: true, ActionDoubleClick: true, ActionMove: true, ActionScroll: true, ActionType: true,
}

package shared

import (
	"strings"
	"testing"
)

// TestValidateElementTargets: an element may stand in for a point on the
// actions that take one, only where the machine resolves elements, and
// never beside x and y.
func TestValidateElementTargets(t *testing.T) {
	tests := []struct {
		name      string
		a         Action
		elements  bool
		wantField string
	}{
		{"click element", Action{Type: ActionClick, Element: "e12"}, true, ""},
		{"click element frame", Action{Type: ActionClick, Element: "e12f3", Button: "right"}, true, ""},
		{"double_click element", Action{Type: ActionDoubleClick, Element: "e1"}, true, ""},
		{"move element", Action{Type: ActionMove, Element: "e1"}, true, ""},
		{"scroll element", Action{Type: ActionScroll, Element: "e1", ScrollY: iptr(300)}, true, ""},
		{"scroll element no amount", Action{Type: ActionScroll, Element: "e1"}, true, "scroll_y"},
		{"type element", Action{Type: ActionType, Element: "e7", Text: sptr("hi")}, true, ""},
		{"type element no text", Action{Type: ActionType, Element: "e7"}, true, "text"},
		{"element and x", Action{Type: ActionClick, Element: "e1", X: iptr(1), Y: iptr(1)}, true, "x"},
		{"element on keypress", Action{Type: ActionKeypress, Element: "e1", Keys: []string{"a"}}, true, "element"},
		{"element on drag", Action{Type: ActionDrag, Element: "e1", Path: []Point{{1, 1}, {2, 2}}}, true, "element"},
		{"bad id", Action{Type: ActionClick, Element: "e1; rm"}, true, "element"},
		{"long id", Action{Type: ActionClick, Element: "e" + strings.Repeat("1", 70)}, true, "element"},
		{"not on this machine", Action{Type: ActionClick, Element: "e12"}, false, "element"},
		{"point still fine", Action{Type: ActionClick, X: iptr(5), Y: iptr(5)}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.elements {
				err = ValidateActionsElements([]Action{tt.a}, 1280, 800)
			} else {
				err = ValidateActions([]Action{tt.a}, 1280, 800)
			}
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			ae, ok := err.(*ActionError)
			if !ok || ae.Field != tt.wantField {
				t.Fatalf("want an error on %q, got %v", tt.wantField, err)
			}
		})
	}
}

func TestBoxCenter(t *testing.T) {
	if c := (Box{X: 10, Y: 20, W: 31, H: 10}).Center(); c != (Point{X: 25, Y: 25}) {
		t.Fatalf("centre %+v", c)
	}
}

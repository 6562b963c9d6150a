package shared

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func iptr(v int) *int       { return &v }
func sptr(s string) *string { return &s }

func TestValidateActions(t *testing.T) {
	const w, h = 1280, 800
	long := strings.Repeat("é", MaxTypeChars)
	tooLong := long + "x"
	path := func(n int) []Point {
		p := make([]Point, n)
		for i := range p {
			p[i] = Point{X: i, Y: i}
		}
		return p
	}
	tests := []struct {
		name      string
		a         Action
		wantField string // "" = valid
	}{
		{"click", Action{Type: "click", X: iptr(0), Y: iptr(0)}, ""},
		{"click last pixel", Action{Type: "click", X: iptr(1279), Y: iptr(799)}, ""},
		{"click right", Action{Type: "click", X: iptr(1), Y: iptr(1), Button: "right"}, ""},
		{"click middle", Action{Type: "click", X: iptr(1), Y: iptr(1), Button: "middle"}, ""},
		{"click bad button", Action{Type: "click", X: iptr(1), Y: iptr(1), Button: "back"}, "button"},
		{"click no x", Action{Type: "click", Y: iptr(1)}, "x"},
		{"click no y", Action{Type: "click", X: iptr(1)}, "y"},
		{"click x = width", Action{Type: "click", X: iptr(1280), Y: iptr(0)}, "x"},
		{"click y = height", Action{Type: "click", X: iptr(0), Y: iptr(800)}, "y"},
		{"click negative", Action{Type: "click", X: iptr(-1), Y: iptr(0)}, "x"},
		{"click with text", Action{Type: "click", X: iptr(1), Y: iptr(1), Text: sptr("a")}, "text"},
		{"double click", Action{Type: "double_click", X: iptr(5), Y: iptr(5)}, ""},
		{"double click with button", Action{Type: "double_click", X: iptr(5), Y: iptr(5), Button: "left"}, "button"},
		{"move", Action{Type: "move", X: iptr(5), Y: iptr(5)}, ""},
		{"move outside", Action{Type: "move", X: iptr(5), Y: iptr(5000)}, "y"},
		{"drag", Action{Type: "drag", Path: path(2)}, ""},
		{"drag one point", Action{Type: "drag", Path: path(1)}, "path"},
		{"drag too many points", Action{Type: "drag", Path: path(MaxDragPoints + 1)}, "path"},
		{"drag point outside", Action{Type: "drag", Path: []Point{{1, 1}, {1280, 1}}}, "path[1].x"},
		{"drag point above", Action{Type: "drag", Path: []Point{{1, -1}, {2, 2}}}, "path[0].y"},
		{"drag with x", Action{Type: "drag", Path: path(2), X: iptr(1)}, "x"},
		{"keypress", Action{Type: "keypress", Keys: []string{"ctrl", "a"}}, ""},
		{"keypress no keys", Action{Type: "keypress", Keys: []string{}}, "keys"},
		{"keypress missing keys", Action{Type: "keypress"}, "keys"},
		{"keypress unknown key", Action{Type: "keypress", Keys: []string{"ctrl", "hyperdrive"}}, "keys[1]"},
		{"keypress too many", Action{Type: "keypress", Keys: strings.Split("a b c d e f g h i", " ")}, "keys"},
		{"screenshot", Action{Type: "screenshot"}, ""},
		{"screenshot with x", Action{Type: "screenshot", X: iptr(1)}, "x"},
		{"scroll", Action{Type: "scroll", X: iptr(1), Y: iptr(1), ScrollY: iptr(300)}, ""},
		{"scroll up left", Action{Type: "scroll", X: iptr(1), Y: iptr(1), ScrollX: iptr(-5), ScrollY: iptr(-5)}, ""},
		{"scroll nothing", Action{Type: "scroll", X: iptr(1), Y: iptr(1)}, "scroll_y"},
		{"scroll zeros", Action{Type: "scroll", X: iptr(1), Y: iptr(1), ScrollX: iptr(0), ScrollY: iptr(0)}, "scroll_y"},
		{"scroll too far x", Action{Type: "scroll", X: iptr(1), Y: iptr(1), ScrollX: iptr(MaxScrollPixels + 1), ScrollY: iptr(MaxScrollPixels + 1)}, "scroll_x"},
		{"scroll too far y", Action{Type: "scroll", X: iptr(1), Y: iptr(1), ScrollY: iptr(-MaxScrollPixels - 1)}, "scroll_y"},
		{"scroll outside", Action{Type: "scroll", X: iptr(1280), Y: iptr(1), ScrollY: iptr(1)}, "x"},
		{"type", Action{Type: "type", Text: sptr("héllo 日本 😀\n\t")}, ""},
		{"type max", Action{Type: "type", Text: &long}, ""},
		{"type too long", Action{Type: "type", Text: &tooLong}, "text"},
		{"type empty", Action{Type: "type", Text: sptr("")}, "text"},
		{"type missing", Action{Type: "type"}, "text"},
		{"type invalid utf8", Action{Type: "type", Text: sptr("a\xffb")}, "text"},
		{"type with keys", Action{Type: "type", Text: sptr("a"), Keys: []string{"a"}}, "keys"},
		{"wait", Action{Type: "wait", Ms: iptr(0)}, ""},
		{"wait max", Action{Type: "wait", Ms: iptr(MaxWaitMs)}, ""},
		{"wait too long", Action{Type: "wait", Ms: iptr(MaxWaitMs + 1)}, "ms"},
		{"wait negative", Action{Type: "wait", Ms: iptr(-1)}, "ms"},
		{"wait missing", Action{Type: "wait"}, "ms"},
		{"unknown type", Action{Type: "hover"}, "type"},
		{"empty type", Action{}, "type"},
		// Several stray fields: always the first in schema order.
		{"stray fields deterministic", Action{Type: "wait", Ms: iptr(1), X: iptr(1), Text: sptr("a"), Keys: []string{"a"}}, "x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 20; i++ { // map order must not matter
				err := ValidateActions([]Action{tc.a}, w, h)
				if tc.wantField == "" {
					if err != nil {
						t.Fatalf("want valid, got %v", err)
					}
					return
				}
				var ae *ActionError
				if !errors.As(err, &ae) {
					t.Fatalf("want ActionError on %s, got %v", tc.wantField, err)
				}
				if ae.Field != tc.wantField || ae.Index != 0 {
					t.Fatalf("error %q: want field %s index 0", err, tc.wantField)
				}
			}
		})
	}
}

func TestValidateActionsBatch(t *testing.T) {
	ok := Action{Type: "screenshot"}
	if err := ValidateActions(nil, 10, 10); err == nil {
		t.Fatal("empty batch accepted")
	}
	batch := make([]Action, MaxActionsPerBatch)
	for i := range batch {
		batch[i] = ok
	}
	if err := ValidateActions(batch, 10, 10); err != nil {
		t.Fatalf("full batch refused: %v", err)
	}
	if err := ValidateActions(append(batch, ok), 10, 10); err == nil {
		t.Fatal("batch over the limit accepted")
	}
	// The error names the offending action's index.
	err := ValidateActions([]Action{ok, ok, {Type: "move", X: iptr(10), Y: iptr(0)}}, 10, 10)
	var ae *ActionError
	if !errors.As(err, &ae) || ae.Index != 2 || ae.Field != "x" {
		t.Fatalf("got %v", err)
	}
	if got := ae.Error(); got != "actions[2].x: 10 is outside the screen (0..9)" {
		t.Fatalf("message %q", got)
	}
}

func TestActionJSON(t *testing.T) {
	var got []Action
	in := `[{"type":"click","x":1,"y":2,"button":"right"},{"type":"scroll","x":3,"y":4,"scroll_x":0,"scroll_y":-120},
	{"type":"drag","path":[{"x":1,"y":1},{"x":2,"y":2}]},{"type":"keypress","keys":["CTRL","Enter"]},
	{"type":"type","text":"日本"},{"type":"wait","ms":5},{"type":"screenshot"}]`
	if err := json.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	if err := ValidateActions(got, 1280, 800); err != nil {
		t.Fatal(err)
	}
	if *got[1].ScrollY != -120 || *got[1].ScrollX != 0 || got[0].Button != "right" || *got[4].Text != "日本" {
		t.Fatalf("decoded %+v", got)
	}
	b, err := json.Marshal(Action{Type: "screenshot"})
	if err != nil || string(b) != `{"type":"screenshot"}` {
		t.Fatalf("marshal %s %v", b, err)
	}
}

func TestKeyName(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"ctrl", "Control_L", true}, {"CTRL", "Control_L", true}, {"Control", "Control_L", true},
		{"shift", "Shift_L", true}, {"alt", "Alt_L", true}, {"option", "Alt_L", true},
		{"meta", "Super_L", true}, {"cmd", "Super_L", true}, {"super", "Super_L", true},
		{"enter", "Return", true}, {"Return", "Return", true}, {"tab", "Tab", true},
		{"escape", "Escape", true}, {"esc", "Escape", true}, {"backspace", "BackSpace", true},
		{"delete", "Delete", true}, {"space", "space", true}, {" ", "space", true},
		{"up", "Up", true}, {"ArrowDown", "Down", true}, {"left", "Left", true}, {"right", "Right", true},
		{"pageup", "Prior", true}, {"PAGE_DOWN", "Next", true}, {"home", "Home", true}, {"end", "End", true},
		{"f1", "F1", true}, {"F12", "F12", true}, {"f13", "", false}, {"f0", "", false}, {"f01", "", false}, {"fx", "", false},
		{"a", "a", true}, {"A", "A", true}, {"1", "1", true}, {"/", "/", true}, {"é", "é", true}, {"日", "日", true},
		{"", "", false}, {"\t", "", false}, {"\n", "", false}, {"\x7f", "", false}, {"\u0085", "", false},
		{"ctrl+c", "", false}, {"hyper", "", false},
	}
	for _, tc := range tests {
		got, ok := KeyName(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("KeyName(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSettle(t *testing.T) {
	for typ, want := range map[string]time.Duration{
		"screenshot": 0, "move": 0, "wait": 0,
		"click": SettleDefault, "double_click": SettleDefault, "drag": SettleDefault,
		"keypress": SettleDefault, "scroll": SettleDefault, "type": SettleDefault,
	} {
		if got := (Action{Type: typ}).Settle(); got != want {
			t.Errorf("%s: settle %s, want %s", typ, got, want)
		}
	}
}

func TestDragSteps(t *testing.T) {
	tests := []struct {
		a, b Point
		want []Point
	}{
		{Point{X: 0, Y: 0}, Point{X: 0, Y: 0}, []Point{{X: 0, Y: 0}}},
		{Point{X: 10, Y: 10}, Point{X: 42, Y: 10}, []Point{{X: 26, Y: 10}, {X: 42, Y: 10}}},
		{Point{X: 0, Y: 0}, Point{X: 5, Y: 5}, []Point{{X: 5, Y: 5}}},
		{Point{X: 40, Y: 0}, Point{X: 0, Y: 0}, []Point{{X: 27, Y: 0}, {X: 13, Y: 0}, {X: 0, Y: 0}}},
	}
	for _, tc := range tests {
		if got := DragSteps(tc.a, tc.b, 16); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("DragSteps(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

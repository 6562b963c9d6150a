package screen

import (
	"testing"

	"github.com/open-bot/computer/pkg/shared"
)

// TestCoveredBy: a desktop element is covered only by a window stacked
// above its own; popups with no client window are never covered.
func TestCoveredBy(t *testing.T) {
	ws := []shared.Window{
		{ID: "w1", Box: shared.Rect{X: 100, Y: 100, W: 600, H: 400}},               // the editor (frame included)
		{ID: "w2", Box: shared.Rect{X: 400, Y: 150, W: 600, H: 400}},               // a window above it
		{ID: "w3", Box: shared.Rect{X: 0, Y: 0, W: 1280, H: 800}, Minimized: true}, // minimized: covers nothing
	}
	top := shared.Box{X: 104, Y: 130, W: 592, H: 366} // the editor's client area
	if coveredBy(ws, top, shared.Point{X: 200, Y: 200}) {
		t.Error("a point only the editor has is covered")
	}
	if !coveredBy(ws, top, shared.Point{X: 500, Y: 300}) {
		t.Error("a point under the window above is not covered")
	}
	w2top := shared.Box{X: 404, Y: 180, W: 592, H: 366}
	if coveredBy(ws, w2top, shared.Point{X: 500, Y: 300}) {
		t.Error("the topmost window's element is covered")
	}
	if coveredBy(ws, shared.Box{X: 0, Y: 0, W: 96, H: 28}, shared.Point{X: 500, Y: 300}) {
		t.Error("a popup or panel element is covered")
	}
}

package shared

import (
	"fmt"
	"strconv"
	"strings"
)

// Rect is a box in screen pixels, the space of the screenshot and clicks.
type Rect struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// Window is one application window on a screen. Box is its frame (title
// bar and borders included) in screen pixels; Minimized windows keep the
// box they had.
type Window struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	App       string `json:"app"`
	Box       Rect   `json:"box"`
	Focused   bool   `json:"focused"`
	Minimized bool   `json:"minimized,omitempty"`
}

// Windows is the answer of a screen's window list, topmost last.
type Windows struct {
	Windows []Window `json:"windows"`
}

// MaxWindowTitle caps a window's title in a listing (in runes).
const MaxWindowTitle = 200

// WindowID formats an X window id the way listings and actions carry it.
func WindowID(xid uint32) string { return fmt.Sprintf("0x%x", xid) }

// ParseWindowID reads a window id made by WindowID.
func ParseWindowID(s string) (uint32, bool) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok || h == "" || len(h) > 8 {
		return 0, false
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil || v == 0 {
		return 0, false
	}
	return uint32(v), true
}

// MaxClipboardBytes caps a clipboard read or write (1 MiB of UTF-8).
const MaxClipboardBytes = 1 << 20

// Clipboard is a screen's clipboard text.
type Clipboard struct {
	Text string `json:"text"`
}

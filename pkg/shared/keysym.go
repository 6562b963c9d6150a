package shared

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Keysyms typing uses for line breaks and tabs.
const (
	KeysymReturn uint32 = 0xff0d
	KeysymTab    uint32 = 0xff09
)

// namedKeysyms are the X keysyms of the names KeyName produces.
var namedKeysyms = map[string]uint32{
	"Control_L": 0xffe3, "Shift_L": 0xffe1, "Alt_L": 0xffe9, "Super_L": 0xffeb,
	"Return": 0xff0d, "Tab": 0xff09, "Escape": 0xff1b, "BackSpace": 0xff08,
	"Delete": 0xffff, "Insert": 0xff63, "space": 0x20,
	"Up": 0xff52, "Down": 0xff54, "Left": 0xff51, "Right": 0xff53,
	"Prior": 0xff55, "Next": 0xff56, "Home": 0xff50, "End": 0xff57,
	"Caps_Lock": 0xffe5,
	"F1":        0xffbe, "F2": 0xffbf, "F3": 0xffc0, "F4": 0xffc1, "F5": 0xffc2, "F6": 0xffc3,
	"F7": 0xffc4, "F8": 0xffc5, "F9": 0xffc6, "F10": 0xffc7, "F11": 0xffc8, "F12": 0xffc9,
}

// RuneKeysym is the X keysym that types r: Latin-1 keysyms equal their code
// point; every other character has a Unicode keysym (0x01000000 | r).
func RuneKeysym(r rune) uint32 {
	if (r >= 0x20 && r <= 0x7e) || (r >= 0xa0 && r <= 0xff) {
		return uint32(r)
	}
	return 0x01000000 | uint32(r)
}

// KeyKeysym maps a model's key name (see KeyName) to an X keysym (botd's
// XTEST input and the worker's RFB input use it alike).
func KeyKeysym(name string) (uint32, error) {
	xname, ok := KeyName(name)
	if !ok {
		return 0, fmt.Errorf("unknown key %q", name)
	}
	if ks, ok := namedKeysyms[xname]; ok {
		return ks, nil
	}
	if utf8.RuneCountInString(xname) == 1 {
		r, _ := utf8.DecodeRuneInString(xname)
		return RuneKeysym(r), nil
	}
	return 0, fmt.Errorf("key %q has no keysym", name)
}

// TypingKeysyms turns text into the keysyms that type it: "\n" (and
// "\r\n", and a lone "\r") is Return, "\t" Tab, other control characters
// are dropped, everything else is its character's keysym.
func TypingKeysyms(text string) []uint32 {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	out := make([]uint32, 0, len(text))
	for _, r := range text {
		switch {
		case r == '\n' || r == '\r':
			out = append(out, KeysymReturn)
		case r == '\t':
			out = append(out, KeysymTab)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		default:
			out = append(out, RuneKeysym(r))
		}
	}
	return out
}

package desktop

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/open-bot/computer/pkg/shared"
)

// Input timings, botd's (apps/botd/internal/desktop/input.go).
const (
	wheelPixels = 120 // pixels one wheel click scrolls
	clickGapMs  = 10  // between the clicks of a double click
	dragStep    = 16  // pixels between intermediate drag positions
	dragHold    = "0.04"
	typeDelayMs = 8
	// borrowDelayMs is the delay xdotool types a character the keymap
	// lacks with. xdotool maps such a character onto a spare keycode for
	// the key's press and unmaps it half its delay after: a client that
	// reads the key after the unmapping types nothing (a loaded machine
	// dropped "é" and "à" at 8 ms, and "é" again at 300 ms in rehearsal
	// 37: a GTK client re-reads the keymap when it handles the mapping
	// change, so one starved of the CPU for longer than the hold reads
	// the keymap already unmapped). 1000 ms keeps the keycode mapped for
	// 500 ms: slow (a second a character the keymap lacks), but a dropped
	// character is silently wrong text.
	borrowDelayMs = 1000
	// typeChunk is how many characters one xdotool type command carries:
	// the lease is checked between chunks, so a person taking the screen
	// stops a long text within one chunk.
	typeChunk = 200
)

// xdotoolArgv is the xdotool command line of one input action (not wait or
// screenshot, which the machine does itself; not type, see typeChunks).
func xdotoolArgv(a shared.Action) ([]string, error) {
	itoa := strconv.Itoa
	switch a.Type {
	case shared.ActionMove:
		return []string{"xdotool", "mousemove", itoa(*a.X), itoa(*a.Y)}, nil
	case shared.ActionClick:
		b := "1"
		switch a.Button {
		case "right":
			b = "3"
		case "middle":
			b = "2"
		}
		return []string{"xdotool", "mousemove", itoa(*a.X), itoa(*a.Y), "click", b}, nil
	case shared.ActionDoubleClick:
		return []string{"xdotool", "mousemove", itoa(*a.X), itoa(*a.Y), "click", "--repeat", "2", "--delay", itoa(clickGapMs), "1"}, nil
	case shared.ActionDrag:
		p := a.Path
		argv := []string{"xdotool", "mousemove", itoa(p[0].X), itoa(p[0].Y), "mousedown", "1", "sleep", dragHold}
		prev := p[0]
		for _, q := range p[1:] {
			for _, s := range shared.DragSteps(prev, q, dragStep) {
				argv = append(argv, "mousemove", itoa(s.X), itoa(s.Y))
			}
			prev = q
		}
		return append(argv, "sleep", dragHold, "mouseup", "1"), nil
	case shared.ActionScroll:
		argv := []string{"xdotool", "mousemove", itoa(*a.X), itoa(*a.Y)}
		wheel := func(px int, neg, pos string) {
			if n := wheelClicks(px); n > 0 {
				b := pos
				if px < 0 {
					b = neg
				}
				argv = append(argv, "click", "--repeat", itoa(n), "--delay", "8", b)
			}
		}
		wheel(deref(a.ScrollY), "4", "5")
		wheel(deref(a.ScrollX), "6", "7")
		return argv, nil
	case shared.ActionKeypress:
		combo := make([]string, 0, len(a.Keys))
		for _, k := range a.Keys {
			ks, ok := shared.KeyName(k)
			if !ok {
				return nil, fmt.Errorf("unknown key %q", k)
			}
			combo = append(combo, xKeysym(ks, len(a.Keys) > 1))
		}
		return []string{"xdotool", "key", "--clearmodifiers", strings.Join(combo, "+")}, nil
	}
	return nil, fmt.Errorf("action %q is not xdotool input", a.Type)
}

// xKeysym is the keysym name xdotool resolves for a shared.KeyName result:
// named keys as they are, a letter or digit as itself (lowercase in a
// combo: ctrl+A means ctrl+a, as in botd), any other character as its
// Unicode keysym ("U2B" for "+"), so "+" never splits a combo.
func xKeysym(ks string, combo bool) string {
	if utf8.RuneCountInString(ks) != 1 {
		return ks
	}
	r, _ := utf8.DecodeRuneInString(ks)
	switch {
	case r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
		if combo {
			return string(unicode.ToLower(r))
		}
		return ks
	}
	return fmt.Sprintf("U%04X", r)
}

// typeChunks splits text into the pieces one xdotool type command types,
// never inside a "\r\n".
func typeChunks(text string) []string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	var out []string
	for len(text) > 0 {
		n, i := 0, 0
		for i < len(text) && n < typeChunk {
			_, sz := utf8.DecodeRuneInString(text[i:])
			i += sz
			n++
		}
		out = append(out, text[:i])
		text = text[i:]
	}
	return out
}

// typeRun is a piece of a chunk that one xdotool type command types, with
// its delay.
type typeRun struct {
	text    string
	delayMs int
}

// typeRuns splits a chunk into runs of keymap characters (printable ASCII,
// "\n", "\t": typed at typeDelayMs) and runs of other characters (typed at
// borrowDelayMs, see there).
func typeRuns(chunk string) []typeRun {
	var out []typeRun
	for _, r := range chunk {
		d := typeDelayMs
		if !keymapRune(r) {
			d = borrowDelayMs
		}
		if n := len(out); n > 0 && out[n-1].delayMs == d {
			out[n-1].text += string(r)
			continue
		}
		out = append(out, typeRun{text: string(r), delayMs: d})
	}
	return out
}

// keymapRune reports whether r is on a US keymap, so xdotool types it with
// its own key rather than a borrowed keycode.
func keymapRune(r rune) bool {
	return (r >= 0x20 && r <= 0x7e) || r == '\n' || r == '\t'
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func wheelClicks(px int) int {
	if px == 0 {
		return 0
	}
	n := int(math.Round(math.Abs(float64(px)) / wheelPixels))
	if n < 1 {
		n = 1
	}
	return n
}

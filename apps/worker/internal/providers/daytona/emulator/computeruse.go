package emulator

// More of the toolbox's computer use on display :0 (scrot and xdotool in
// the sandbox): compressed screenshots, drag, scroll, key and hotkey.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
)

// screenshotCompressed is GET /computeruse/screenshot/compressed: format
// png (default) or jpeg at quality (1-100, default 85); scale is not
// served (400 unless 1).
func (e *Emulator) screenshotCompressed(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	format := q.Get("format")
	if format == "" {
		format = "png"
	}
	if format != "png" && format != "jpeg" {
		writeError(w, r, http.StatusBadRequest, "format: want png or jpeg")
		return
	}
	quality := 85
	if v := q.Get("quality"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, r, http.StatusBadRequest, "quality: want 1-100")
			return
		}
		quality = n
	}
	if v := q.Get("scale"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err != nil || f != 1 {
			writeError(w, r, http.StatusBadRequest, "scale: the emulator serves only 1")
			return
		}
	}
	flag := ""
	if q.Get("showCursor") == "true" {
		flag = "--pointer"
	}
	ext := ".png"
	if format == "jpeg" {
		ext = ".jpg"
	}
	out, ok := e.xFile(w, r, `f=$(mktemp --suffix="$2") && scrot $1 --quality "$3" -o "$f" && cat -- "$f" && wc -c < "$f" >&2; s=$?; rm -f -- "$f"; exit $s`, flag, ext, strconv.Itoa(quality))
	if !ok {
		return
	}
	x, y, ok := e.pointer(w, r)
	if !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{
		"screenshot": base64.StdEncoding.EncodeToString(out), "sizeBytes": len(out),
		"cursorPosition": map[string]int{"x": x, "y": y},
	})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid request body: %v", err)
		return false
	}
	return true
}

var buttons = map[string]string{"": "1", "left": "1", "middle": "2", "right": "3"}

func (e *Emulator) drag(w http.ResponseWriter, r *http.Request) {
	var req struct {
		StartX, StartY, EndX, EndY int
		Button                     string
	}
	if !decode(w, r, &req) {
		return
	}
	b := buttons[req.Button]
	if b == "" {
		writeError(w, r, http.StatusBadRequest, "button: want left, right or middle")
		return
	}
	itoa := strconv.Itoa
	if _, ok := e.x(w, r, `xdotool mousemove "$1" "$2" mousedown "$5" sleep 0.05 mousemove "$3" "$4" sleep 0.05 mouseup "$5"`,
		itoa(req.StartX), itoa(req.StartY), itoa(req.EndX), itoa(req.EndY), b); !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]int{"x": req.EndX, "y": req.EndY})
}

func (e *Emulator) scroll(w http.ResponseWriter, r *http.Request) {
	var req struct {
		X, Y      int
		Direction string
		Amount    int
	}
	if !decode(w, r, &req) {
		return
	}
	b := map[string]string{"up": "4", "down": "5"}[req.Direction]
	if b == "" || req.Amount < 0 {
		writeError(w, r, http.StatusBadRequest, "direction: want up or down; amount ≥ 0")
		return
	}
	n := max(req.Amount, 1)
	if _, ok := e.x(w, r, `xdotool mousemove "$1" "$2" click --repeat "$3" --delay 8 "$4"`,
		strconv.Itoa(req.X), strconv.Itoa(req.Y), strconv.Itoa(n), b); !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// keysyms maps the daemon's key names (robotgo's) to X keysyms.
var keysyms = map[string]string{
	"ctrl": "ctrl", "control": "ctrl", "alt": "alt", "shift": "shift", "cmd": "super", "super": "super", "meta": "super",
	"enter": "Return", "return": "Return", "tab": "Tab", "esc": "Escape", "escape": "Escape",
	"backspace": "BackSpace", "delete": "Delete", "insert": "Insert", "space": "space",
	"up": "Up", "down": "Down", "left": "Left", "right": "Right", "pageup": "Prior", "pagedown": "Next",
	"home": "Home", "end": "End", "capslock": "Caps_Lock",
}

func keysym(k string) (string, error) {
	l := strings.ToLower(k)
	if s, ok := keysyms[l]; ok {
		return s, nil
	}
	if len(l) >= 2 && len(l) <= 3 && l[0] == 'f' {
		if n, err := strconv.Atoi(l[1:]); err == nil && n >= 1 && n <= 12 {
			return "F" + strconv.Itoa(n), nil
		}
	}
	if len(k) == 1 && k[0] > 0x20 && k[0] < 0x7f {
		return k, nil
	}
	return "", fmt.Errorf("unknown key %q", k)
}

func (e *Emulator) keys(w http.ResponseWriter, r *http.Request, names []string) {
	syms := make([]string, 0, len(names))
	for _, n := range names {
		s, err := keysym(strings.TrimSpace(n))
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "%v", err)
			return
		}
		syms = append(syms, s)
	}
	if _, ok := e.x(w, r, `xdotool key --clearmodifiers "$1"`, strings.Join(syms, "+")); !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{})
}

func (e *Emulator) pressKey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Key       string   `json:"key"`
		Modifiers []string `json:"modifiers"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Key == "" {
		writeError(w, r, http.StatusBadRequest, "key is required")
		return
	}
	e.keys(w, r, append(append([]string(nil), req.Modifiers...), req.Key))
}

func (e *Emulator) hotkey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Keys string `json:"keys"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Keys == "" {
		writeError(w, r, http.StatusBadRequest, "keys is required")
		return
	}
	e.keys(w, r, strings.Split(req.Keys, "+"))
}

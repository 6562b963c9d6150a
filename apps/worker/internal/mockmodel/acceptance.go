package mockmodel

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The acceptance page's button: small, a magenta nothing else on the
// desktop or in Chromium's frame has, at a random place on each page.
const (
	ButtonW, ButtonH = 96, 40
	screenW, screenH = 1280, 800
)

// ButtonColor is the button's colour, which the scripted model looks for.
var ButtonColor = color.RGBA{R: 208, G: 16, B: 176, A: 255}

// decoyRect is the page's decoy, in CSS pixels of the viewport: a large
// green "Press me" block where the old full-screen button was, so a blind
// click at the screen's centre lands on it and counts as a miss.
var decoyRect = image.Rect(400, 200, 880, 480)

// placeButton picks the button's place in the viewport: inside 1248x600
// (Chromium's viewport on a 1280x800 screen is taller than that) and clear
// of the decoy.
func placeButton() image.Rectangle {
	for {
		x, y := 16+mrand.IntN(1248-16-ButtonW), 16+mrand.IntN(600-16-ButtonH)
		r := image.Rect(x, y, x+ButtonW, y+ButtonH)
		if !r.Overlaps(decoyRect.Inset(-24)) {
			return r
		}
	}
}

// Acceptance is seed 000's acceptance flow as the scripted model plays it
// for Bot: observe, open PageURL, find the page's button in the screenshot
// it gets back and click its centre, run a shell command and write a file,
// then finish. It looks at the screen: every observe/act result must carry
// a 1280x800 JPEG (a problem is recorded otherwise); when the button is not
// in the screenshot (the page not drawn yet) it looks again, at most
// MaxLooks times, and never clicks blind.
type Acceptance struct {
	PageURL, Bot string
	// MaxLooks bounds the screenshots searched for the button (default 10).
	MaxLooks int
	// MaxAfterClick bounds the looks after the click's own screenshot
	// while the button still shows (default 5).
	MaxAfterClick int
	// OnReport, when set, gets the report after every step (mockserve
	// writes it where a test outside its process reads it).
	OnReport func(AcceptanceReport)

	mu     sync.Mutex
	report AcceptanceReport
	looked map[string]look // by call id: each screenshot is decoded once
}

// AcceptanceReport is what the model saw, for a test to check.
type AcceptanceReport struct {
	// Screenshots counts the observe/act results so far; Images those of
	// them carrying a decodable 1280x800 JPEG.
	Screenshots int `json:"screenshots"`
	Images      int `json:"images"`
	// Looks counts the screenshots searched for the button.
	Looks int `json:"looks"`
	// Click is where the model clicked (screen pixels), nil before.
	Click *image.Point `json:"click,omitempty"`
	// AfterClick counts the looks after the click's own screenshot (the
	// button still showed in the one before).
	AfterClick int `json:"afterClick"`
	// Problems are what went wrong: a result without a screenshot, the
	// button never found, the button still there after the click.
	Problems []string `json:"problems"`
}

// look is one screenshot's decoding and search.
type look struct {
	ok     bool        // a 1280x800 JPEG was decoded
	why    string      // why not, or why no button
	button image.Point // the button's centre
	found  bool
}

// NewAcceptance returns the flow for bot on the page at pageURL.
func NewAcceptance(pageURL, bot string) *Acceptance {
	return &Acceptance{PageURL: pageURL, Bot: bot}
}

// Report returns what the model saw so far.
func (a *Acceptance) Report() AcceptanceReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.report
	r.Problems = slices.Clone(r.Problems)
	return r
}

// Script is the flow as a Script. Each request replays the conversation's
// outputs from the start, so the step and the report follow from them.
func (a *Acceptance) Script(outs []Output) Step {
	a.mu.Lock()
	defer a.mu.Unlock()
	var rep AcceptanceReport
	defer func() {
		a.report = rep
		if a.OnReport != nil {
			a.OnReport(rep)
		}
	}()
	maxLooks := a.MaxLooks
	if maxLooks <= 0 {
		maxLooks = 10
	}
	// shot decodes outs[i] as an observe/act result and searches it.
	shot := func(i int, what string) look {
		rep.Screenshots++
		l := a.lookAtLocked(outs[i])
		if l.ok {
			rep.Images++
		} else {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (result %d): %s", what, i, l.why))
		}
		return l
	}
	observe := Step{Tool: "computer_observe", Args: map[string]any{}}
	if len(outs) == 0 {
		return observe
	}
	shot(0, "the first observe")
	if len(outs) == 1 {
		return Step{Tool: "open_path", Args: map[string]any{"target": a.PageURL}}
	}
	if len(outs) == 2 {
		return observe
	}
	// outs[2:] are looks for the button until one finds it.
	i := 2
	var at image.Point
	for ; ; i++ {
		rep.Looks++
		l := shot(i, fmt.Sprintf("look %d", rep.Looks))
		if l.found {
			at = l.button
			break
		}
		if rep.Looks >= maxLooks {
			msg := fmt.Sprintf("the button (%v, %dx%d) is in none of %d screenshots; the last: %s", ButtonColor, ButtonW, ButtonH, rep.Looks, l.why)
			rep.Problems = append(rep.Problems, msg)
			return Step{Message: "FAILED: " + msg}
		}
		if i == len(outs)-1 {
			// Look again after a moment; the pointer nudge makes the frame
			// differ, so it comes back as an image, not "unchanged".
			return Step{Tool: "computer_act", Args: map[string]any{"actions": []map[string]any{
				{"type": "wait", "ms": 500}, {"type": "move", "x": 2 + rep.Looks%2, "y": 2}}}}
		}
	}
	rep.Click = &at
	if len(outs) == i+1 {
		return Step{Tool: "computer_act", Args: map[string]any{"actions": []map[string]any{
			{"type": "click", "x": at.X, "y": at.Y}, {"type": "wait", "ms": 300}}}}
	}
	// outs[i+1:] are the click's screenshot and looks after it while the
	// button still shows: the page may paint its answer after the act's
	// screenshot (a loaded machine), so the button must be gone within
	// MaxAfterClick looks, not at once.
	maxAfter := a.MaxAfterClick
	if maxAfter <= 0 {
		maxAfter = 5
	}
	j := i + 1
	for after := 0; ; after++ {
		what := "the click's screenshot"
		if after > 0 {
			what = fmt.Sprintf("look %d after the click", after)
		}
		l := shot(j, what)
		if !l.ok || !l.found {
			break
		}
		if after >= maxAfter {
			rep.Problems = append(rep.Problems, fmt.Sprintf("the click at %v did not press the button: it is still at %v after %d more looks", at, l.button, after))
			break
		}
		rep.AfterClick++
		if j == len(outs)-1 {
			return Step{Tool: "computer_act", Args: map[string]any{"actions": []map[string]any{
				{"type": "wait", "ms": 500}, {"type": "move", "x": 2 + after%2, "y": 2}}}}
		}
		j++
	}
	steps := []Step{
		{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c", "id -un > bots/" + a.Bot + "/whoami.txt; echo ran"}}},
		{Tool: "file_write", Args: map[string]any{"path": "bots/" + a.Bot + "/result.txt", "content": "the button was pressed\n"}},
	}
	if n := len(outs) - (j + 1); n < len(steps) {
		return steps[n]
	}
	return Step{Message: "Done: pressed the button, ran a command and wrote the file."}
}

// lookAtLocked decodes o's screenshot and finds the button in it (a.mu held).
func (a *Acceptance) lookAtLocked(o Output) look {
	if l, ok := a.looked[o.CallID]; ok && o.CallID != "" {
		return l
	}
	l := decodeAndFind(o)
	if a.looked == nil {
		a.looked = map[string]look{}
	}
	a.looked[o.CallID] = l
	return l
}

func decodeAndFind(o Output) look {
	if len(o.Images) != 1 {
		return look{why: fmt.Sprintf("%d images in the result, want 1; its text: %.200s", len(o.Images), o.Text)}
	}
	const prefix = "data:image/jpeg;base64,"
	if !strings.HasPrefix(o.Images[0], prefix) {
		return look{why: fmt.Sprintf("the image is not a base64 JPEG data URL: %.40s", o.Images[0])}
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(o.Images[0], prefix))
	if err != nil {
		return look{why: "the image's base64: " + err.Error()}
	}
	img, err := jpeg.Decode(bytes.NewReader(b))
	if err != nil {
		return look{why: fmt.Sprintf("the image (%d bytes) is no JPEG: %v", len(b), err)}
	}
	if sz := img.Bounds().Size(); sz != image.Pt(screenW, screenH) {
		return look{why: fmt.Sprintf("the screenshot is %v, want %dx%d", sz, screenW, screenH)}
	}
	l := look{ok: true}
	l.button, l.found, l.why = FindButton(img)
	return l
}

// FindButton finds the button in a screenshot: the pixels near ButtonColor
// must fill a box of about ButtonW x ButtonH (JPEG blurs its edges). It
// returns the box's centre, or why it is not there.
func FindButton(img image.Image) (image.Point, bool, string) {
	const tol = 48
	near := func(v uint32, want uint8) bool {
		d := int(v>>8) - int(want)
		return d >= -tol && d <= tol
	}
	b := img.Bounds()
	box := image.Rectangle{}
	n := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r, ButtonColor.R) && near(g, ButtonColor.G) && near(bl, ButtonColor.B) {
				box = box.Union(image.Rect(x, y, x+1, y+1))
				n++
			}
		}
	}
	if n == 0 {
		return image.Point{}, false, "no pixel of the button's colour"
	}
	sz := box.Size()
	within := func(v, want int) bool { return v >= want-6 && v <= want+6 }
	if !within(sz.X, ButtonW) || !within(sz.Y, ButtonH) || n*10 < sz.X*sz.Y*7 {
		return image.Point{}, false, fmt.Sprintf("%d pixels of the button's colour in %v (%v), not a %dx%d button", n, box, sz, ButtonW, ButtonH)
	}
	return image.Pt((box.Min.X+box.Max.X)/2, (box.Min.Y+box.Max.Y)/2), true, ""
}

// ButtonPage is the acceptance flow's page: a small button at a random
// place (Button, in viewport pixels) whose click posts /clicked, on a page
// where a click anywhere else (a large green "Press me" decoy included)
// posts /missed; and a persistent sign-in cookie set on the first visit. It
// records clicks, misses and every cookie value it was sent; with StateDir
// set it also writes them there ("clicks", "misses", "seen") for a test
// outside its process.
type ButtonPage struct {
	Cookie   string
	StateDir string
	// Button is where the button is, in the viewport's CSS pixels.
	Button image.Rectangle
	// RevealMs, when set, draws the button only that long after the page
	// loads (a page still loading: the model must look again).
	RevealMs int

	mu     sync.Mutex
	clicks int
	misses []string
	seen   []string
}

// NewButtonPage returns a page with a fresh random cookie value and the
// button at a random place.
func NewButtonPage() *ButtonPage {
	var v [12]byte
	_, _ = rand.Read(v[:])
	return &ButtonPage{Cookie: hex.EncodeToString(v[:]), Button: placeButton()}
}

func (p *ButtonPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		got := "none"
		if c, err := r.Cookie("signin"); err == nil {
			got = c.Value
		} else {
			http.SetCookie(w, &http.Cookie{Name: "signin", Value: p.Cookie, Path: "/", MaxAge: 86400, HttpOnly: true})
		}
		p.mu.Lock()
		p.seen = append(p.seen, got)
		p.saveLocked()
		btn, reveal := p.Button, p.RevealMs
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		d := decoyRect
		fmt.Fprintf(w, `<!doctype html><title>e2e button</title>
<body style="margin:0;height:100vh;overflow:hidden;background:#f4f4f4;font-family:sans-serif;cursor:default">
<div id="decoy" style="position:fixed;left:%dpx;top:%dpx;width:%dpx;height:%dpx;background:#2a7;color:#fff;font-size:36px;display:flex;align-items:center;justify-content:center">Press me (signed in: %s)</div>
<div id="b" style="position:fixed;left:%dpx;top:%dpx;width:%dpx;height:%dpx;background:rgb(%d,%d,%d);visibility:hidden"></div>
<script>
setTimeout(() => { document.getElementById('b').style.visibility = 'visible'; }, %d);
document.addEventListener('click', (e) => {
  const hit = e.target.id === 'b';
  if (hit) e.target.style.background = '#333';
  fetch((hit ? '/clicked' : '/missed') + '?x=' + e.clientX + '&y=' + e.clientY, {method: 'POST'});
});
</script></body>`, d.Min.X, d.Min.Y, d.Dx(), d.Dy(), got,
			btn.Min.X, btn.Min.Y, btn.Dx(), btn.Dy(), ButtonColor.R, ButtonColor.G, ButtonColor.B, reveal)
	case "/clicked":
		p.mu.Lock()
		p.clicks++
		p.saveLocked()
		p.mu.Unlock()
	case "/missed":
		p.mu.Lock()
		p.misses = append(p.misses, r.URL.Query().Get("x")+","+r.URL.Query().Get("y"))
		p.saveLocked()
		p.mu.Unlock()
	default:
		http.NotFound(w, r)
	}
}

func (p *ButtonPage) saveLocked() {
	if p.StateDir == "" {
		return
	}
	write := func(name, s string) {
		tmp := filepath.Join(p.StateDir, "."+name)
		if os.WriteFile(tmp, []byte(s), 0o644) == nil {
			_ = os.Rename(tmp, filepath.Join(p.StateDir, name))
		}
	}
	write("clicks", strconv.Itoa(p.clicks)+"\n")
	write("misses", strings.Join(p.misses, "\n"))
	write("seen", strings.Join(p.seen, "\n")+"\n")
}

// WriteReport writes the model's report to dir/model (JSON), the way the
// page writes its record, for a test outside the process.
func WriteReport(dir string, r AcceptanceReport) {
	b, _ := json.Marshal(r)
	tmp := filepath.Join(dir, ".model")
	if os.WriteFile(tmp, b, 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, "model"))
	}
}

// Clicked is how many times the button was pressed.
func (p *ButtonPage) Clicked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clicks
}

// Misses are the clicks on the page off the button, as "x,y" in the
// viewport.
func (p *ButtonPage) Misses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.misses)
}

// SawCookie reports whether a request carried the sign-in cookie.
func (p *ButtonPage) SawCookie() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, p.Cookie)
}

// Forget drops the cookie values seen so far.
func (p *ButtonPage) Forget() {
	p.mu.Lock()
	p.seen = nil
	p.saveLocked()
	p.mu.Unlock()
}

package mockmodel

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// AcceptanceScript is seed 000's acceptance flow for bot, as the scripted
// model plays it: observe, open pageURL, press the page's big button, run a
// shell command and write a file, then finish.
func AcceptanceScript(pageURL, bot string) Script {
	return func(outs []Output) Step {
		steps := []Step{
			{Tool: "computer_observe", Args: map[string]any{}},
			{Tool: "open_path", Args: map[string]any{"target": pageURL}},
			{Tool: "computer_act", Args: map[string]any{"actions": []map[string]any{{"type": "click", "x": 640, "y": 450}, {"type": "wait", "ms": 300}}}},
			{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c", "id -un > bots/" + bot + "/whoami.txt; echo ran"}}},
			{Tool: "file_write", Args: map[string]any{"path": "bots/" + bot + "/result.txt", "content": "the button was pressed\n"}},
		}
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return Step{Message: "Done: pressed the button, ran a command and wrote the file."}
	}
}

// ButtonPage is the acceptance flow's deterministic page: a big button
// whose click posts a marker, and a persistent sign-in cookie set on the
// first visit. It records the clicks and every cookie value it was sent;
// with StateDir set it also writes them there ("clicks", "seen") for a test
// outside its process.
type ButtonPage struct {
	Cookie   string
	StateDir string

	mu     sync.Mutex
	clicks int
	seen   []string
}

// NewButtonPage returns a page with a fresh random cookie value.
func NewButtonPage() *ButtonPage {
	var v [12]byte
	_, _ = rand.Read(v[:])
	return &ButtonPage{Cookie: hex.EncodeToString(v[:])}
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
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>e2e button</title><body style="margin:0">
<button id="b" style="position:fixed;left:0;top:0;width:100vw;height:100vh;font-size:48px;background:#2a7;color:#fff;border:0"
 onclick="fetch('/clicked',{method:'POST'}).then(()=>{this.textContent='clicked'})">Press me (signed in: %s)</button></body>`, got)
	case "/clicked":
		p.mu.Lock()
		p.clicks++
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
	write("seen", strings.Join(p.seen, "\n")+"\n")
}

// Clicked is how many times the button was pressed.
func (p *ButtonPage) Clicked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clicks
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

package browser

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
)

// What the CDP relay (cdprelay.go) and type_secret agree on, so a vault
// secret never reaches a CDP client (issue 34):
//
//   - A tab a CDP client has ever had a session on (or one opened from such
//     a tab) is touched for its life: the client may have left script in
//     its documents, so type_secret refuses it (ErrSecretTouched) and the
//     bot opens the sign-in page in a new tab instead.
//   - A tab a secret was typed into is sealed for its life, before the
//     typing starts: the relay hides it from every CDP client (its target
//     events, its entry in Target.getTargets, attaching to it) and detaches
//     any session a client still had on it.
//   - Every message to a CDP client is searched for each secret typed in
//     this browser (its bytes, its JSON-escaped spellings, its base64); one
//     that carries it is withheld (a reply becomes an error, an event is
//     dropped). This catches a secret that travelled to another tab (a site
//     echoing it back), not one a script transformed: sealing is what keeps
//     the tab that holds it out of reach.

// ErrSecretTouched: type_secret refused a tab a CDP client has had.
var ErrSecretTouched = errors.New("a CDP client has had this tab, and may have left script in it; a secret types only into a tab no CDP client has touched: open the sign-in page with newTab: true and type it there")

// maxSecretPatterns bounds the remembered secrets' spellings (the oldest go
// first; a browser rarely sees more than a few secrets).
const maxSecretPatterns = 256

// cdpGuard is a browser's record of touched and sealed tabs and of the
// secrets typed into it. It lives in memory only, for the browser's life.
type cdpGuard struct {
	mu       sync.Mutex
	touched  map[target.ID]bool
	sealed   map[target.ID]bool
	patterns [][]byte
}

// touch marks tabs a CDP client has a session on.
func (g *cdpGuard) touch(id target.ID) {
	if id == "" {
		return
	}
	g.mu.Lock()
	if g.touched == nil {
		g.touched = map[target.ID]bool{}
	}
	g.touched[id] = true
	g.mu.Unlock()
}

func (g *cdpGuard) isTouched(id target.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.touched[id]
}

// IsSealed reports whether tab id has had a secret typed into it.
func (g *cdpGuard) IsSealed(id target.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sealed[id]
}

// seal marks tab id and remembers the secret's spellings; undo reverts both
// when nothing was typed after all.
func (g *cdpGuard) seal(id target.ID, secret string) (undo func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sealed == nil {
		g.sealed = map[target.ID]bool{}
	}
	was := g.sealed[id]
	g.sealed[id] = true
	added := 0
	for _, p := range secretSpellings(secret) {
		dup := false
		for _, q := range g.patterns {
			if string(q) == string(p) {
				dup = true
				break
			}
		}
		if !dup {
			g.patterns = append(g.patterns, p)
			added++
		}
	}
	if over := len(g.patterns) - maxSecretPatterns; over > 0 {
		g.patterns = append([][]byte(nil), g.patterns[over:]...)
		added = min(added, len(g.patterns))
	}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !was {
			delete(g.sealed, id)
		}
		if added <= len(g.patterns) {
			g.patterns = g.patterns[:len(g.patterns)-added]
		}
	}
}

// carriesSecret reports whether data holds a spelling of a secret typed in
// this browser.
func (g *cdpGuard) carriesSecret(data []byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.patterns {
		if len(p) > 0 && bytes.Contains(data, p) {
			return true
		}
	}
	return false
}

// secretSpellings are the forms a secret can take inside a DevTools JSON
// message: as is, JSON-escaped as Go and as Chromium escape (with and
// without HTML escapes, \u in either case), and base64 in its three
// alignments (a body or post data sent base64-encoded).
func secretSpellings(secret string) [][]byte {
	if secret == "" {
		return nil
	}
	set := map[string]bool{secret: true}
	if b, err := json.Marshal(secret); err == nil {
		s := string(b[1 : len(b)-1])
		set[s] = true
		set[upperUnicodeEscapes(s)] = true
	}
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if enc.Encode(secret) == nil {
		s := strings.TrimSpace(sb.String())
		s = s[1 : len(s)-1]
		set[s] = true
		set[upperUnicodeEscapes(s)] = true
		// Chromium writes every non-ASCII rune as \uXXXX in some writers.
		set[asciiEscaped(s)] = true
	}
	// base64 of the secret at each of three alignments: the whole groups
	// of its encoding that do not depend on what comes before or after.
	raw := []byte(secret)
	for shift := 0; shift < 3; shift++ {
		pad := make([]byte, shift, shift+len(raw))
		e := base64.StdEncoding.EncodeToString(append(pad, raw...))
		start := 0
		if shift > 0 {
			start = 4 // the first group mixes in the unknown bytes before
		}
		end := len(e) / 4 * 4
		if (shift+len(raw))%3 != 0 {
			end -= 4 // the last group mixes in the unknown bytes after
		}
		if end-start >= 8 {
			set[e[start:end]] = true
			set[strings.NewReplacer("+", "-", "/", "_").Replace(e[start:end])] = true
		}
	}
	out := make([][]byte, 0, len(set))
	for s := range set {
		if s != "" {
			out = append(out, []byte(s))
		}
	}
	return out
}

func upperUnicodeEscapes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			if s[i+1] == 'u' && i+6 <= len(s) {
				b.WriteString(`\u` + strings.ToUpper(s[i+2:i+6]))
				i += 5
				continue
			}
			b.WriteByte(s[i])
			b.WriteByte(s[i+1])
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// asciiEscaped writes every non-ASCII rune of an already escaped JSON
// string body as \uXXXX (surrogate pairs past the BMP).
func asciiEscaped(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04X\u%04X`, 0xD800+r>>10, 0xDC00+r&0x3FF)
		}
	}
	return b.String()
}

// touchedTab reports whether tab id, or a tab it was opened from, was
// touched by a CDP client (an opener can script what it opened).
func (b *Browser) touchedTab(ctx context.Context, id target.ID) bool {
	for range 8 {
		if b.cdpg.isTouched(id) {
			return true
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := cdpapi.Call(cctx, b.conn.Browser(), target.GetTargetInfo, target.GetTargetInfoParams{TargetID: id})
		cancel()
		if err != nil || info.TargetInfo == nil || info.TargetInfo.OpenerID == "" {
			return false
		}
		id = info.TargetInfo.OpenerID
	}
	return true // a chain this long: refuse rather than guess
}

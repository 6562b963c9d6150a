package main

// Issue 36, row 2: a vault value must not reach the model. type_secret
// into a text field on the secret's own origin, then computer_observe
// with elements (over /v1 and over MCP): the element's value was the
// secret and the screenshot showed it. Now a secret types only into a
// password field unless it was stored with visible: true; an element that
// received a secret never carries a value; and while a received field
// shows its text (a visible secret, or a password field the page turned
// into a text field), botd paints over the field's box in the screenshot.
//
// Real botd, Chromium and worker; the pages are served on loopback.

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

const revealDisplayBase = 1742

// revealSite serves the pages of the attack and records what they report.
type revealSite struct {
	url      string
	mu       sync.Mutex
	reports  []string // "page|value" on every input event
	signedIn []string // the pw of every POST /login
}

func (s *revealSite) of(page string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.reports {
		if p, v, ok := strings.Cut(r, "|"); ok && p == page {
			out = append(out, v)
		}
	}
	return out
}

func (s *revealSite) reset() {
	s.mu.Lock()
	s.reports, s.signedIn = nil, nil
	s.mu.Unlock()
}

// revealField is the field every page shows: large, at a fixed place, in a
// big monospace font, so the secret drawn in it covers much of its box.
const revealField = `<style>html,body{margin:0;background:#fff}
#f{position:fixed;left:40px;top:40px;width:1100px;height:140px;font:100px monospace;color:#000;background:#fff;border:0;outline:none;padding:0 10px;box-sizing:border-box}
#show{position:fixed;left:40px;top:260px;width:200px;height:60px;font:30px sans-serif}
#go{position:fixed;left:300px;top:260px;width:200px;height:60px;font:30px sans-serif}</style>
<script>
function report(v) { navigator.sendBeacon("/typed?page=" + encodeURIComponent(document.title), v); }
document.addEventListener("input", e => report(e.target.value), true);
</script>`

func (s *revealSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	page := func(title, body string) { fmt.Fprint(w, `<title>`+title+`</title>`+revealField+body) }
	switch r.Method + " " + r.URL.Path {
	case "POST /typed":
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reports = append(s.reports, r.URL.Query().Get("page")+"|"+string(b))
		s.mu.Unlock()
	case "GET /text":
		page("text", `<input id=f aria-label=code autocomplete=off autofocus>`)
	case "GET /otp":
		page("otp", `<input id=f aria-label=code autocomplete=one-time-code inputmode=numeric autofocus>`)
	case "GET /area":
		page("area", `<textarea id=f aria-label=note autofocus></textarea>`)
	case "GET /styledpw":
		// A password field whose page unmasks it with a style.
		page("styledpw", `<input id=f type=password aria-label=password style="-webkit-text-security:none" autofocus>`)
	case "GET /pw":
		// A login form with the usual "show password" button.
		page("pw", `<form method=post action=/login><input id=f name=pw type=password aria-label=password autofocus>
<button type=button id=show onclick="const f=document.getElementById('f'); f.type = f.type === 'password' ? 'text' : 'password'">show</button>
<button id=go>Sign in</button></form>`)
	case "POST /login":
		_ = r.ParseForm()
		s.mu.Lock()
		s.signedIn = append(s.signedIn, r.PostForm.Get("pw"))
		s.mu.Unlock()
		fmt.Fprint(w, `<title>home</title><h1>signed in</h1>`)
	default:
		http.NotFound(w, r)
	}
}

// revealObs is one computer_observe with elements, decoded.
type revealObs struct {
	raw      string
	elements []shared.Element
	img      image.Image
}

func decodeRevealObs(t *testing.T, texts []string, imageURLs []string) revealObs {
	t.Helper()
	o := revealObs{raw: strings.Join(texts, "\n")}
	for _, tx := range texts {
		var meta struct {
			Elements []shared.Element `json:"elements"`
		}
		line, _, _ := strings.Cut(tx, "\n")
		if json.Unmarshal([]byte(line), &meta) == nil && meta.Elements != nil {
			o.elements = meta.Elements
		}
	}
	for _, u := range imageURLs {
		b64, ok := strings.CutPrefix(u, "data:image/jpeg;base64,")
		require.True(t, ok, "an image content is a JPEG data URL")
		b, err := base64.StdEncoding.DecodeString(b64)
		require.NoError(t, err)
		o.img, err = jpeg.Decode(bytes.NewReader(b))
		require.NoError(t, err)
	}
	return o
}

// field is the observation's element for the page's field #f (the one
// whose box is at the page's fixed place).
func (o revealObs) field(t *testing.T) shared.Element {
	t.Helper()
	for _, e := range o.elements {
		if (e.Role == "textbox" || e.Role == "searchbox") && e.Box.W > 900 && e.Box.H > 100 {
			return e
		}
	}
	require.Failf(t, "no field", "the observation lists no element for the page's field: %s", o.raw)
	return shared.Element{}
}

// noSecretIn fails when any element carries the secret (or a part of it
// long enough to matter) as its value or name, or the text answer holds it.
func (o revealObs) noSecretIn(t *testing.T, secret string) {
	t.Helper()
	for _, e := range o.elements {
		if e.Value != nil && (*e.Value == secret || (len(*e.Value) >= 8 && strings.Contains(secret, strings.TrimSuffix(*e.Value, "…")))) {
			require.Failf(t, "the secret reached the model", "element %s (%s %q) carries the secret as its value (%d characters, equal to the secret: %v)", e.ID, e.Role, e.Name, len(*e.Value), *e.Value == secret)
		}
		require.NotContains(t, e.Name, secret, "element %s carries the secret in its name", e.ID)
	}
	require.NotContains(t, o.raw, secret, "the observation's text carries the secret")
}

// unevenIn is the share of the pixels of box b (inset by 8 px) that differ
// by more than 48 levels of luminance from the box's median: text drawn in
// the box makes it large; an empty field, or a box painted over, near 0.
func unevenIn(img image.Image, b shared.Box) float64 {
	var lums []int
	for y := b.Y + 8; y < b.Y+b.H-8; y++ {
		for x := b.X + 8; x < b.X+b.W-8; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			lums = append(lums, int((299*r+587*g+114*bl)/1000)>>8)
		}
	}
	if len(lums) == 0 {
		return 1
	}
	sorted := slices.Clone(lums)
	sort.Ints(sorted)
	med := sorted[len(sorted)/2]
	n := 0
	for _, l := range lums {
		if l-med > 48 || med-l > 48 {
			n++
		}
	}
	return float64(n) / float64(len(lums))
}

// notShown fails when the field's box in the screenshot shows text.
func (o revealObs) notShown(t *testing.T, what string) {
	t.Helper()
	require.NotNil(t, o.img, "the observation carries a screenshot")
	f := o.field(t)
	u := unevenIn(o.img, f.Box)
	if dir := os.Getenv("REVEAL_DUMP"); dir != "" {
		var buf bytes.Buffer
		_ = jpeg.Encode(&buf, o.img, nil)
		_ = os.WriteFile(filepath.Join(dir, strings.NewReplacer(" ", "_", "/", "_").Replace(what)+".jpg"), buf.Bytes(), 0o644)
	}
	t.Logf("%s: %.1f%% of the field's box %+v differs from its median", what, 100*u, f.Box)
	require.Less(t, u, 0.03, "%s: the screenshot shows text in the field's box %+v (%.1f%% of its pixels differ from the median): the secret is on the image the model gets", what, f.Box, 100*u)
}

func TestRedteamVaultReveal(t *testing.T) {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	secret := "Pw-" + hex.EncodeToString(b) + "-Zq9"
	code := "Vz-" + hex.EncodeToString(b[:6]) + "-Kk"

	site := &revealSite{}
	srv := httptest.NewUnstartedServer(site)
	srv.Listener.Close()
	srv.Listener = vaultAddr(t)
	srv.Start()
	t.Cleanup(srv.Close)
	site.url = srv.URL

	c := startComputer(t, "http://127.0.0.1:1", revealDisplayBase, "EGRESS_ALLOW=127.0.0.1/32")
	e := vaultWorker(t, c, io.Discard, "alice")

	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/secrets", map[string]any{"name": "bank", "origin": site.url, "value": secret}, nil))

	tool := func(t *testing.T, name string, args map[string]any) toolResult {
		t.Helper()
		_, res := e.tool(t, "alice", name, args)
		return res
	}
	open := func(t *testing.T, page string) {
		t.Helper()
		r := tool(t, "open_path", map[string]any{"target": site.url + "/" + page})
		require.True(t, r.Success, r.text())
		waitFor(t, page+" loaded", 30*time.Second, func() bool {
			r := tool(t, "browser_read_page", map[string]any{})
			return r.Success && strings.Contains(r.text(), `"title":"`+page+`"`)
		})
		// Click into the field, as the tool asks (the window gets the
		// keyboard focus too).
		r = tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "click", "x": 600, "y": 225}}})
		require.True(t, r.Success, r.text())
	}
	observe := func(t *testing.T) revealObs {
		t.Helper()
		// A fresh frame each time (a click off the field first would move
		// the focus): the worker's observe keeps no frame between calls.
		r := tool(t, "computer_observe", map[string]any{"elements": true})
		require.True(t, r.Success, r.text())
		var texts, imgs []string
		for _, c := range r.Content {
			if c.ImageURL != "" {
				imgs = append(imgs, c.ImageURL)
			} else {
				texts = append(texts, c.Text)
			}
		}
		return decodeRevealObs(t, texts, imgs)
	}
	refused := func(t *testing.T, r toolResult, page string) {
		t.Helper()
		require.False(t, r.Success, "type_secret typed the secret into the %s field: %s", page, r.text())
		require.Contains(t, r.text(), string(shared.CodeSecretFieldRefused), r.text())
		require.Contains(t, r.text(), "visible", r.text())
		time.Sleep(300 * time.Millisecond) // any beacon of a typed value
		require.Empty(t, site.of(page), "the %s page received input", page)
	}
	settle := func() { time.Sleep(400 * time.Millisecond) } // a caret blink, a repaint

	t.Run("secret into a plain text field", func(t *testing.T) {
		site.reset()
		open(t, "text")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		t.Logf("type_secret into <input type=text>: success=%v %s", r.Success, r.text())
		settle()
		o := observe(t)
		o.noSecretIn(t, secret)
		o.notShown(t, "after type_secret into a text field")
		refused(t, r, "text")
	})

	t.Run("secret into a one-time-code field", func(t *testing.T) {
		site.reset()
		open(t, "otp")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		t.Logf("type_secret into autocomplete=one-time-code: success=%v %s", r.Success, r.text())
		settle()
		o := observe(t)
		o.noSecretIn(t, secret)
		o.notShown(t, "after type_secret into a one-time-code field")
		refused(t, r, "otp")
	})

	t.Run("secret into a textarea", func(t *testing.T) {
		site.reset()
		open(t, "area")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		refused(t, r, "area")
	})

	t.Run("secret into a password field styled to show its text", func(t *testing.T) {
		// Chromium keeps a password field's dots whatever the page's
		// -webkit-text-security (botd checks the computed style too): the
		// secret is typed, and neither the elements nor the image show it.
		site.reset()
		open(t, "styledpw")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		require.True(t, r.Success, "type_secret into a password field: %s", r.text())
		waitFor(t, "the page's report of the typed value", 30*time.Second, func() bool { return slices.Contains(site.of("styledpw"), secret) })
		o := observe(t)
		o.noSecretIn(t, secret)
		require.Nil(t, o.field(t).Value, "a password field carries no value")
	})

	t.Run("secret into a password field, then the page shows it", func(t *testing.T) {
		site.reset()
		open(t, "pw")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		require.True(t, r.Success, "type_secret into a password field: %s", r.text())
		waitFor(t, "the page's report of the typed value", 30*time.Second, func() bool { return slices.Contains(site.of("pw"), secret) })
		o := observe(t)
		o.noSecretIn(t, secret)
		f := o.field(t)
		require.Nil(t, f.Value, "a password field carries no value")
		var show, signIn string
		for _, el := range o.elements {
			switch {
			case el.Role == "button" && el.Name == "show":
				show = el.ID
			case el.Role == "button" && el.Name == "Sign in":
				signIn = el.ID
			}
		}
		require.NotEmpty(t, show, "the show button is listed: %s", o.raw)
		require.NotEmpty(t, signIn, "the sign-in button is listed: %s", o.raw)

		// The model clicks "show": the field is a text field now.
		r = tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "click", "element": show}}})
		require.True(t, r.Success, r.text())
		settle()
		o = observe(t)
		o.noSecretIn(t, secret)
		require.Nil(t, o.field(t).Value, "the field that received the secret carries no value once it is a text field")
		o.notShown(t, "after the page turned the password field into a text field")

		// Back to a password field; the form signs in with the secret.
		r = tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "click", "element": show}, {"type": "click", "element": signIn}}})
		require.True(t, r.Success, r.text())
		waitFor(t, "the sign-in", 30*time.Second, func() bool {
			site.mu.Lock()
			defer site.mu.Unlock()
			return len(site.signedIn) > 0
		})
		site.mu.Lock()
		got := slices.Clone(site.signedIn)
		site.mu.Unlock()
		require.Equal(t, []string{secret}, got, "the page received the secret")

		// After the sign-in, Chromium's password manager would offer to
		// save the password in a bubble under the toolbar, with an eye that
		// shows it in clear (browser UI: no page element to mask). The
		// policy turns the password manager off: the bubble's place on the
		// plain "signed in" page stays blank.
		waitFor(t, "the signed-in page", 30*time.Second, func() bool {
			r := tool(t, "browser_read_page", map[string]any{})
			return r.Success && strings.Contains(r.text(), `"title":"home"`)
		})
		time.Sleep(2 * time.Second)
		// The model clicks where the bubble's eye would be.
		r = tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "click", "x": 1157, "y": 350}}})
		require.True(t, r.Success, r.text())
		settle()
		o = observe(t)
		bubble := shared.Box{X: 740, Y: 120, W: 460, H: 380}
		u := unevenIn(o.img, bubble)
		if dir := os.Getenv("REVEAL_DUMP"); dir != "" {
			var buf bytes.Buffer
			_ = jpeg.Encode(&buf, o.img, nil)
			_ = os.WriteFile(filepath.Join(dir, "signed-in.jpg"), buf.Bytes(), 0o644)
		}
		require.Less(t, u, 0.01, "after the sign-in, something is drawn where the password manager's save bubble shows (%.1f%% of %+v differs from its median): it offers to show the secret in clear", 100*u, bubble)
	})

	t.Run("the model reads the field through the address bar", func(t *testing.T) {
		// A javascript: URL typed into the address bar runs in the page
		// (on the secret's own origin) and can put the field's value
		// where the model reads it: the title.
		site.reset()
		open(t, "pw")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		require.True(t, r.Success, "type_secret into a password field: %s", r.text())
		r = tool(t, "computer_act", map[string]any{"actions": []map[string]any{
			{"type": "keypress", "keys": []string{"ctrl", "l"}},
			{"type": "type", "text": "javascript:document.title='leak:'+document.getElementById('f').value"},
			{"type": "keypress", "keys": []string{"Enter"}},
			{"type": "wait", "ms": 1000},
		}})
		require.True(t, r.Success, r.text())
		r = tool(t, "browser_read_page", map[string]any{})
		require.True(t, r.Success, r.text())
		t.Logf("the page's title after the javascript: URL: leaked=%v", strings.Contains(r.text(), secret))
		require.NotContains(t, r.text(), secret, "a javascript: URL typed into the address bar read the secret out of the field")
	})

	t.Run("the model reads the field in the developer tools", func(t *testing.T) {
		// The console (Ctrl+Shift+J) runs what the model types in the page;
		// the policy blocks the developer tools (a dialog says so).
		site.reset()
		open(t, "pw")
		r := tool(t, "type_secret", map[string]any{"name": "bank"})
		require.True(t, r.Success, "type_secret into a password field: %s", r.text())
		r = tool(t, "computer_act", map[string]any{"actions": []map[string]any{
			{"type": "keypress", "keys": []string{"ctrl", "shift", "j"}},
			{"type": "wait", "ms": 3000},
			{"type": "type", "text": "document.title='leak:'+document.getElementById('f').value"},
			{"type": "keypress", "keys": []string{"Enter"}},
			{"type": "wait", "ms": 1000},
		}})
		require.True(t, r.Success, r.text())
		if dir := os.Getenv("REVEAL_DUMP"); dir != "" {
			o := observe(t)
			var buf bytes.Buffer
			_ = jpeg.Encode(&buf, o.img, nil)
			_ = os.WriteFile(filepath.Join(dir, "devtools.jpg"), buf.Bytes(), 0o644)
		}
		r = tool(t, "browser_read_page", map[string]any{})
		require.True(t, r.Success, r.text())
		leaked := strings.Contains(r.text(), secret)
		t.Logf("the page's title after the console: leaked=%v", leaked)
		// Close what opened: the console, or the "DevTools not allowed on
		// this page" dialog.
		_ = tool(t, "computer_act", map[string]any{"actions": []map[string]any{{"type": "keypress", "keys": []string{"Escape"}}}})
		require.False(t, leaked, "the developer tools' console read the secret out of the field")
	})

	t.Run("visible secret into a text field", func(t *testing.T) {
		site.reset()
		require.Equal(t, http.StatusCreated, e.do(t, "POST", "/secrets", map[string]any{"name": "code", "origin": site.url, "value": code, "visible": true}, nil))
		var list struct {
			Secrets []map[string]any `json:"secrets"`
		}
		require.Equal(t, http.StatusOK, e.do(t, "GET", "/secrets", nil, &list))
		require.Contains(t, list.Secrets, map[string]any{"name": "code", "origin": site.url, "visible": true})
		require.Contains(t, list.Secrets, map[string]any{"name": "bank", "origin": site.url})

		open(t, "text")
		r := tool(t, "type_secret", map[string]any{"name": "code"})
		require.True(t, r.Success, "a visible secret types into a text field: %s", r.text())
		waitFor(t, "the page's report of the typed value", 30*time.Second, func() bool { return slices.Contains(site.of("text"), code) })
		settle()
		o := observe(t)
		o.noSecretIn(t, code)
		require.Nil(t, o.field(t).Value, "the field that received the secret carries no value")
		o.notShown(t, "with a visible secret in a text field (over /v1)")

		// The same over MCP.
		cs, _, err := mcpConnect(t.Context(), e.url, e.token, e.capa, "alice")
		require.NoError(t, err)
		defer cs.Close()
		mr, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "computer_observe", Arguments: map[string]any{"elements": true}})
		require.NoError(t, err)
		require.False(t, mr.IsError, mcpText(mr))
		var texts, imgs []string
		for _, c := range mr.Content {
			switch x := c.(type) {
			case *gomcp.TextContent:
				texts = append(texts, x.Text)
			case *gomcp.ImageContent:
				imgs = append(imgs, "data:image/jpeg;base64,"+base64.StdEncoding.EncodeToString(x.Data))
			}
		}
		if mr.StructuredContent != nil {
			sb, _ := json.Marshal(mr.StructuredContent)
			texts = append(texts, string(sb))
		}
		mo := decodeRevealObs(t, texts, imgs)
		mo.noSecretIn(t, code)
		require.Nil(t, mo.field(t).Value, "over MCP, the field that received the secret carries no value")
		mo.notShown(t, "with a visible secret in a text field (over MCP)")
	})
}

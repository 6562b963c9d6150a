package desktop

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/BurntSushi/xgb/xproto"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// mixedText is 300+ characters of what typing must get exactly right:
// Latin accents, Greek, Cyrillic, CJK, Hangul, emoji (with skin tone, ZWJ
// family, flag, variation selector), tabs, newlines and ASCII punctuation.
const mixedText = "Grüße aus Köln — café, naïve, façade, Ærøskøbing, ñandú, Łódź, Ştefan, señor.\n" +
	"\tΕλληνικά και Кириллица: ¿Qué tal? ¡Olé! «quotes» „Zitat“ €100 → ½ ° ±\n" +
	"日本語のテキスト、中文字符，한국어 문장。カタカナ ひらがな 漢字\n" +
	"Emoji: 😀🎉👍🏽🚀❤️ 🇩🇪 👨‍👩‍👧 ✓ ★\n" +
	"\tx = a*b + c/d; {\"json\": [1, 2, 3]} <tag attr='v'> `code` ~^|\\ @#$%&_=+\n" +
	"The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! 0123456789\n" +
	"Ünïcödé ëvérÿwhérè: àâäéèêëîïôöùûüÿç ÀÂÄÉÈÊËÎÏÔÖÙÛÜŸÇ — end."

// topWindow waits for a mapped top-level window whose WM_NAME contains
// name and returns its geometry.
func topWindow(t testing.TB, x *testX, name string, timeout time.Duration) (xproto.Window, int, int, int, int) {
	t.Helper()
	ctx := testenv.Context(t, timeout+5*time.Second)
	xc, err := dialX(ctx, x.display, x.xauth, true)
	require.NoError(t, err)
	defer xc.close()
	c := xc.c
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		tree, err := xproto.QueryTree(c, xproto.Window(xc.root)).Reply()
		require.NoError(t, err)
		for _, w := range tree.Children {
			attr, err := xproto.GetWindowAttributes(c, w).Reply()
			if err != nil || attr.MapState != xproto.MapStateViewable {
				continue
			}
			// Under a window manager the name is on the client inside the
			// frame.
			named := func(w xproto.Window) bool {
				p, err := xproto.GetProperty(c, false, w, xproto.AtomWmName, xproto.GetPropertyTypeAny, 0, 256).Reply()
				return err == nil && strings.Contains(string(p.Value), name)
			}
			found := named(w)
			if sub, err := xproto.QueryTree(c, w).Reply(); err == nil && !found {
				for _, ch := range sub.Children {
					if found = named(ch); found {
						break
					}
				}
			}
			if !found {
				continue
			}
			g, err := xproto.GetGeometry(c, xproto.Drawable(w)).Reply()
			if err != nil {
				continue
			}
			return w, int(g.X), int(g.Y), int(g.Width), int(g.Height)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no window named %q on %s within %s", name, x.display, timeout)
	return 0, 0, 0, 0, 0
}

// firstDiff describes where got and want part.
func firstDiff(got, want string) string {
	g, w := []rune(got), []rune(want)
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			lo := max(0, i-10)
			return fmt.Sprintf("first difference at rune %d: got %q, want %q", i, string(g[lo:min(len(g), i+10)]), string(w[lo:min(len(w), i+10)]))
		}
	}
	return fmt.Sprintf("lengths differ: got %d runes, want %d", len(g), len(w))
}

// TestTypeChromium types mixedText into a textarea of a real Chromium
// window on Xvfb; the page posts the textarea's value back to us. The page
// inserts a tab for the Tab key (in a plain textarea Tab moves the focus).
func TestTypeChromium(t *testing.T) {
	t.Run("bare", func(t *testing.T) { typeChromium(t, false) })
	t.Run("xfwm4", func(t *testing.T) { typeChromium(t, true) })
}

func typeChromium(t *testing.T, wm bool) {
	requireX(t)
	testenv.RequireTools(t, "chromium")
	if wm {
		testenv.RequireTools(t, "xfwm4")
	}
	x := startX(t)
	if wm {
		x.startApp(t, []string{"xfwm4", "--compositor=off"}, "XDG_CONFIG_HOME="+x.dir+"/config", "XDG_CACHE_HOME="+x.dir+"/cache")
		waitWM(t, x)
	}
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 120*time.Second)

	var mu sync.Mutex // mu guards value
	value := ""
	ready := make(chan struct{})
	var readyOnce sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, chromiumPage)
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) { readyOnce.Do(func() { close(ready) }) })
	mux.HandleFunc("/post", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		value = string(b)
		mu.Unlock()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	profile := filepath.Join(x.dir, "chromium")
	require.NoError(t, os.Mkdir(profile, 0o700))
	require.NoError(t, os.Chown(profile, int(x.user.UID), int(x.user.GID)))
	x.startApp(t, []string{"chromium", "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
		"--password-store=basic", "--disable-gpu", "--window-position=0,0", "--window-size=1280,800",
		"--app=http://" + ln.Addr().String() + "/"})
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("the page never loaded")
	}
	topWindow(t, x, "typing", 20*time.Second)
	require.NoError(t, d.Do(ctx, shared.Action{Type: "click", X: ip(640), Y: ip(400)}))
	waitValue := func(want string, timeout time.Duration) (string, bool) {
		deadline := time.Now().Add(timeout)
		var got string
		for time.Now().Before(deadline) {
			mu.Lock()
			got = value
			mu.Unlock()
			if got == want {
				return got, true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return got, false
	}
	// A probe first: the page must be taking keys before the real text
	// starts (a slow start would otherwise lose its beginning).
	probe := "ok"
	for attempt := 0; ; attempt++ {
		require.NoError(t, d.Do(ctx, shared.Action{Type: "keypress", Keys: []string{"ctrl", "a"}}))
		require.NoError(t, d.Do(ctx, shared.Action{Type: "type", Text: &probe}))
		if _, ok := waitValue("ok", 3*time.Second); ok {
			break
		}
		if attempt == 5 {
			f, err := d.Capture(ctx)
			if err == nil {
				_ = os.WriteFile(filepath.Join(os.TempDir(), "chromium-probe.jpg"), f.JPEG, 0o644)
			}
			t.Fatalf("probe not typed after %d attempts (screenshot in %s)", attempt+1, os.TempDir())
		}
	}
	require.NoError(t, d.Do(ctx, shared.Action{Type: "keypress", Keys: []string{"ctrl", "a"}}))
	requirePingTarget(t, d)

	text := mixedText
	start := time.Now()
	require.NoError(t, d.Do(ctx, shared.Action{Type: "type", Text: &text}))
	elapsed := time.Since(start)
	n := utf8.RuneCountInString(text)
	t.Logf("typed %d characters in %s: %.0f chars/s", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	if got, ok := waitValue(text, 60*time.Second); !ok {
		t.Fatalf("chromium textarea differs: %s\ngot:  %q\nwant: %q", firstDiff(got, text), got, text)
	}
}

const chromiumPage = `<!doctype html><html><head><meta charset="utf-8"><title>typing</title>
<style>html,body{margin:0;height:100%}textarea{width:100%;height:100%;box-sizing:border-box;font-size:14px}</style></head>
<body><textarea id="t" autofocus spellcheck="false"></textarea>
<script>
const t = document.getElementById('t');
t.addEventListener('keydown', e => {
  if (e.key === 'Tab') { e.preventDefault(); document.execCommand('insertText', false, '\t'); }
});
let timer;
t.addEventListener('input', () => {
  clearTimeout(timer);
  timer = setTimeout(() => fetch('/post', {method: 'POST', body: t.value}), 150);
});
fetch('/ready', {method: 'POST'});
</script></body></html>`

// TestTypeMousepad types mixedText into mousepad (GTK), saves with ctrl+s
// and compares the file byte for byte; once bare, once under xfwm4 (the
// focus then belongs to a reparented client window).
func TestTypeMousepad(t *testing.T) {
	t.Run("bare", func(t *testing.T) { typeMousepad(t, false) })
	t.Run("xfwm4", func(t *testing.T) { typeMousepad(t, true) })
}

func typeMousepad(t *testing.T, wm bool) {
	requireX(t)
	testenv.RequireTools(t, "mousepad")
	if wm {
		testenv.RequireTools(t, "xfwm4")
	}
	x := startX(t)
	if wm {
		x.startApp(t, []string{"xfwm4", "--compositor=off"}, "XDG_CONFIG_HOME="+x.dir+"/config", "XDG_CACHE_HOME="+x.dir+"/cache")
		waitWM(t, x)
	}
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 120*time.Second)

	path := filepath.Join(x.dir, "typed.txt")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	require.NoError(t, os.Chown(path, int(x.user.UID), int(x.user.GID)))
	x.startApp(t, []string{"mousepad", "--disable-server", path}, "XDG_CONFIG_HOME="+x.dir+"/config", "XDG_CACHE_HOME="+x.dir+"/cache", "XDG_DATA_HOME="+x.dir+"/data")
	_, wx, wy, ww, wh := topWindow(t, x, "typed.txt", 30*time.Second)
	require.NoError(t, d.Do(ctx, shared.Action{Type: "click", X: ip(wx + ww/2), Y: ip(wy + wh/2)}))
	// The click gives mousepad the focus; typing starts once it answers there.
	waitPingTarget(t, d, 30*time.Second)

	text := mixedText
	start := time.Now()
	require.NoError(t, d.Do(ctx, shared.Action{Type: "type", Text: &text}))
	elapsed := time.Since(start)
	n := utf8.RuneCountInString(text)
	t.Logf("typed %d characters in %s: %.0f chars/s", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	require.NoError(t, d.Do(ctx, shared.Action{Type: "keypress", Keys: []string{"ctrl", "s"}}))

	deadline := time.Now().Add(60 * time.Second)
	var got []byte
	for time.Now().Before(deadline) {
		got, _ = os.ReadFile(path)
		if string(got) == text {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("mousepad file differs: %s\ngot:  %q\nwant: %q", firstDiff(string(got), text), got, text)
}

// requirePingTarget checks that the focused application answers
// _NET_WM_PING, so typing synchronizes with it instead of guessing pauses.
func requirePingTarget(t *testing.T, d *Desktop) {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	s, err := d.session(ctx)
	require.NoError(t, err)
	pt, err := findPingTarget(ctx, s)
	require.NoError(t, err)
	require.NoError(t, pt.barrier(ctx, s))
}

// waitPingTarget waits until the focused application answers _NET_WM_PING.
func waitPingTarget(t *testing.T, d *Desktop, timeout time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, timeout)
	var err error
	for ctx.Err() == nil {
		var s *session
		if s, err = d.session(ctx); err == nil {
			var pt pingTarget
			if pt, err = findPingTarget(ctx, s); err == nil {
				if err = pt.barrier(ctx, s); err == nil {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the focused application never answered _NET_WM_PING: %v", err)
}

// waitWM waits until a window manager owns the screen (WM_S0).
func waitWM(t testing.TB, x *testX) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	xc, err := dialX(ctx, x.display, x.xauth, true)
	require.NoError(t, err)
	defer xc.close()
	a, err := xproto.InternAtom(xc.c, false, 5, "WM_S0").Reply()
	require.NoError(t, err)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		o, err := xproto.GetSelectionOwner(xc.c, a.Atom).Reply()
		require.NoError(t, err)
		if o.Owner != 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no window manager on the display")
}

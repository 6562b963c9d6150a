package desktop

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// TestScrollChromium checks the pixel→wheel-click conversion against a
// real Chromium page: scroll_y pixels move the page by about that much.
func TestScrollChromium(t *testing.T) {
	requireX(t)
	testenv.RequireTools(t, "chromium")
	x := startX(t)
	d := newDesktop(t, x)
	ctx := testenv.Context(t, 120*time.Second)

	var mu sync.Mutex // mu guards scrollY
	scrollY := -1
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><html><head><title>scroll</title></head>
<body style="margin:0;height:20000px;background:linear-gradient(#fff,#000)">
<script>
let timer;
const post = () => fetch('/y?v=' + Math.round(window.scrollY), {method: 'POST'});
window.addEventListener('scroll', () => { clearTimeout(timer); timer = setTimeout(post, 200); });
post();
</script></body></html>`)
	})
	mux.HandleFunc("/y", func(w http.ResponseWriter, r *http.Request) {
		v, _ := strconv.Atoi(r.URL.Query().Get("v"))
		mu.Lock()
		scrollY = v
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
	get := func() int { mu.Lock(); defer mu.Unlock(); return scrollY }
	require.Eventually(t, func() bool { return get() == 0 }, 60*time.Second, 50*time.Millisecond, "page not loaded")
	topWindow(t, x, "scroll", 20*time.Second)

	stable := func() int {
		last, since := get(), time.Now()
		for time.Since(since) < time.Second {
			time.Sleep(100 * time.Millisecond)
			if v := get(); v != last {
				last, since = v, time.Now()
			}
		}
		return last
	}
	// A page that has just loaded ignores the wheel until its first frames
	// are up: probe with one click's worth until the page moves.
	base := 0
	for i := 0; base == 0; i++ {
		require.Less(t, i, 20, "the page never scrolled")
		require.NoError(t, d.Do(ctx, shared.Action{Type: "scroll", X: ip(640), Y: ip(400), ScrollY: ip(WheelPixels)}))
		base = stable()
	}
	require.InDelta(t, WheelPixels, base, 10, "one wheel click")
	require.NoError(t, d.Do(ctx, shared.Action{Type: "scroll", X: ip(640), Y: ip(400), ScrollY: ip(600)}))
	down := stable()
	require.NoError(t, d.Do(ctx, shared.Action{Type: "scroll", X: ip(640), Y: ip(400), ScrollY: ip(-300)}))
	up := stable()
	t.Logf("from %d: scroll_y 600 → scrollY %d; then -300 → %d (WheelPixels %d)", base, down, up, WheelPixels)
	require.InDelta(t, base+600, down, 60)
	require.InDelta(t, base+300, up, 60)
}

package browser_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/browser"
	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
)

// site is a local HTTP server that records what reached it.
type site struct {
	srv *httptest.Server
	// mu guards hits.
	mu   sync.Mutex
	hits []string
}

func newSite(t *testing.T, h http.Handler) *site { return newSiteB(t, h) }

func newSiteB(t testing.TB, h http.Handler) *site {
	s := &site{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits = append(s.hits, r.Method+" "+r.Host+r.URL.RequestURI())
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *site) saw(prefix string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hits {
		if strings.HasPrefix(h, prefix) {
			return true
		}
	}
	return false
}

func (s *site) addr() string { return strings.TrimPrefix(s.srv.URL, "http://") }

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestBrowserOpenReadPages(t *testing.T) {
	u := browsertest.Require(t)
	x := browsertest.StartX(t, u)
	s := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/surrogates":
			// Lone surrogates only exist inside the page's JS strings.
			fmt.Fprint(w, `<title>s</title><body><p id=p></p><script>document.getElementById("p").textContent = "a\uD800b\uDC00c 😀";document.title = "t\uD801";</script>`)
		case "/many":
			fmt.Fprint(w, `<title>many</title><body>`)
			for i := range 400 {
				fmt.Fprintf(w, `<a href="/l/%d">link %d</a> `, i, i)
			}
			fmt.Fprint(w, strings.Repeat("word ", 40_000))
		default:
			fmt.Fprint(w, `<title>Hello page</title><body><h1>Hello, wörld 日本語</h1><a href="https://example.org/x">Example</a></body>`)
		}
	}))
	socks := browsertest.StartSocks(t, s.addr())
	o := x.Options(t, "read")
	o.SocksAddr = socks.Addr
	b := browsertest.Launch(t, o)

	ctx := browsertest.Ctx(t, 60*time.Second)
	// Maximized once ready (xfwm4 runs on the test display when installed).
	wins, err := b.Windows(ctx)
	if err != nil || len(wins) != 1 || (wins[0].State != "maximized" && (wins[0].Width < 1280 || wins[0].Height < 800)) {
		t.Fatalf("windows after start: %+v %v", wins, err)
	}
	t.Logf("window after start: %+v", wins[0])
	res, err := b.Open(ctx, "http://www.example-site.test/hello", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("open: %+v", res)
	var p browser.Page
	waitFor(t, 10*time.Second, "page read", func() bool {
		p, err = b.ReadPage(ctx)
		return err == nil && p.Title == "Hello page"
	})
	if !strings.Contains(p.Text, "Hello, wörld 日本語") || p.URL != "http://www.example-site.test/hello" {
		t.Fatalf("page %+v", p)
	}
	if len(p.Links) != 1 || p.Links[0].URL != "https://example.org/x" || p.Links[0].Text != "Example" {
		t.Fatalf("links %+v", p.Links)
	}
	if hs := socks.Hosts(); !contains(hs, "www.example-site.test:80") {
		t.Fatalf("the name did not go to the proxy unresolved: %v", hs)
	}
	pages, err := b.Pages(ctx)
	if err != nil || len(pages) != 1 || pages[0] != "http://www.example-site.test/hello" {
		t.Fatalf("pages %v %v", pages, err)
	}
	origin, err := b.FrontOrigin(ctx)
	if err != nil || origin != "http://www.example-site.test" {
		t.Fatalf("origin %q %v", origin, err)
	}

	// Lone surrogates in page text.
	if _, err := b.Open(ctx, "http://www.example-site.test/surrogates", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "surrogate page", func() bool {
		p, err = b.ReadPage(ctx)
		return err == nil && strings.HasPrefix(p.Title, "t")
	})
	if !strings.Contains(p.Text, "a\uFFFDb\uFFFDc 😀") || p.Title != "t\uFFFD" {
		t.Fatalf("surrogates: %q %q", p.Text, p.Title)
	}

	// Caps.
	if _, err := b.Open(ctx, "http://www.example-site.test/many", true); err != nil {
		t.Fatal(err)
	}
	// The title comes with the first bytes and the links and text grow
	// while the page arrives (rehearsal 46 read 253 of its 400 links on a
	// loaded host): wait for both caps, which the whole page reaches.
	waitFor(t, 30*time.Second, "the many page's links and text to reach their caps", func() bool {
		p, err = b.ReadPage(ctx)
		return err == nil && p.Title == "many" && p.LinksTruncated && p.TextTruncated
	})
	if len(p.Links) != browser.MaxPageLinks || !p.LinksTruncated || len([]rune(p.Text)) > browser.MaxPageText || !p.TextTruncated {
		t.Fatalf("caps: %d links, %d chars, %v %v", len(p.Links), len([]rune(p.Text)), p.LinksTruncated, p.TextTruncated)
	}
	pages, err = b.Pages(ctx)
	if err != nil || len(pages) != 1 || pages[0] != "http://www.example-site.test/many" {
		t.Fatalf("pages after a new tab: %v %v", pages, err)
	}

	if _, err := b.Open(ctx, "javascript:alert(1)", false); err != browser.ErrBadURL {
		t.Fatalf("javascript: URL: %v", err)
	}
	assertNoTCPListener(t, b.Pid())
}

// assertNoTCPListener fails when any process of the browser's group holds a
// listening TCP socket: no DevTools port, ever.
func assertNoTCPListener(t *testing.T, pid int) {
	t.Helper()
	listening := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" { // TCP_LISTEN
				listening[fs[9]] = true
			}
		}
	}
	pids := chromiumPids(t, pid)
	if len(pids) < 2 {
		t.Fatalf("found only %d chromium processes for pid %d", len(pids), pid)
	}
	for _, p := range pids {
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/fd")
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(p), "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			inode := strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")
			if listening[inode] {
				t.Fatalf("chromium process %d listens on TCP (socket inode %s)", p, inode)
			}
		}
	}
	t.Logf("checked %d chromium processes: no TCP listener", len(pids))
}

// chromiumPids is pid and every process in its process group.
func chromiumPids(t *testing.T, pid int) []int {
	out := []int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fs := strings.Fields(s[i+2:])
		if len(fs) > 2 && fs[2] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

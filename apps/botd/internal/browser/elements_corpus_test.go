package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/browser"
	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
	"github.com/open-bot/computer/apps/botd/internal/egress"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// The element corpus (testdata/elements): pages a person meets — forms,
// tables, menus, dialogs, shadow DOM, same- and cross-origin frames, a
// scrolled page, a zoomed one, a long list, contenteditable — each marking
// its interactive elements with data-k (and, on the clickable pages, what
// must not be listed with data-nolist). corpus.js in every page and frame
// posts what is truly visible (elementFromPoint at each element's visible
// centre) and which data-k element got each pointerdown. The pages are
// served from two loopback origins (127.0.0.1 and 127.0.0.2), so a frame
// from the second is a cross-origin (out-of-process) frame.
//
// Displays 1300-1309 and ports 33000-33019 are this file's alone.
const (
	corpusDisplayBase  = 1300
	corpusViewPortBase = 33000
	corpusScreen       = "elcorpus"
)

// corpusLog is what the pages posted.
type corpusLog struct {
	// mu guards truths and hits.
	mu     sync.Mutex
	truths map[string]corpusTruth // by frame URL: the latest
	hits   []string
	// recv is, per hit, whether the element the test clicked received it
	// (corpus.js: the innermost listed element on the event's path is that
	// element): its token then, and its own data-k.
	recv []corpusRecv
	wake chan struct{}
}

// corpusRecv is one pointerdown's receiver, as corpus.js saw it.
type corpusRecv struct {
	Tok string `json:"tok"`
	EK  string `json:"ek"`
}

type corpusTruth struct {
	Frame string   `json:"frame"`
	DPR   float64  `json:"dpr"`
	Keys  []string `json:"keys"`
}

func (l *corpusLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.truths = map[string]corpusTruth{}
	l.hits = nil
	l.recv = nil
}

func (l *corpusLog) post(b []byte) {
	var m struct {
		Kind string `json:"kind"`
		K    string `json:"k"`
		corpusRecv
		corpusTruth
	}
	if json.Unmarshal(b, &m) != nil {
		return
	}
	l.mu.Lock()
	switch m.Kind {
	case "truth":
		l.truths[m.Frame] = m.corpusTruth
	case "hit":
		l.hits = append(l.hits, m.K)
		l.recv = append(l.recv, m.corpusRecv)
	}
	w := l.wake
	l.wake = make(chan struct{})
	l.mu.Unlock()
	close(w)
}

// waitFor waits (up to d) until cond holds on the log.
func (l *corpusLog) waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		l.mu.Lock()
		ok := cond()
		w := l.wake
		l.mu.Unlock()
		if ok {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		select {
		case <-w:
		case <-time.After(left):
		}
	}
}

// corpusSite serves testdata/elements on two loopback origins.
type corpusSite struct {
	a, b string // base URLs
	log  *corpusLog
}

var framesMeta = regexp.MustCompile(`<meta name="frames" content="(\d+)">`)

func startCorpusSite(t testing.TB) *corpusSite {
	t.Helper()
	s := &corpusSite{log: &corpusLog{truths: map[string]corpusTruth{}, wake: make(chan struct{})}}
	dir := filepath.Join("testdata", "elements")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/log" {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			s.log.post(b)
			return
		}
		name := filepath.Base(r.URL.Path)
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		switch filepath.Ext(name) {
		case ".html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			data = bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("{{A}}"), []byte(s.a)), []byte("{{B}}"), []byte(s.b))
		case ".js":
			w.Header().Set("Content-Type", "text/javascript")
		case ".css":
			w.Header().Set("Content-Type", "text/css")
		}
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(data)
	})
	for i, host := range []string{"127.0.0.1", "127.0.0.2"} {
		ln, err := net.Listen("tcp", host+":0")
		if err != nil {
			testenv.Unavailable(t, "listen on %s: %v", host, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		if i == 0 {
			s.a = "http://" + ln.Addr().String()
		} else {
			s.b = "http://" + ln.Addr().String()
		}
	}
	return s
}

// corpusPages lists the corpus's pages (not its frames) and how many
// documents post a truth in each.
func corpusPages(t testing.TB) (names []string, frames map[string]int) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("testdata", "elements"))
	if err != nil {
		t.Fatal(err)
	}
	frames = map[string]int{}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".html") || strings.HasPrefix(n, "frame-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", "elements", n))
		if err != nil {
			t.Fatal(err)
		}
		m := framesMeta.FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s has no frames meta", n)
		}
		k, _ := strconv.Atoi(string(m[1]))
		name := strings.TrimSuffix(n, ".html")
		names = append(names, name)
		frames[name] = k
	}
	sort.Strings(names)
	return names, frames
}

// corpusEnv is a real screen (Xvfb, XFCE) with its Chromium, driven
// through the screen routes like botd's API.
type corpusEnv struct {
	sm    *screen.Manager
	bs    *browser.Screens
	mux   *http.ServeMux
	lease string
	site  *corpusSite
}

func startCorpusEnv(t testing.TB) *corpusEnv {
	t.Helper()
	u := browsertest.Require(t)
	testenv.RequireTools(t, "xfwm4", "xfce4-panel", "xfdesktop", "dbus-daemon", "x11vnc")
	bot, err := osuser.Lookup("bot")
	if err != nil {
		testenv.Unavailable(t, "bot user: %v", err)
	}
	home, err := os.MkdirTemp("", "browser-elements-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := osuser.PrepareDirs(osuser.Layout(home, u, bot)); err != nil {
		t.Fatal(err)
	}
	site := startCorpusSite(t)
	// botd's own egress proxy, direct mode, allowed to reach loopback (the
	// screens' Chromium sends loopback through it too).
	px, err := egress.New(egress.Options{Addr: "127.0.0.1:0", Allow: egresspolicy.MustParse("127.0.0.0/8"), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	bs := browser.NewScreens(browser.ScreensOptions{SocksAddr: px.Addr().String(), Desktop: u, Workspace: filepath.Join(home, "bot"), Log: log})
	sm := screen.New(screen.Options{
		Home: home, DisplayBase: corpusDisplayBase, ViewPortBase: corpusViewPortBase, MaxScreens: 1, Desktop: u, Log: log,
		Blocked: bs.Blocked, BrowserState: bs.State,
	})
	mux := http.NewServeMux()
	sm.Routes(mux)
	bs.Attach(sm, mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sm.Close(ctx)
		bs.Close(ctx)
	})
	e := &corpusEnv{sm: sm, bs: bs, mux: mux, site: site}
	var l struct {
		LeaseID string `json:"leaseId"`
	}
	if code, body := e.call("POST", "/screens/"+corpusScreen+"/lease", map[string]any{"kind": "agent", "holder": "bot-el", "ttlSeconds": 3600}, &l); code != 200 {
		t.Fatalf("lease: %d %s", code, body)
	}
	e.lease = l.LeaseID
	return e
}

// call runs one request through the routes (no network in between).
func (e *corpusEnv) call(method, path string, body, out any) (int, string) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, path, rd)
	w := &recorder{h: http.Header{}}
	e.mux.ServeHTTP(w, req)
	if out != nil && w.code == 200 {
		_ = json.Unmarshal(w.buf.Bytes(), out)
	}
	return w.code, w.buf.String()
}

// recorder is a minimal http.ResponseWriter.
type recorder struct {
	h    http.Header
	code int
	buf  bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.buf.Write(b)
}
func (r *recorder) WriteHeader(c int) { r.code = c }

// observation is what /observe answers.
type observation struct {
	Image         []byte            `json:"image"`
	Elements      []shared.Element  `json:"elements"`
	ElementsError *shared.ErrorBody `json:"elementsError"`
}

func (e *corpusEnv) observe(elements bool) (observation, time.Duration, string, error) {
	var o observation
	start := time.Now()
	code, body := e.call("POST", "/screens/"+corpusScreen+"/observe", map[string]any{"leaseId": e.lease, "elements": elements}, &o)
	d := time.Since(start)
	if code != 200 {
		return o, d, body, fmt.Errorf("observe: %d %s", code, body)
	}
	return o, d, body, nil
}

// act runs a batch through /act and returns its results.
func (e *corpusEnv) act(actions ...map[string]any) ([]screen.ActionResult, int, string) {
	var r screen.ActResult
	code, body := e.call("POST", "/screens/"+corpusScreen+"/act", map[string]any{"leaseId": e.lease, "actions": actions}, &r)
	return r.Results, code, body
}

// click is one real XTEST click at (x,y) on the screen, under the lease,
// without the act route's settle time.
func (e *corpusEnv) click(ctx context.Context, x, y int) error {
	return e.sm.WithLease(ctx, corpusScreen, e.lease, func(ctx context.Context, s *screen.Screen) error {
		return s.Driver().Do(ctx, shared.Action{Type: shared.ActionClick, X: &x, Y: &y})
	})
}

func (e *corpusEnv) open(t testing.TB, url string) {
	t.Helper()
	if code, body := e.call("POST", "/screens/"+corpusScreen+"/open", map[string]any{"leaseId": e.lease, "target": url}, nil); code != 200 {
		t.Fatalf("open %s: %d %s", url, code, body)
	}
}

// pageResult is one page's figures.
type pageResult struct {
	name  string
	truth []string
	// hit: the data-k of every listed element that received its own click
	// (recall counts the truth keys in it).
	hit      map[string]bool
	reported int
	// received: listed elements that, clicked at their centre, were the
	// innermost listed element on the pointerdown's path (precision).
	received int
	// wrong: the listed elements that did not (what got the click instead).
	wrong     []string
	misses    []string
	elemBytes int
	jpegBytes int
	withMs    []float64
	withoutMs []float64
}

// runPage opens one corpus page, waits for its truth, observes it with
// elements, and clicks the centre of every reported element (real XTEST
// clicks), recording whether each click was received by the element
// clicked (precision) and which truth elements were so clicked (recall).
func (e *corpusEnv) runPage(t testing.TB, ctx context.Context, name string, frames, timings int) pageResult {
	t.Helper()
	lg := e.site.log
	lg.reset()
	e.open(t, e.site.a+"/"+name+".html")
	wantDPR := 1.0
	if strings.Contains(name, "zoom125") {
		wantDPR = 1.25
		if !lg.waitFor(15*time.Second, func() bool { return len(lg.truths) >= frames }) {
			t.Fatalf("%s: no truth before zooming", name)
		}
		// Browser zoom as a person sets it: ctrl+plus twice (110 %, 125 %).
		if _, code, body := e.act(map[string]any{"type": "keypress", "keys": []string{"ctrl", "="}}, map[string]any{"type": "keypress", "keys": []string{"ctrl", "="}}); code != 200 {
			t.Fatalf("zoom: %d %s", code, body)
		}
		defer func() {
			if _, code, body := e.act(map[string]any{"type": "keypress", "keys": []string{"ctrl", "0"}}); code != 200 {
				t.Errorf("unzoom: %d %s", code, body)
			}
		}()
	}
	ready := func() bool {
		n := 0
		for _, tr := range lg.truths {
			if tr.DPR > wantDPR-0.01 && tr.DPR < wantDPR+0.01 {
				n++
			}
		}
		return n >= frames
	}
	if !lg.waitFor(20*time.Second, ready) {
		lg.mu.Lock()
		t.Fatalf("%s: the page's truth did not arrive (%d of %d frames at dpr %.2f): %+v", name, len(lg.truths), frames, wantDPR, lg.truths)
	}
	// The page settles (the window maximized, fonts): the truth and the
	// elements are read from the same layout.
	time.Sleep(300 * time.Millisecond)
	lg.mu.Lock()
	var truth []string
	for _, tr := range lg.truths {
		truth = append(truth, tr.Keys...)
	}
	lg.mu.Unlock()
	sort.Strings(truth)
	truth = slices.Compact(truth)

	res := pageResult{name: name, truth: truth, hit: map[string]bool{}}
	obs, _, body, err := e.observe(true)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if obs.ElementsError != nil {
		t.Fatalf("%s: elementsError %+v", name, obs.ElementsError)
	}
	var full struct {
		Elements json.RawMessage `json:"elements"`
	}
	_ = json.Unmarshal([]byte(body), &full)
	res.elemBytes = len(full.Elements)
	for i := 0; i < timings; i++ {
		o, d, _, err := e.observe(true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		res.withMs = append(res.withMs, float64(d.Microseconds())/1000)
		if len(o.Image) > 0 {
			res.jpegBytes = len(o.Image)
		}
		o, d, _, err = e.observe(false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		res.withoutMs = append(res.withoutMs, float64(d.Microseconds())/1000)
		if len(o.Image) > 0 {
			res.jpegBytes = len(o.Image)
		}
	}
	if res.jpegBytes == 0 {
		// Every timed observation was unchanged: take a fresh lease's frame.
		res.jpegBytes = len(obs.Image)
	}
	for _, el := range obs.Elements {
		// The desktop's own elements (ids "d…": the panel's launchers and
		// menus) are the desktop corpus's (screen package); clicking them
		// here would start programs over the page.
		if !strings.HasPrefix(el.ID, "d") {
			res.reported++
		}
	}
	br, err := e.bs.Browser(ctx, corpusScreen)
	if err != nil {
		t.Fatalf("%s: browser: %v", name, err)
	}
	var ids []string
	for _, el := range obs.Elements {
		if !strings.HasPrefix(el.ID, "d") {
			ids = append(ids, el.ID)
		}
	}
	nolist, err := br.CorpusMark(ctx, ids, "")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, id := range nolist {
		// An over-report the click cannot show (a wrapper beside its one
		// control, an inner part of a clickable): counted against precision.
		res.wrong = append(res.wrong, id+" is marked data-nolist on the page (a wrapper, an inner part or a container)")
	}
	for i, el := range obs.Elements {
		if strings.HasPrefix(el.ID, "d") {
			continue
		}
		tok := name + "#" + strconv.Itoa(i)
		if _, err := br.CorpusMark(ctx, []string{el.ID}, tok); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := el.Box.Center()
		lg.mu.Lock()
		n := len(lg.hits)
		lg.mu.Unlock()
		if err := e.click(ctx, p.X, p.Y); err != nil {
			t.Fatalf("%s: click %s: %v", name, el.ID, err)
		}
		var k string
		var rv corpusRecv
		got := lg.waitFor(3*time.Second, func() bool {
			if len(lg.hits) > n {
				k, rv = lg.hits[n], lg.recv[n]
				return true
			}
			return false
		})
		switch {
		case got && rv.Tok == tok && !slices.Contains(nolist, el.ID):
			res.received++
			if rv.EK != "" {
				res.hit[rv.EK] = true
			}
		case got && rv.Tok == tok:
		case got:
			res.wrong = append(res.wrong, fmt.Sprintf("%s %s %q %+v -> received by another (data-k %q, %+v)", el.ID, el.Role, el.Name, el.Box, k, rv))
		default:
			res.wrong = append(res.wrong, fmt.Sprintf("%s %s %q %+v -> no pointerdown", el.ID, el.Role, el.Name, el.Box))
		}
	}
	for _, k := range truth {
		if !res.hit[k] {
			res.misses = append(res.misses, k)
		}
	}
	if len(res.misses) > 0 || len(res.wrong) > 0 {
		var b strings.Builder
		for _, el := range obs.Elements {
			fmt.Fprintf(&b, "\n  %s %s %q %+v %v", el.ID, el.Role, el.Name, el.Box, el.States)
		}
		t.Logf("%s: missed %v; not received by the element clicked %q; reported:%s", name, res.misses, res.wrong, b.String())
	}
	return res
}

// The corpus's claims (issue 35): recall is found/expected (a visible
// data-k element counts as found when a listed element is that element and,
// clicked at its centre, received the click); precision is hit/listed (a
// listed element, clicked at its centre, is the innermost listed element
// on the pointerdown's path: not an ancestor, not a neighbour; a listed
// node the page marks data-nolist, a wrapper beside its one control or an
// inner part of a clickable, counts as a miss too). The test
// fails below these, per page and over the corpus.
const (
	corpusMinRecallPage    = 100.0
	corpusMinRecallAll     = 100.0
	corpusMinPrecisionPage = 100.0
	// 341 of 344 listed elements over the 35 pages.
	corpusMinPrecisionAll = 99.1
)

// corpusPrecisionBelow100 are the pages whose precision is known to be
// below 100 %, at what they measure: a listbox (and an ARIA combobox
// wrapping its input) is listed by the accessibility tree and its centre
// falls on one of its own listed options (or the input), which then takes
// the click. 08: 6 of 7; 28: 6 of 8.
var corpusPrecisionBelow100 = map[string]float64{
	"08-dropdown-over":  85.7,
	"28-search-suggest": 75.0,
}

// TestElementsCorpus checks, on every corpus page, recall and precision of
// the observation's elements by real clicks at the centre of their boxes
// (see the constants above for what each counts and the thresholds), and
// lists every miss. ELEMENTS_CORPUS_PAGES (a comma-separated list of page
// name prefixes) runs a part of the corpus, for a quick look.
func TestElementsCorpus(t *testing.T) {
	e := startCorpusEnv(t)
	ctx := browsertest.Ctx(t, 15*time.Minute)
	names, frames := corpusPages(t)
	if only := os.Getenv("ELEMENTS_CORPUS_PAGES"); only != "" {
		names = slices.DeleteFunc(names, func(n string) bool {
			for _, p := range strings.Split(only, ",") {
				if p != "" && strings.HasPrefix(n, p) {
					return false
				}
			}
			return true
		})
	} else if len(names) < 35 {
		t.Fatalf("corpus has %d pages; want at least 35", len(names))
	}
	expected, found, listed, received := 0, 0, 0, 0
	for _, name := range names {
		r := e.runPage(t, ctx, name, frames[name], 0)
		if len(r.truth) == 0 {
			t.Errorf("%s: the page reports no visible element; the corpus page is broken", name)
			continue
		}
		f := len(r.truth) - len(r.misses)
		expected += len(r.truth)
		found += f
		listed += r.reported
		received += r.received
		recall := 100 * float64(f) / float64(len(r.truth))
		precision := 100.0 // nothing listed, nothing over-reported
		if r.reported > 0 {
			precision = 100 * float64(r.received) / float64(r.reported)
		}
		t.Logf("%-24s found/expected %3d/%3d (%5.1f%%)  hit/listed %3d/%3d (%5.1f%%)", name, f, len(r.truth), recall, r.received, r.reported, precision)
		if recall < corpusMinRecallPage {
			t.Errorf("%s: recall %.1f%% < %.1f%%: misses %v", name, recall, corpusMinRecallPage, r.misses)
		}
		minP := corpusMinPrecisionPage
		if v, ok := corpusPrecisionBelow100[name]; ok {
			minP = v
		}
		if precision < minP {
			t.Errorf("%s: precision %.1f%% < %.1f%%: %q", name, precision, minP, r.wrong)
		}
	}
	recall := 100 * float64(found) / float64(max(1, expected))
	precision := 100 * float64(received) / float64(max(1, listed))
	t.Logf("corpus: %d pages, found/expected %d/%d (%.1f%%), hit/listed %d/%d (%.1f%%)", len(names), found, expected, recall, received, listed, precision)
	if recall < corpusMinRecallAll {
		t.Errorf("corpus recall %.1f%% < %.1f%%", recall, corpusMinRecallAll)
	}
	if precision < corpusMinPrecisionAll {
		t.Errorf("corpus precision %.1f%% < %.1f%%", precision, corpusMinPrecisionAll)
	}
}

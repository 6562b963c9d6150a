package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDashboardThumbnailBox: Box publishes one desktop stream per box,
// which takes input, so a view-only link has nothing of the vendor's to
// use. With the held stream (the default) the worker serves the
// dashboard's view-only thumbnail of a bot's screen from its own session
// to the box: in Chromium, the thumbnail's noVNC canvas is the screen
// the bot observed (8x5 cells' mean grey within 6 levels; a blank,
// transparent or stale canvas is tens off), and a screenshot of it is not
// blank.
func TestDashboardThumbnailBox(t *testing.T) {
	emu := boxEmulator(t)
	dir := openDir(t, "wire-boxdash-")
	e := templateWorker(t, boxEnv(emu, nil), filepath.Join(dir, "machines"))
	status, cc, c := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "dash"}})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	runningOrRecovered(t, c, cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, c.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	// The bot's screen starts with its first look; its image is what the
	// thumbnail must show.
	st, res := c.tool(t, "alice", "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, st, "%+v", res)
	var img image.Image
	for _, part := range res.Content {
		if part.Type == "image" {
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(part.ImageURL, "data:image/jpeg;base64,"))
			require.NoError(t, err)
			img, err = jpeg.Decode(bytes.NewReader(raw))
			require.NoError(t, err)
		}
	}
	require.NotNil(t, img, "the observation has an image")
	want := cellGreys(img)

	link, err := e.w.People.LoginLink(e.url)
	require.NoError(t, err)
	ch := startCDP(t)
	s := ch.open(t, link)
	var v float64
	var verr error
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if verr = ch.eval(s, fmt.Sprintf(dashThumbVariance, c.computer+"/alice"), &v); verr == nil && v > 10 {
			break
		}
		if time.Now().After(deadline) {
			// What the page had: the thumbnail's element and its
			// connection's record (window.dashboard), so a failure
			// says where it stopped.
			var state json.RawMessage
			serr := ch.eval(s, fmt.Sprintf(dashThumbState, c.computer+"/alice"), &state)
			t.Fatalf("timed out waiting for alice's live thumbnail: variance %.1f (-1: no canvas), %v; the page: %s %v", v, verr, state, serr)
		}
	}
	// The canvas, cell by cell (8x5 cells' mean grey), is the observed
	// screen: a blank or wrong canvas differs by tens of grey levels.
	var got []float64
	var diff float64
	deadline := time.Now().Add(time.Minute)
	for {
		diff = math.Inf(1)
		if ch.eval(s, fmt.Sprintf(dashThumbCells, c.computer+"/alice"), &got) == nil && len(got) == len(want) {
			diff = 0
			for i := range want {
				diff += math.Abs(got[i]-want[i]) / float64(len(want))
			}
		}
		if diff < 6 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the thumbnail matches the observation: mean grey difference %.1f\ncanvas   %.0f\nobserved %.0f", diff, got, want)
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("thumbnail vs observation: mean grey difference per cell %.1f", diff)
	shot := filepath.Join(os.TempDir(), "dashboard-box.png")
	sv := ch.screenshot(t, s, `.thumb[data-key="`+c.computer+`/alice"]`, shot)
	t.Logf("screenshot %s: thumbnail variance %.0f", shot, sv)
	require.Greater(t, sv, 10.0, "the thumbnail in the screenshot shows the box's screen, not a blank box")
}

// dashThumbCells is the thumbnail canvas's mean grey in 8x5 cells, row by
// row (cellGreys' layout).
const dashThumbCells = `(() => {
  const c = document.querySelector('.thumb[data-key="%s"] canvas');
  if (!c || !c.width || !c.height) return null;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const out = [];
  for (let cy = 0; cy < 5; cy++) for (let cx = 0; cx < 8; cx++) {
    let s = 0, n = 0;
    for (let y = Math.floor(cy * c.height / 5); y < Math.floor((cy + 1) * c.height / 5); y += 2)
      for (let x = Math.floor(cx * c.width / 8); x < Math.floor((cx + 1) * c.width / 8); x += 2) {
        const i = 4 * (y * c.width + x); s += (d[i] + d[i+1] + d[i+2]) / 3; n++;
      }
    out.push(s / n);
  }
  return out;
})()`

// cellGreys is img's mean grey in 8x5 cells, row by row.
func cellGreys(img image.Image) []float64 {
	b := img.Bounds()
	var out []float64
	for cy := 0; cy < 5; cy++ {
		for cx := 0; cx < 8; cx++ {
			var s, n float64
			for y := b.Min.Y + cy*b.Dy()/5; y < b.Min.Y+(cy+1)*b.Dy()/5; y += 2 {
				for x := b.Min.X + cx*b.Dx()/8; x < b.Min.X+(cx+1)*b.Dx()/8; x += 2 {
					r, g, bl, _ := img.At(x, y).RGBA()
					s += float64(r+g+bl) / 3 / 257
					n++
				}
			}
			out = append(out, s/n)
		}
	}
	return out
}

// dashThumbState is what the dashboard page shows of one thumbnail (%[1]s
// its key), as JSON: its element, its canvas and its connection's record.
const dashThumbState = `(() => {
  const el = document.querySelector('.thumb[data-key="%[1]s"]');
  const c = el && el.querySelector('canvas');
  return JSON.stringify({
    // The page itself (no query: a sign-in link's code is a secret).
    page: location.origin + location.pathname,
    title: document.title,
    text: document.body ? document.body.innerText.slice(0, 200) : null,
    dashboard: typeof window.dashboard,
    thumb: el ? el.outerHTML.slice(0, 300) : null,
    canvas: c ? [c.width, c.height] : null,
    record: (window.dashboard || {}).thumbs ? window.dashboard.thumbs['%[1]s'] : null,
    polls: (window.dashboard || {}).polls,
    messages: (window.dashboard || {}).messages,
  });
})()`

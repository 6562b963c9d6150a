package screen

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared/lease"
)

func deskPct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// BenchmarkDesktopElements is issue 23's desktop figures: the desktop
// corpus per program (found and hit, the misses by name; goal >= 90 %),
// then, on the desktop the corpus leaves (the panel, the editor, the
// terminal and the file manager open), observe with elements vs without
// through the route (p50/p90 of 20 each) and the elements' JSON beside
// the screenshot's JPEG. Printed as the desktop-elements table.
func BenchmarkDesktopElements(b *testing.B) {
	e := newDeskIT(b, deskDisplayBase+8, deskViewPortBase+40)
	ctx := testenv.Context(b, 15*time.Minute)
	mux := http.NewServeMux()
	e.m.Routes(mux)
	const id = "dbench"
	_, err := e.m.Register(id)
	require.NoError(b, err)
	l, err := e.m.Leases().Acquire(id, lease.Agent, "run", 60*time.Minute)
	require.NoError(b, err)
	_, err = e.m.Ensure(ctx, id)
	require.NoError(b, err)
	for b.Loop() {
		results := runDeskCorpus(b, ctx, e, mux, id, l)
		fmt.Printf("desktop-elements-table: %-24s %9s %9s %6s  %s\n", "program", "found", "hit", "hit%", "misses")
		te, tf, tc, th := 0, 0, 0, 0
		for _, r := range results {
			te += r.expected
			tf += r.found
			tc += r.clicked
			th += r.hit
			fmt.Printf("desktop-elements-table: %-24s %4d/%-4d %4d/%-4d %5.1f%%  %s\n", r.name, r.found, r.expected, r.hit, r.clicked,
				100*float64(r.hit)/float64(max(1, r.clicked)), strings.Join(r.misses, "; "))
		}
		fmt.Printf("desktop-elements-table: %-24s %4d/%-4d %4d/%-4d %5.1f%%  (found %.1f%%)\n", "ALL", tf, te, th, tc,
			100*float64(th)/float64(max(1, tc)), 100*float64(tf)/float64(max(1, te)))
		b.ReportMetric(100*float64(tf)/float64(max(1, te)), "found-%")
		b.ReportMetric(100*float64(th)/float64(max(1, tc)), "hit-%")

		var with, without []float64
		elemBytes, jpegBytes, n := 0, 0, 0
		for i := range 40 {
			elems := i%2 == 0
			start := time.Now()
			r := callTB(b, mux, "POST", "/screens/"+id+"/observe", map[string]any{"leaseId": l.ID, "elements": elems})
			ms := float64(time.Since(start).Microseconds()) / 1000
			require.Equal(b, http.StatusOK, r.status, r.body)
			if img, _ := r.body["image"].(string); img != "" && jpegBytes == 0 {
				raw, _ := base64.StdEncoding.DecodeString(img)
				jpegBytes = len(raw)
			}
			if jpegBytes == 0 {
				// An unchanged screen sends no image: the JPEG the screen
				// encodes now is the one it would send.
				e.m.mu.Lock()
				s := e.m.screens[id]
				e.m.mu.Unlock()
				st, err := s.runningStack()
				require.NoError(b, err)
				f, _, err := st.driver().CaptureIfChanged(ctx, 0)
				require.NoError(b, err)
				jpegBytes = len(f.JPEG)
			}
			if elems {
				require.Nil(b, r.body["elementsError"])
				with = append(with, ms)
				j, _ := json.Marshal(r.body["elements"])
				elemBytes = len(j)
				n = len(r.body["elements"].([]any))
			} else {
				without = append(without, ms)
			}
		}
		fmt.Printf("desktop-elements-table: observe on the desktop (%d elements): with p50 %.1f ms p90 %.1f ms, without p50 %.1f ms p90 %.1f ms; elements JSON %.1f KB, JPEG %.1f KB\n",
			n, deskPct(with, 50), deskPct(with, 90), deskPct(without, 50), deskPct(without, 90), float64(elemBytes)/1024, float64(jpegBytes)/1024)
		b.ReportMetric(deskPct(with, 50), "with-p50_ms")
		b.ReportMetric(deskPct(with, 90), "with-p90_ms")
		b.ReportMetric(deskPct(without, 50), "without-p50_ms")
		b.ReportMetric(deskPct(without, 90), "without-p90_ms")
		b.ReportMetric(float64(elemBytes)/1024, "elements-KB")
		b.ReportMetric(float64(jpegBytes)/1024, "jpeg-KB")
	}
}

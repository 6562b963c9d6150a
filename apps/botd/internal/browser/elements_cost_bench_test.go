package browser_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
)

// BenchmarkElementsCost times one element reading (Browser.Elements: the
// snapshot, the accessibility tree, the clickables) on a small form, a
// card page, the clickable pages and the 3,000-node list: p50 and p90 of
// 20 readings each, printed as elements-cost lines. Issue 35 compares it
// before and after the clickables.
func BenchmarkElementsCost(b *testing.B) {
	e := startCorpusEnv(b)
	ctx := browsertest.Ctx(b, 15*time.Minute)
	for b.Loop() {
		for _, name := range []string{"01-form-basic", "25-cards", "33-card-grid", "34-react-buttons", "18-long-list"} {
			e.site.log.reset()
			e.open(b, e.site.a+"/"+name+".html")
			if !e.site.log.waitFor(20*time.Second, func() bool { return len(e.site.log.truths) >= 1 }) {
				b.Fatalf("%s: no truth", name)
			}
			time.Sleep(300 * time.Millisecond)
			br, err := e.bs.Browser(ctx, corpusScreen)
			if err != nil {
				b.Fatal(err)
			}
			var ms []float64
			n := 0
			for range 20 {
				start := time.Now()
				els, err := br.Elements(ctx)
				if err != nil {
					b.Fatal(err)
				}
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
				n = len(els)
			}
			fmt.Printf("elements-cost: %-18s %4d elements  p50 %6.1f ms  p90 %6.1f ms\n", name, n, pct(ms, 50), pct(ms, 90))
		}
	}
}

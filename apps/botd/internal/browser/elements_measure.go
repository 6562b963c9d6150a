package browser

import (
	"context"
	"sync"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/domsnapshot"
)

// BoxSources measures, on the page in front, the two ways of getting the
// boxes of the accessibility tree's nodes: one DOMSnapshot.captureSnapshot
// (what Elements uses) against one DOM.getBoxModel per node with a DOM
// node, all sent at once. For the benchmark (issue 23 asks which is
// faster); nodes is how many getBoxModel calls that took.
func (b *Browser) BoxSources(ctx context.Context) (snapshot, boxModels time.Duration, nodes int, err error) {
	s, err := b.FrontSession(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	ax, err := cdpapi.Call(ctx, s, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
	if err != nil {
		return 0, 0, 0, b.wrap(err)
	}
	var ids []cdpapi.BackendNodeID
	for _, n := range ax.Nodes {
		if !n.Ignored && n.BackendDOMNodeID != 0 {
			ids = append(ids, n.BackendDOMNodeID)
		}
	}
	yes := true
	t0 := time.Now()
	if _, err := cdpapi.Call(ctx, s, domsnapshot.CaptureSnapshot, domsnapshot.CaptureSnapshotParams{ComputedStyles: snapStyles, IncludePaintOrder: &yes}); err != nil {
		return 0, 0, 0, b.wrap(err)
	}
	snapshot = time.Since(t0)
	t0 = time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = cdpapi.Call(ctx, s, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: id})
		}()
	}
	wg.Wait()
	return snapshot, time.Since(t0), len(ids), ctx.Err()
}

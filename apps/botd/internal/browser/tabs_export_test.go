package browser

import (
	"context"
	"strings"

	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
)

// CloseTabsForTest closes every tab whose URL ends with suffix, through
// the bot's own connection (a CDP client may close only the tabs it
// opened in its session): a test ends a page that would otherwise go on
// burning a core until the browser closes. It returns how many it closed.
func (b *Browser) CloseTabsForTest(ctx context.Context, suffix string) (int, error) {
	ts, err := b.pageTargets(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range ts {
		if !strings.HasSuffix(t.URL, suffix) {
			continue
		}
		if _, err := cdpapi.Call(ctx, b.conn.Browser(), target.CloseTarget, target.CloseTargetParams{TargetID: t.TargetID}); err != nil {
			return n, b.wrap(err)
		}
		n++
	}
	return n, nil
}

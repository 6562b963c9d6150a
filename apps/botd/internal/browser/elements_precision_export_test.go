package browser

import (
	"context"
	"encoding/json"
	"fmt"

	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/runtime"
)

// The corpus's precision check (elements_corpus_test.go) names the DOM
// node behind each listed element id to the page's corpus.js: through
// DevTools, by the element's backend node, in its own frame's main world.

// corpusMarkScript records this node in its window: as listed, or as the
// one about to be clicked (with the click's token).
const corpusMarkScript = `function (tok) {
  var w = this.ownerDocument.defaultView;
  if (!w || !w.__corpusListed) return false;
  if (!tok) w.__corpusListed.add(this); else w.__corpusExpect = { el: this, tok: tok };
  return this.hasAttribute && this.hasAttribute("data-nolist") ? "nolist" : "ok";
}`

// CorpusMark tells the page which DOM nodes the ids name: every id in
// listed goes into its window's listed set (tok ""), or, with a token, the
// one id becomes the element the next click is for. It returns the ids
// whose node the page marks data-nolist (a node no observation should list:
// a wrapper, an inner part of a control, a container).
func (b *Browser) CorpusMark(ctx context.Context, ids []string, tok string) (nolist []string, err error) {
	sc, err := b.scanFront(ctx)
	if err != nil {
		return nil, err
	}
	arg, _ := json.Marshal(tok)
	for _, id := range ids {
		c := sc.byID[id]
		if c == nil {
			return nil, fmt.Errorf("corpus mark: %s is not on the page now", id)
		}
		r, err := cdpapi.Call(ctx, c.d.session, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: c.d.snap.Nodes.BackendNodeID[c.node]})
		if err != nil || r.Object == nil {
			return nil, fmt.Errorf("corpus mark: resolve %s: %v", id, err)
		}
		yes := true
		res, err := cdpapi.Call(ctx, c.d.session, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
			FunctionDeclaration: corpusMarkScript, ObjectID: r.Object.ObjectID, ReturnByValue: &yes,
			Arguments: []*runtime.CallArgument{{Value: jsonv2.Value(arg)}},
		})
		if err != nil || res.ExceptionDetails != nil || res.Result == nil {
			return nil, fmt.Errorf("corpus mark %s: %v %+v", id, err, res)
		}
		switch string(res.Result.Value) {
		case `"ok"`:
		case `"nolist"`:
			nolist = append(nolist, id)
		default:
			return nil, fmt.Errorf("corpus mark %s: %s", id, res.Result.Value)
		}
		_, _ = cdpapi.Call(ctx, c.d.session, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: r.Object.ObjectID})
	}
	return nolist, nil
}

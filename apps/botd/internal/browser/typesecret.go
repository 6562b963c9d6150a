package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"

	"github.com/open-bot/computer/apps/botd/internal/cdp"
)

// Refusals of InsertSecret: the secret was not typed anywhere.
var (
	ErrSecretOrigin  = errors.New("the page in front is not on the secret's origin")
	ErrSecretFrame   = errors.New("the focused field is inside a frame of another origin")
	ErrSecretNoField = errors.New("no text field has the focus in the page in front")
	ErrSecretNoFocus = errors.New("the page in front does not have the keyboard focus")
	ErrSecretChanged = errors.New("the page changed while the secret was being typed")
)

// insertSecretScript runs in an isolated world of the front page's main
// frame, in one task of the page: no navigation, frame load or focus
// change can come between its checks and the insertion. It finds the
// focused element (through same-origin frames and open shadow roots),
// refuses unless every document on the way is on want, and inserts the
// secret at the caret as text input (beforeinput/input events, like an
// IME or a paste; no key events). It returns a verdict word, never the
// secret.
const insertSecretScript = `function (want, secret) {
  if (location.origin !== want) return "origin";
  if (!document.hasFocus()) return "nofocus";
  let doc = document;
  let el = doc.activeElement;
  for (;;) {
    while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
    if (!el) break;
    const tag = el.tagName;
    if (tag === "IFRAME" || tag === "FRAME") {
      let inner = null;
      try { inner = el.contentDocument; } catch (e) { inner = null; }
      if (!inner) return "frame";
      let o = "";
      try { o = inner.defaultView.location.origin; } catch (e) { return "frame"; }
      if (o !== want || !inner.hasFocus()) return "frame";
      doc = inner;
      el = doc.activeElement;
      continue;
    }
    if (tag === "OBJECT" || tag === "EMBED" || tag === "FENCEDFRAME" || tag === "PORTAL") return "frame";
    break;
  }
  if (!el || el === doc.body || el === doc.documentElement) return "nofield";
  let editable = false;
  if (el.tagName === "INPUT") {
    const t = (el.type || "text").toLowerCase();
    editable = ["text", "password", "email", "tel", "url", "search", "number"].includes(t) && !el.disabled && !el.readOnly;
  } else if (el.tagName === "TEXTAREA") {
    editable = !el.disabled && !el.readOnly;
  } else {
    editable = el.isContentEditable === true;
  }
  if (!editable) return "nofield";
  if (!doc.execCommand("insertText", false, secret)) return "nofield";
  return "typed";
}`

// InsertSecret types secret into the focused text field of the page in
// front, only when that page, and every frame between it and the focused
// field, is on origin want. The check and the insertion are one task in
// the page (see insertSecretScript); a navigation that commits before it
// runs leaves its world gone and nothing is typed. The secret travels only
// over the DevTools pipe: no argv, no log, no error text.
func (b *Browser) InsertSecret(ctx context.Context, want, secret string) error {
	if err := b.alive(); err != nil {
		return err
	}
	t, err := b.front(ctx)
	if err != nil {
		return err
	}
	if Origin(t.URL) != want {
		return ErrSecretOrigin
	}
	s, err := b.session(ctx, t.TargetID)
	if err != nil {
		return err
	}
	fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
	tree, err := cdpapi.Call(fctx, s, page.GetFrameTree, cdpapi.Empty{})
	fcancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return ErrPageLoading
		}
		return b.wrap(err)
	}
	if tree.FrameTree == nil || tree.FrameTree.Frame == nil {
		return ErrSecretChanged
	}
	w, err := cdpapi.Call(ctx, s, page.CreateIsolatedWorld, page.CreateIsolatedWorldParams{FrameID: tree.FrameTree.Frame.ID, WorldName: "botd-secret"})
	if err != nil {
		return b.wrap(err)
	}
	wantArg, _ := json.Marshal(want)
	secretArg, _ := json.Marshal(secret)
	yes := true
	res, err := cdpapi.Call(ctx, s, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: insertSecretScript,
		ExecutionContextID:  w.ExecutionContextID,
		Arguments:           []*runtime.CallArgument{{Value: jsonv2.Value(wantArg)}, {Value: jsonv2.Value(secretArg)}},
		ReturnByValue:       &yes,
		Silent:              &yes,
	})
	if err != nil {
		if errors.Is(err, cdp.ErrClosed) || b.alive() != nil {
			return ErrNotRunning
		}
		// The world went with its document: a navigation committed.
		return ErrSecretChanged
	}
	if res.ExceptionDetails != nil || res.Result == nil {
		return ErrSecretChanged
	}
	var verdict string
	if err := json.Unmarshal(res.Result.Value, &verdict); err != nil {
		return ErrSecretChanged
	}
	switch verdict {
	case "typed":
		return nil
	case "origin":
		return ErrSecretOrigin
	case "frame":
		return ErrSecretFrame
	case "nofield":
		return ErrSecretNoField
	case "nofocus":
		return ErrSecretNoFocus
	}
	return fmt.Errorf("type secret: unexpected verdict")
}

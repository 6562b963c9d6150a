package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/dom"
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

// FieldRefusedError: the focused field would show the secret (it is not a
// masked password field) and the secret is not stored as visible, or the
// field is an editable area (its text is part of the page's). Nothing was
// typed. Kind names the field ("text field", "one-time-code field", …).
type FieldRefusedError struct{ Kind string }

func (e *FieldRefusedError) Error() string {
	if e.Kind == "editable area" {
		return "the focused field is an editable area, whose text is part of the page's; a secret types only into an input field or a text area"
	}
	return "this secret types only into password fields; store it with visible: true to type it into a " + e.Kind
}

// insertSecretScript runs in an isolated world of the front page's main
// frame, in one task of the page: no navigation, frame load or focus
// change can come between its checks and the insertion. It finds the
// focused element (through same-origin frames and open shadow roots),
// refuses unless every document on the way is on want, refuses a field
// that would show the secret unless visible (only a password input whose
// computed -webkit-text-security masks its text hides it; a one-time-code
// field, a text area or any other input shows it), refuses editable areas
// (their text is the page's text), and inserts the secret at the caret as
// text input (beforeinput/input events, like an IME or a paste; no key
// events). It returns the field that received the secret, or a verdict
// word; never the secret.
const insertSecretScript = `function (want, secret, visible) {
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
  let kind = "";
  if (el.tagName === "INPUT") {
    const t = String(el.type || "text").toLowerCase();
    if (!["text", "password", "email", "tel", "url", "search", "number"].includes(t) || el.disabled || el.readOnly) return "nofield";
    if (t === "password") {
      const sec = String(doc.defaultView.getComputedStyle(el).getPropertyValue("-webkit-text-security") || "").trim();
      kind = (sec === "" || sec === "none") ? "password field styled to show its text" : "masked";
    } else if (String(el.autocomplete || "").toLowerCase().includes("one-time-code")) {
      kind = "one-time-code field";
    } else {
      kind = t + " field";
    }
  } else if (el.tagName === "TEXTAREA") {
    if (el.disabled || el.readOnly) return "nofield";
    kind = "text area";
  } else if (el.isContentEditable === true) {
    return "shown:editable area";
  } else {
    return "nofield";
  }
  if (kind !== "masked" && !visible) return "shown:" + kind;
  if (!doc.execCommand("insertText", false, secret)) return "nofield";
  return el;
}`

// InsertSecret types secret into the focused text field of the page in
// front, only when that page, and every frame between it and the focused
// field, is on origin want. The check and the insertion are one task in
// the page (see insertSecretScript); a navigation that commits before it
// runs leaves its world gone and nothing is typed. The secret travels only
// over the DevTools pipe: no argv, no log, no error text.
//
// visible says the secret may be typed into a field that shows it; without
// it only a masked password field takes it (*FieldRefusedError). The field
// that received it is remembered (rememberSecretField): its value is left
// out of every elements answer and, while it shows its text, its box is
// painted over in screenshots.
func (b *Browser) InsertSecret(ctx context.Context, want, secret string, visible bool) error {
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
	if b.touchedTab(ctx, t.TargetID) {
		return ErrSecretTouched
	}
	// Sealed before anything is typed: no CDP client sees this tab from
	// now on (cdpguard.go); undone below when nothing was typed.
	unseal := b.cdpg.seal(t.TargetID, secret)
	// keep: the script may have typed (it ran, or its answer was lost);
	// only a verdict proves nothing was.
	keep := false
	defer func() {
		if !keep {
			unseal()
		}
	}()
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
	visibleArg, _ := json.Marshal(visible)
	yes := true
	keep = true
	// Not by value: a typed field comes back as an object, to be named.
	res, err := cdpapi.Call(ctx, s, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: insertSecretScript,
		ExecutionContextID:  w.ExecutionContextID,
		Arguments:           []*runtime.CallArgument{{Value: jsonv2.Value(wantArg)}, {Value: jsonv2.Value(secretArg)}, {Value: jsonv2.Value(visibleArg)}},
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
	if res.Result.ObjectID != "" {
		// Typed: remember the field (its backend node) before anything
		// can observe it. Should naming it fail, the whole page counts as
		// holding a secret (every textbox's value left out, the viewport
		// painted over) until it navigates.
		var node cdpapi.BackendNodeID
		if d, err := cdpapi.Call(ctx, s, dom.DescribeNode, dom.DescribeNodeParams{ObjectID: res.Result.ObjectID}); err == nil && d.Node != nil {
			node = d.Node.BackendNodeID
		}
		b.rememberSecretField(s, node)
		_, _ = cdpapi.Call(ctx, s, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: res.Result.ObjectID})
		return nil
	}
	var verdict string
	if err := json.Unmarshal(res.Result.Value, &verdict); err != nil {
		return ErrSecretChanged
	}
	keep = false // a verdict: nothing was typed
	switch verdict {
	case "origin":
		return ErrSecretOrigin
	case "frame":
		return ErrSecretFrame
	case "nofield":
		return ErrSecretNoField
	case "nofocus":
		return ErrSecretNoFocus
	}
	if kind, ok := strings.CutPrefix(verdict, "shown:"); ok {
		return &FieldRefusedError{Kind: kind}
	}
	return fmt.Errorf("type secret: unexpected verdict")
}

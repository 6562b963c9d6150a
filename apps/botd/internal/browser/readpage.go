package browser

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
)

// Caps of a page read.
const (
	MaxPageText  = 120_000
	MaxPageLinks = 300
)

// ReadPageTimeout bounds one read of the front page.
const ReadPageTimeout = 15 * time.Second

// Link is one link on a page.
type Link struct {
	Text string `json:"text"`
	URL  string `json:"url"`
}

// Page is the page in front as text, for browser_read_page.
type Page struct {
	URL   string `json:"url"`
	Title string `json:"title"`
	// Text is the page's visible text, at most MaxPageText characters.
	Text  string `json:"text"`
	Links []Link `json:"links"`
	// TextTruncated and LinksTruncated say a cap was hit.
	TextTruncated  bool `json:"textTruncated"`
	LinksTruncated bool `json:"linksTruncated"`
}

// readScript runs in an isolated world, so the page's own scripts cannot
// change the builtins it uses. toWellFormed turns lone UTF-16 surrogates
// into U+FFFD; the transport's JSON options are the second line of defence.
var readScript = `(() => {
  const MAXT = ` + strconv.Itoa(MaxPageText) + `, MAXL = ` + strconv.Itoa(MaxPageLinks) + `;
  const wf = (s) => (typeof s === "string" ? (s.toWellFormed ? s.toWellFormed() : s) : "");
  const root = document.body || document.documentElement;
  // Walk the text nodes (no layout) and stop early on a huge page. Up to
  // ~1 MB of text, innerText (the visible text, but it lays the page out)
  // is used instead.
  const skip = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD"]);
  const parts = [];
  let raw = 0, n = 0;
  if (root) {
    const w = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: (x) => (x.parentElement && skip.has(x.parentElement.tagName) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
    });
    for (let node = w.nextNode(); node && n <= MAXT; node = w.nextNode()) {
      const v = node.nodeValue;
      raw += v.length;
      const c = v.slice(0, MAXT + 1 - n).replace(/[ \t\r\n]+/g, " ");
      if (c.trim() === "") continue;
      parts.push(c);
      n += c.length;
    }
  }
  let text = "";
  if (root && n <= MAXT && raw <= 1000000) {
    text = root.innerText || "";
  } else {
    text = parts.join("");
  }
  const textTruncated = text.length > MAXT;
  text = wf(text.slice(0, MAXT));
  const links = [];
  const seen = new Set();
  let linksTruncated = false;
  for (const a of document.querySelectorAll("a[href], area[href]")) {
    const href = typeof a.href === "string" ? a.href : "";
    if (!/^https?:/i.test(href) || seen.has(href)) continue;
    if (links.length >= MAXL) { linksTruncated = true; break; }
    seen.add(href);
    const label = (a.innerText || a.getAttribute("aria-label") || a.title || a.alt || "").replace(/\s+/g, " ").trim().slice(0, 200);
    links.push({ text: wf(label), url: wf(href) });
  }
  return { url: wf(location.href), title: wf(document.title || ""), text, links, textTruncated, linksTruncated };
})()`

// ReadPage reads the page in front: its URL, title, visible text (capped at
// MaxPageText characters) and links (at most MaxPageLinks).
func (b *Browser) ReadPage(ctx context.Context) (Page, error) {
	if err := b.alive(); err != nil {
		return Page{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, ReadPageTimeout)
	defer cancel()
	t, err := b.front(ctx)
	if err != nil {
		return Page{}, err
	}
	b.mu.Lock()
	crashed := b.crashed[t.TargetID]
	b.mu.Unlock()
	if crashed {
		return Page{URL: t.URL, Title: t.Title}, ErrPageCrashed
	}
	s, err := b.session(ctx, t.TargetID)
	if err != nil {
		return Page{}, err
	}
	// While a navigation is pending, Chromium holds the page's commands
	// until it commits: a slow site answers "still loading" quickly instead
	// of timing out.
	var ctxID runtime.ExecutionContextID
	fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
	tree, err := cdpapi.Call(fctx, s, page.GetFrameTree, cdpapi.Empty{})
	fcancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return Page{URL: t.URL, Title: t.Title}, ErrPageLoading
	case err != nil:
		if b.wrap(err) == ErrNotRunning {
			return Page{}, ErrNotRunning
		}
	case tree.FrameTree != nil && tree.FrameTree.Frame != nil:
		if w, err := cdpapi.Call(ctx, s, page.CreateIsolatedWorld, page.CreateIsolatedWorldParams{FrameID: tree.FrameTree.Frame.ID, WorldName: "botd-read"}); err == nil {
			ctxID = w.ExecutionContextID
		}
	}
	var p Page
	if err := b.eval(ctx, s, ctxID, readScript, &p); err != nil {
		b.mu.Lock()
		crashed = b.crashed[t.TargetID]
		b.mu.Unlock()
		switch {
		case crashed:
			return Page{URL: t.URL, Title: t.Title}, ErrPageCrashed
		case errors.Is(err, context.DeadlineExceeded):
			return Page{URL: t.URL, Title: t.Title}, ErrPageUnresponsive
		case errors.Is(err, ErrNotRunning):
			return Page{}, err
		}
		return Page{URL: t.URL, Title: t.Title}, fmt.Errorf("read page: %w", err)
	}
	p.Text = capRunes(p.Text, MaxPageText)
	if p.Links == nil {
		p.Links = []Link{}
	}
	if len(p.Links) > MaxPageLinks {
		p.Links, p.LinksTruncated = p.Links[:MaxPageLinks], true
	}
	return p, nil
}

// capRunes keeps at most n characters of s.
func capRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	_ = utf8.RuneError
	return s
}

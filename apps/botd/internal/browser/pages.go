package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto/browser"
	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"

	"github.com/open-bot/computer/apps/botd/internal/cdp"
)

// alive fails fast once the browser is gone.
func (b *Browser) alive() error {
	select {
	case <-b.ctx.Done():
		return ErrNotRunning
	default:
		return nil
	}
}

// wrap turns transport errors into the package's errors.
func (b *Browser) wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, cdp.ErrClosed) || b.alive() != nil {
		return ErrNotRunning
	}
	return err
}

// pageTargets lists the browser's page targets (tabs), not its own UI.
func (b *Browser) pageTargets(ctx context.Context) ([]*target.Info, error) {
	res, err := cdpapi.Call(ctx, b.conn.Browser(), target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		return nil, b.wrap(err)
	}
	var out []*target.Info
	for _, t := range res.TargetInfos {
		if isPage(t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// isPage reports whether t is a tab: not a prerender, worker or DevTools.
func isPage(t *target.Info) bool {
	return t.Type == "page" && t.Subtype != "prerender" && !strings.HasPrefix(t.URL, "devtools://")
}

// session returns a flat session attached to the page, attaching once.
func (b *Browser) session(ctx context.Context, id target.ID) (*cdp.Session, error) {
	b.mu.Lock()
	s := b.sessions[id]
	b.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := b.conn.Attach(ctx, id)
	if err != nil {
		return nil, b.wrap(err)
	}
	b.mu.Lock()
	if old := b.sessions[id]; old != nil {
		b.mu.Unlock()
		// Lost a race: keep the first, let this one go.
		go func() {
			_, _ = cdpapi.Call(b.ctx, b.conn.Browser(), target.DetachFromTarget, target.DetachFromTargetParams{SessionID: s.ID()})
		}()
		return old, nil
	}
	b.sessions[id] = s
	b.mu.Unlock()
	return s, nil
}

// watchTargets keeps the session cache and crash marks in step with the
// browser's targets until it exits.
func (b *Browser) watchTargets() {
	ctx := b.ctx
	br := b.conn.Browser()
	created := cdpapi.Events(ctx, br, target.TargetCreated)
	destroyed := cdpapi.Events(ctx, br, target.TargetDestroyed)
	crashed := cdpapi.Events(ctx, br, target.TargetCrashed)
	changed := cdpapi.Events(ctx, br, target.TargetInfoChanged)
	detached := cdpapi.Events(ctx, br, target.DetachedFromTarget)
	if _, err := cdpapi.Call(ctx, br, target.SetDiscoverTargets, target.SetDiscoverTargetsParams{Discover: true}); err != nil {
		b.log.Debug().Err(err).Msg("setDiscoverTargets")
	}
	go func() {
		for _, err := range created {
			if err != nil {
				return
			}
			b.touchSession()
		}
	}()
	go func() {
		for ev, err := range destroyed {
			if err != nil {
				return
			}
			b.touchSession()
			b.mu.Lock()
			delete(b.sessions, ev.TargetID)
			delete(b.crashed, ev.TargetID)
			b.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range crashed {
			if err != nil {
				return
			}
			b.log.Warn().Str("target", string(ev.TargetID)).Str("status", ev.Status).Msg("page renderer crashed")
			b.mu.Lock()
			b.crashed[ev.TargetID] = true
			b.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range changed {
			if err != nil {
				return
			}
			// A navigation changes what the session must save; a reload
			// after a crash starts a new renderer.
			b.touchSession()
			b.mu.Lock()
			delete(b.crashed, ev.TargetInfo.TargetID)
			b.mu.Unlock()
		}
	}()
	for ev, err := range detached {
		if err != nil {
			return
		}
		b.mu.Lock()
		for id, s := range b.sessions {
			if s.ID() == ev.SessionID {
				delete(b.sessions, id)
			}
		}
		b.mu.Unlock()
	}
}

// maximize maximizes every window that holds one of pages, so a restored
// window never leaves a gap of desktop. The window manager applies a
// maximize asynchronously, so it is given a moment; without a window
// manager maximize does nothing, and the bounds are then set to the whole
// screen instead.
func (b *Browser) maximize(ctx context.Context, pages []*target.Info) {
	br := b.conn.Browser()
	seen := map[browser.WindowID]bool{}
	var ids []browser.WindowID
	for _, p := range pages {
		w, err := cdpapi.Call(ctx, br, browser.GetWindowForTarget, browser.GetWindowForTargetParams{TargetID: p.TargetID})
		if err != nil || seen[w.WindowID] {
			continue
		}
		seen[w.WindowID] = true
		ids = append(ids, w.WindowID)
		if w.Bounds != nil && w.Bounds.WindowState == browser.WindowStateMaximized {
			continue
		}
		if w.Bounds != nil && w.Bounds.WindowState != browser.WindowStateNormal {
			_, _ = cdpapi.Call(ctx, br, browser.SetWindowBounds, browser.SetWindowBoundsParams{WindowID: w.WindowID, Bounds: &browser.Bounds{WindowState: browser.WindowStateNormal}})
		}
		if _, err := cdpapi.Call(ctx, br, browser.SetWindowBounds, browser.SetWindowBoundsParams{WindowID: w.WindowID, Bounds: &browser.Bounds{WindowState: browser.WindowStateMaximized}}); err != nil {
			b.log.Debug().Err(err).Msg("maximize")
		}
	}
	deadline := time.Now().Add(maximizeWait)
	for _, id := range ids {
		for {
			got, err := cdpapi.Call(ctx, br, browser.GetWindowBounds, browser.GetWindowBoundsParams{WindowID: id})
			if err != nil || got.Bounds == nil {
				break
			}
			if got.Bounds.WindowState == browser.WindowStateMaximized {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				zero := int64(0)
				if _, err := cdpapi.Call(ctx, br, browser.SetWindowBounds, browser.SetWindowBoundsParams{WindowID: id, Bounds: &browser.Bounds{Left: &zero, Top: &zero, Width: int64(b.o.Width), Height: int64(b.o.Height)}}); err != nil {
					b.log.Debug().Err(err).Msg("set window bounds")
				}
				break
			}
			time.Sleep(40 * time.Millisecond)
		}
	}
}

// maximizeWait is how long a window manager gets to apply a maximize.
const maximizeWait = 700 * time.Millisecond

// Maximize maximizes every browser window now.
func (b *Browser) Maximize(ctx context.Context) error {
	pages, err := b.pageTargets(ctx)
	if err != nil {
		return err
	}
	b.maximize(ctx, pages)
	return nil
}

// pageState is what a page says about itself.
type pageState struct {
	info    *target.Info
	visible bool
	focused bool
}

const stateScript = `[document.visibilityState === "visible", document.hasFocus()]`

// states asks every page whether it is visible and focused. A page that does
// not answer quickly (busy, hung or crashed) counts as neither.
func (b *Browser) states(ctx context.Context) ([]pageState, error) {
	pages, err := b.pageTargets(ctx)
	if err != nil {
		return nil, err
	}
	return b.statesOf(ctx, pages), nil
}

// statesOf asks each of pages whether it is visible and focused.
func (b *Browser) statesOf(ctx context.Context, pages []*target.Info) []pageState {
	out := make([]pageState, len(pages))
	done := make(chan struct{}, len(pages))
	for i, p := range pages {
		out[i].info = p
		go func() {
			defer func() { done <- struct{}{} }()
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			s, err := b.session(cctx, p.TargetID)
			if err != nil {
				return
			}
			var v [2]bool
			if err := b.eval(cctx, s, 0, stateScript, &v); err == nil {
				out[i].visible, out[i].focused = v[0], v[1]
			}
		}()
	}
	for range pages {
		<-done
	}
	return out
}

// front picks the page in front: a visible, focused one; else a visible one
// (the one botd last brought forward first); else the last one botd
// opened; else the first tab.
func (b *Browser) front(ctx context.Context) (*target.Info, error) {
	pages, err := b.pageTargets(ctx)
	if err != nil {
		return nil, err
	}
	switch len(pages) {
	case 0:
		return nil, ErrNoPage
	case 1:
		// Every rule below picks the only tab: skip asking it (an attach
		// and an evaluate, slow while the tab is still loading).
		return pages[0], nil
	}
	st := b.statesOf(ctx, pages)
	b.mu.Lock()
	last := b.lastFront
	b.mu.Unlock()
	var firstVisible *target.Info
	for _, s := range st {
		if s.visible && s.focused {
			return s.info, nil
		}
	}
	for _, s := range st {
		if !s.visible {
			continue
		}
		if s.info.TargetID == last {
			return s.info, nil
		}
		if firstVisible == nil {
			firstVisible = s.info
		}
	}
	if firstVisible != nil {
		return firstVisible, nil
	}
	for _, s := range st {
		if s.info.TargetID == last {
			return s.info, nil
		}
	}
	return st[0].info, nil
}

// Pages lists the URLs of the visible pages (the tab in front of each
// window), so a vault login fills only on its own site.
func (b *Browser) Pages(ctx context.Context) ([]string, error) {
	if err := b.alive(); err != nil {
		return nil, err
	}
	st, err := b.states(ctx)
	if err != nil {
		return nil, err
	}
	urls := []string{}
	for _, s := range st {
		if s.visible {
			urls = append(urls, s.info.URL)
		}
	}
	return urls, nil
}

// FrontURL is the URL of the page in front.
func (b *Browser) FrontURL(ctx context.Context) (string, error) {
	if err := b.alive(); err != nil {
		return "", err
	}
	t, err := b.front(ctx)
	if err != nil {
		return "", err
	}
	return t.URL, nil
}

// FrontOrigin is the origin (scheme://host[:port]) of the page in front,
// for typing a secret only on its own site.
func (b *Browser) FrontOrigin(ctx context.Context) (string, error) {
	u, err := b.FrontURL(ctx)
	if err != nil {
		return "", err
	}
	return Origin(u), nil
}

// Origin is the web origin of raw ("" when it has none).
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		return scheme + "://" + host + ":" + port
	}
	return scheme + "://" + host
}

// NormalizeURL accepts http(s) URLs and bare host names (which get https://)
// and about:blank; everything else is ErrBadURL.
func NormalizeURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "about:blank" {
		return raw, nil
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", ErrBadURL
	}
	return u.String(), nil
}

// OpenResult says where a URL was opened.
type OpenResult struct {
	URL string `json:"url"`
	// Loading is true when the page had not committed within the open
	// timeout (a slow or never-finishing page); it keeps loading.
	Loading bool `json:"loading"`
	// Error is the browser's navigation error text, if it failed at once.
	Error string `json:"error,omitempty"`
}

// openCommitWait bounds the wait for a navigation to commit.
const openCommitWait = 3 * time.Second

// Open navigates the page in front to rawURL (in a new tab when newTab is
// set or there is no page) and brings it forward. It does not wait for the
// page to finish loading.
func (b *Browser) Open(ctx context.Context, rawURL string, newTab bool) (OpenResult, error) {
	u, err := NormalizeURL(rawURL)
	if err != nil {
		return OpenResult{}, err
	}
	if err := b.alive(); err != nil {
		return OpenResult{}, err
	}
	res := OpenResult{URL: u}
	var id target.ID
	if !newTab {
		if t, err := b.front(ctx); err == nil {
			id = t.TargetID
		} else if !errors.Is(err, ErrNoPage) {
			return res, err
		}
	}
	if id == "" {
		created, err := cdpapi.Call(ctx, b.conn.Browser(), target.CreateTarget, target.CreateTargetParams{URL: u})
		if err != nil {
			return res, fmt.Errorf("open: %w", b.wrap(err))
		}
		id = created.TargetID
	} else {
		s, err := b.session(ctx, id)
		if err != nil {
			return res, err
		}
		nctx, cancel := context.WithTimeout(ctx, openCommitWait)
		nav, err := cdpapi.Call(nctx, s, page.Navigate, page.NavigateParams{URL: u})
		cancel()
		switch {
		case err == nil:
			res.Error = nav.ErrorText
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			res.Loading = true
		default:
			return res, fmt.Errorf("open: %w", b.wrap(err))
		}
	}
	if _, err := cdpapi.Call(ctx, b.conn.Browser(), target.ActivateTarget, target.ActivateTargetParams{TargetID: id}); err != nil {
		b.log.Debug().Err(err).Msg("activate target")
	}
	b.mu.Lock()
	b.lastFront = id
	b.mu.Unlock()
	b.touchSession()
	return res, nil
}

// eval evaluates expr in the session (in contextID when not 0) and decodes
// the returned value into out.
func (b *Browser) eval(ctx context.Context, s *cdp.Session, contextID runtime.ExecutionContextID, expr string, out any) error {
	yes := true
	p := runtime.EvaluateParams{Expression: expr, ReturnByValue: &yes, Silent: &yes, ContextID: contextID}
	if dl, ok := ctx.Deadline(); ok {
		if ms := time.Until(dl).Milliseconds(); ms > 0 {
			p.Timeout = runtime.TimeDelta(ms)
		}
	}
	res, err := cdpapi.Call(ctx, s, runtime.Evaluate, p)
	if err != nil {
		return b.wrap(err)
	}
	if res.ExceptionDetails != nil {
		msg := res.ExceptionDetails.Text
		if res.ExceptionDetails.Exception != nil && res.ExceptionDetails.Exception.Description != "" {
			msg = res.ExceptionDetails.Exception.Description
		}
		return fmt.Errorf("page script failed: %s", firstLine(msg))
	}
	if res.Result == nil || len(res.Result.Value) == 0 {
		return errors.New("page script returned nothing")
	}
	return jsonv2.Unmarshal(res.Result.Value, out, cdp.DecodeOptions())
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// EvalFront runs a script in the page in front (in the page's own world)
// and discards its value. For tests and diagnostics.
func (b *Browser) EvalFront(ctx context.Context, expr string) error {
	t, err := b.front(ctx)
	if err != nil {
		return err
	}
	s, err := b.session(ctx, t.TargetID)
	if err != nil {
		return err
	}
	var v any
	return b.eval(ctx, s, 0, expr, &v)
}

// FrontSession is a DevTools session on the page in front, for callers that
// need a command this package does not wrap.
func (b *Browser) FrontSession(ctx context.Context) (*cdp.Session, error) {
	if err := b.alive(); err != nil {
		return nil, err
	}
	t, err := b.front(ctx)
	if err != nil {
		return nil, err
	}
	return b.session(ctx, t.TargetID)
}

// AllURLs lists the URLs of every tab, visible or not.
func (b *Browser) AllURLs(ctx context.Context) ([]string, error) {
	if err := b.alive(); err != nil {
		return nil, err
	}
	pages, err := b.pageTargets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(pages))
	for _, p := range pages {
		out = append(out, p.URL)
	}
	return out, nil
}

// Window is one browser window's placement.
type Window struct {
	Left   int64  `json:"left"`
	Top    int64  `json:"top"`
	Width  int64  `json:"width"`
	Height int64  `json:"height"`
	State  string `json:"state"`
}

// Windows lists the windows holding the browser's tabs.
func (b *Browser) Windows(ctx context.Context) ([]Window, error) {
	// Start maximizes in the background; report the windows once it did.
	select {
	case <-b.maximized:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	pages, err := b.pageTargets(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[browser.WindowID]bool{}
	var out []Window
	for _, p := range pages {
		w, err := cdpapi.Call(ctx, b.conn.Browser(), browser.GetWindowForTarget, browser.GetWindowForTargetParams{TargetID: p.TargetID})
		if err != nil || seen[w.WindowID] || w.Bounds == nil {
			continue
		}
		seen[w.WindowID] = true
		win := Window{Width: w.Bounds.Width, Height: w.Bounds.Height, State: string(w.Bounds.WindowState)}
		if w.Bounds.Left != nil {
			win.Left = *w.Bounds.Left
		}
		if w.Bounds.Top != nil {
			win.Top = *w.Bounds.Top
		}
		out = append(out, win)
	}
	return out, nil
}

// sessionSaveDelay is how long Chromium may take to write a change of its
// tabs to the session it restores (its session service saves on a timer,
// and a shutdown does not always flush the last change).
const sessionSaveDelay = 3 * time.Second

// touchSession notes that the tabs changed just now.
func (b *Browser) touchSession() {
	b.mu.Lock()
	b.lastTabChange = time.Now()
	b.mu.Unlock()
}

// waitSessionSaved waits until the last change of the tabs is older than
// sessionSaveDelay (or ctx ends), so a close right after a navigation keeps
// the new tab.
func (b *Browser) waitSessionSaved(ctx context.Context) {
	b.mu.Lock()
	last := b.lastTabChange
	b.mu.Unlock()
	if last.IsZero() {
		return
	}
	wait := sessionSaveDelay - time.Since(last)
	if wait <= 0 {
		return
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
	case <-b.ctx.Done():
	}
}

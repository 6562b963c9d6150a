package browser

import (
	"context"
	"strings"
	"time"

	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"

	"github.com/open-bot/computer/pkg/shared"
)

// Blocked is one request the apply guard stopped. It is reported in the
// teammate's next observe/act result and as an apply_guard event.
type Blocked struct {
	Screen string    `json:"screen"`
	Method string    `json:"method"`
	URL    string    `json:"url"`
	At     time.Time `json:"at"`
}

// maxBlocked caps the remembered blocks between two reports.
const maxBlocked = 50

// startGuard enables the Fetch domain on the browser target, which pauses
// matching requests of every page, popup and worker of this browser before
// they leave. Only URLs matching *apply* (three spellings, as patterns are
// case-sensitive) pause, so everything else runs at full speed.
func (b *Browser) startGuard(ctx context.Context) error {
	br := b.conn.Browser()
	// Subscribe before enabling, so no paused request is missed.
	paused := cdpapi.Events(b.ctx, br, fetch.RequestPaused)
	patterns := make([]*fetch.RequestPattern, 0, len(shared.ApplyGuardPatterns))
	for _, p := range shared.ApplyGuardPatterns {
		patterns = append(patterns, &fetch.RequestPattern{URLPattern: p, RequestStage: fetch.RequestStageRequest})
	}
	if _, err := cdpapi.Call(ctx, br, fetch.Enable, fetch.EnableParams{Patterns: patterns}); err != nil {
		return err
	}
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			// Answer off the reader loop and off this loop: a paused request
			// waits forever, and one slow answer must not hold the others.
			go b.decide(ev)
		}
	}()
	return nil
}

// decide fails a paused request that would submit a job application, unless
// a person holds the screen; everything else continues.
func (b *Browser) decide(ev fetch.EventRequestPaused) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	br := b.conn.Browser()
	method, u := "", ""
	if ev.Request != nil {
		method, u = ev.Request.Method, ev.Request.URL
	}
	if shared.BlockedApplication(method, u, b.o.ApplyGuardExtraDomains) && !b.userHolds() {
		if _, err := cdpapi.Call(ctx, br, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient}); err != nil {
			b.log.Warn().Err(err).Msg("apply guard: fail request")
		}
		bl := Blocked{Screen: b.o.ID, Method: method, URL: u, At: time.Now().UTC()}
		b.mu.Lock()
		if len(b.blocked) < maxBlocked {
			b.blocked = append(b.blocked, bl)
		}
		b.mu.Unlock()
		// The query may carry tokens: log only where the request went.
		b.log.Warn().Str("method", method).Str("url", withoutQuery(u)).Msg("apply guard blocked a job application")
		if b.o.OnBlocked != nil {
			b.o.OnBlocked(bl)
		}
		return
	}
	if _, err := cdpapi.Call(ctx, br, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID}); err != nil {
		b.log.Debug().Err(err).Msg("apply guard: continue request")
	}
}

func (b *Browser) userHolds() bool {
	if b.o.UserHolds == nil {
		return false
	}
	return b.o.UserHolds()
}

// TakeBlocked returns the requests blocked since the last call and forgets
// them (the screen package reports them in the next observe/act result).
func (b *Browser) TakeBlocked() []Blocked {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.blocked
	b.blocked = nil
	return out
}

// withoutQuery is raw without its query and fragment.
func withoutQuery(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		return raw[:i]
	}
	return raw
}

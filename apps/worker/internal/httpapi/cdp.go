package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/cdp"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/pkg/shared"
)

// cdpPath is the CDP route's path, decoded. A path with more segments
// (an escaped "/" in an id) does not match, so it gets the bearer check
// like any other route.
var cdpPath = regexp.MustCompile(`^/v1/computers/[^/]+/bots/[^/]+/cdp$`)

// ticketKey marks a request the auth middleware let through on a CDP
// ticket alone: only the CDP route's handler honours it, and redeems the
// ticket before anything else.
type ticketKey struct{}

// cdpTicketed reports whether r is the CDP route's websocket GET carrying
// a ticket: the only request the worker admits without its bearer token.
func cdpTicketed(r *http.Request) bool {
	return r.Method == http.MethodGet && cdpPath.MatchString(r.URL.Path) && r.URL.Query().Has("ticket")
}

func withTicket(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), ticketKey{}, true))
}

func hasTicket(r *http.Request) bool {
	v, _ := r.Context().Value(ticketKey{}).(bool)
	return v
}

// MountCDP adds the CDP routes (issue 34): GET
// /v1/computers/{id}/bots/{bot}/cdp[?screen=] is a websocket relayed to
// the bot's Chromium (DevTools JSON in text messages), with the worker
// token and the computer's capability, or with ?ticket= alone; POST
// …/cdp/tickets mints such a ticket. Call it from Options.Mount.
func MountCDP(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc, s *cdp.Service) {
	gated := gate(func(w http.ResponseWriter, r *http.Request) { serveCDP(w, r, s) })
	mux.HandleFunc("GET /v1/computers/{id}/bots/{bot}/cdp", func(w http.ResponseWriter, r *http.Request) {
		if hasTicket(r) {
			// The ticket stands for the token and the capability.
			serveCDP(w, r, s)
			return
		}
		gated(w, r)
	})
	mux.HandleFunc("POST /v1/computers/{id}/bots/{bot}/cdp/tickets", gate(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Screen string `json:"screen"`
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<10))
		if err != nil {
			writeErr(w, http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "body too large")
			return
		}
		if len(bytes.TrimSpace(body)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				writeErr(w, http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON: "+err.Error())
				return
			}
		}
		id, bot := r.PathValue("id"), r.PathValue("bot")
		screen := req.Screen
		if screen == "" {
			screen = bot
		}
		if err := s.Check(r.Context(), id, bot, screen); err != nil {
			fail(w, err)
			return
		}
		tok, exp, err := s.Tickets().Mint(id, bot, screen)
		if err != nil {
			fail(w, err)
			return
		}
		scheme := "ws://"
		if r.TLS != nil {
			scheme = "wss://"
		}
		q := url.Values{"screen": {screen}, "ticket": {tok}}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, map[string]any{
			"ticket":    tok,
			"url":       scheme + r.Host + "/v1/computers/" + url.PathEscape(id) + "/bots/" + url.PathEscape(bot) + "/cdp?" + q.Encode(),
			"expiresAt": exp.UTC().Truncate(time.Second),
		})
	}))
}

// serveCDP opens the session and hands the connection to it; every
// refusal is a JSON error before the upgrade.
func serveCDP(w http.ResponseWriter, r *http.Request, s *cdp.Service) {
	id, bot := r.PathValue("id"), r.PathValue("bot")
	screen := r.URL.Query().Get("screen")
	if screen == "" {
		screen = bot
	}
	if hasTicket(r) {
		// First, whatever follows: a ticket is spent on its first use.
		if !computers.ValidID(id) {
			fail(w, cdp.ErrBadTicket)
			return
		}
		if err := s.Tickets().Redeem(r.URL.Query().Get("ticket"), id, bot, screen); err != nil {
			fail(w, err)
			return
		}
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeErr(w, http.StatusBadRequest, shared.CodeBadRequest, "this route is a websocket: connect a CDP client (Playwright's connectOverCDP, Puppeteer's connect) to it")
		return
	}
	// The session outlives the request's context (the relay runs on the
	// hijacked connection); opening it is bounded here.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	sess, err := s.Open(ctx, id, bot, screen)
	cancel()
	if err != nil {
		fail(w, err)
		return
	}
	sess.Serve(w, r)
}

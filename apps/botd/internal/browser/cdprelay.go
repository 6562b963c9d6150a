package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/target"
	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/cdp"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// The CDP relay (issue 34): GET /screens/{id}/cdp gives one outside
// DevTools client (Playwright's connectOverCDP, Puppeteer's connect, through
// the worker) the screen's Chromium over botd's own pipe — no DevTools port
// ever opens. The client gets a browser session of its own (cdp.Tap), holds
// the screen's agent lease while connected (botd renews it, and checks it
// before every command, so a person's takeover stops the client's input at
// once and closes it with CloseTakenOver), and is held to what the
// screen promises:
//
//   - refused (a CDP error, nothing sent): closing or crashing the browser
//     or a page the client did not open, other browser contexts, other
//     ways into the browser (attachToBrowserTarget, exposeDevToolsProtocol,
//     Tethering), changing a request's URL, method or body after
//     interception (it would pass the apply guard unseen), the old
//     Network interception, and clearing every cookie or an origin's data
//     (the sign-ins are shared by all the bot's screens);
//   - rewritten: Browser/Page.setDownloadBehavior keeps the client's
//     events but not its download path (a path of the client's choosing
//     inside the machine): downloads go where the bot's go;
//   - the apply guard is the browser's own (Fetch on the browser target),
//     so navigations and form posts a client makes are blocked and
//     reported as the bot's are;
//   - tabs that received a vault secret are hidden and detached, and no
//     message carrying a typed secret reaches the client (cdpguard.go).
//
// Bounds: a client message is at most CDPMaxMessage; at most 256 commands
// in flight; at most CDPEventRate events a second; what waits for a slow
// client is bounded by the tap (64 MiB, 8192 messages), past which it is
// closed. The reader loop never waits on a client, so the bot's own tools
// are never slowed by one.

// Relay bounds.
const (
	// CDPMaxMessage bounds one message from the client.
	CDPMaxMessage = 4 << 20
	// CDPEventRate bounds the events a second sent to the client.
	CDPEventRate = 5000
	// cdpWriteTimeout bounds one write to the client (cdpWriteTimeoutSet
	// overrides it in tests).
	cdpWriteTimeout = 10 * time.Second
	// cdpLeaseTick is how often the lease is renewed and checked while no
	// command comes.
	cdpLeaseTick = time.Second
)

// cdpWriteTimeoutSet, when positive, replaces cdpWriteTimeout
// (nanoseconds): a test lengthens it so that the tap's queue bound is what
// closes a stalled client.
var cdpWriteTimeoutSet atomic.Int64

// cdpTapBytesSet, when positive, replaces the tap's queue bound in bytes
// (64 MiB) for sessions opened while it is set: a test lowers it so that a
// stalled client fills it in seconds on a loaded host, not minutes.
var cdpTapBytesSet atomic.Int64

// Close codes the relay ends a session with (besides the standard ones:
// 1008 a bound, 1012 the browser went away, 1001 botd stops).
const (
	// CloseTakenOver: a person took the screen.
	CloseTakenOver websocket.StatusCode = 4001
	// CloseLeaseLost: the session's lease expired or was replaced.
	CloseLeaseLost websocket.StatusCode = 4002
)

// refusedPrefix starts every refusal's CDP error message.
const refusedPrefix = "refused by open-bot: "

// cdpCodeRefused is the CDP error code of a refusal (Chromium's generic
// server error, which clients surface as a failed command).
const cdpCodeRefused = -32000

func (bs *Screens) handleCDP(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := screen.ValidID(id); err != nil {
		bs.fail(w, r, err)
		return
	}
	sm, err := bs.attached()
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	if sm.Get(id) == nil {
		bs.fail(w, r, shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no screen %s", id))
		return
	}
	leaseID := r.Header.Get(client.HeaderLeaseID)
	l, err := sm.Leases().Check(id, leaseID)
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	if l.Kind != lease.Agent {
		bs.fail(w, r, shared.Errorf(http.StatusConflict, shared.CodeConflict, "a CDP session needs the screen's agent lease"))
		return
	}
	if _, ok := sm.Target(id); !ok {
		bs.fail(w, r, shared.Errorf(http.StatusConflict, shared.CodeScreenUnavailable, "screen %s is not running", id))
		return
	}
	bs.mu.Lock()
	if bs.cdpOpen[id] {
		bs.mu.Unlock()
		bs.fail(w, r, shared.Errorf(http.StatusConflict, shared.CodeConflict, "screen %s already has a CDP session; one at a time", id))
		return
	}
	bs.cdpOpen[id] = true
	bs.mu.Unlock()
	defer func() {
		bs.mu.Lock()
		delete(bs.cdpOpen, id)
		bs.mu.Unlock()
	}()

	b, err := bs.Browser(r.Context(), id)
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	tctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	tap, err := b.conn.OpenTap(tctx, cdp.TapLimits{QueueBytes: int(cdpTapBytesSet.Load())})
	cancel()
	if err != nil {
		bs.fail(w, r, err)
		return
	}
	// The worker is the only peer (botd's bearer token); no browser ever
	// talks to this route with cookies, so the origin check does not apply.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tap.Close(ctx)
		cancel()
		return
	}
	ws.SetReadLimit(CDPMaxMessage)
	rl := &cdpRelay{
		bs: bs, b: b, sm: sm, screen: id, leaseID: leaseID, tap: tap, ws: ws,
		log:        bs.log.With().Str("screen", id).Str("relay", "cdp").Logger(),
		sessTarget: map[target.SessionID]target.ID{}, hidden: map[target.SessionID]bool{},
		created: map[target.ID]bool{}, attachCmd: map[int64]target.ID{},
	}
	rl.run()
}

// cdpRelay is one client's session.
type cdpRelay struct {
	bs      *Screens
	b       *Browser
	sm      *screen.Manager
	screen  string
	leaseID string
	tap     *cdp.Tap
	ws      *websocket.Conn
	log     zerolog.Logger

	closeOnce sync.Once
	ctx       context.Context
	cancel    context.CancelFunc

	// mu guards the session bookkeeping below (both directions use it).
	mu sync.Mutex
	// sessTarget names the tab of every session the client was shown.
	sessTarget map[target.SessionID]target.ID
	// hidden are sessions on sealed tabs: nothing of theirs reaches the
	// client (a detach was asked for) but, for one the client had been
	// shown (true), its detachedFromTarget.
	hidden map[target.SessionID]bool
	// created are the tabs the client opened (it may close those).
	created map[target.ID]bool
	// attachCmd is the tab of each Target.attachToTarget in flight.
	attachCmd map[int64]target.ID
}

// run relays until either side ends; it returns once everything is closed.
func (rl *cdpRelay) run() {
	rl.ctx, rl.cancel = context.WithCancel(context.Background())
	defer rl.cancel()
	rl.log.Info().Msg("CDP session opened")
	rl.publish("open", 0, "")
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); rl.inbound() }()
	go func() { defer wg.Done(); rl.outbound() }()
	go func() { defer wg.Done(); rl.watch() }()
	wg.Wait()
}

// end closes the session once: the client's websocket with code and
// reason, then the tap (its sessions detached).
func (rl *cdpRelay) end(code websocket.StatusCode, reason string) {
	rl.closeOnce.Do(func() {
		rl.log.Info().Int("code", int(code)).Str("reason", reason).Msg("CDP session closed")
		rl.publish("closed", code, reason)
		closeThenCancel(rl.ws, rl.cancel, code, reason)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rl.tap.Close(ctx)
		cancel()
	})
}

// closeThenCancel closes ws with code and reason, then cancels the
// context its pumps read and write with. The close frame goes first:
// coder/websocket drops a connection whose read context ends, so the
// other order races the frame, and the client (through the worker) would
// see the session end with no status (1001 there) instead of this one.
func closeThenCancel(ws *websocket.Conn, cancel context.CancelFunc, code websocket.StatusCode, reason string) {
	_ = ws.Close(code, reason)
	cancel()
}

func (rl *cdpRelay) publish(state string, code websocket.StatusCode, reason string) {
	if rl.bs.o.Events == nil {
		return
	}
	ev := map[string]any{"screen": rl.screen, "state": state}
	if code != 0 {
		ev["code"], ev["reason"] = int(code), reason
	}
	rl.bs.o.Events.Publish("cdp_session", ev)
}

// checkLease renews the session's lease; a person holding the screen, or
// the lease gone, ends the session.
func (rl *cdpRelay) checkLease() bool {
	_, err := rl.sm.Leases().Check(rl.screen, rl.leaseID)
	if err == nil {
		return true
	}
	var ae *shared.APIError
	if errors.As(err, &ae) && ae.Code == shared.CodeUserHasControl {
		rl.end(CloseTakenOver, "a person took over screen "+rl.screen)
	} else {
		rl.end(CloseLeaseLost, "the CDP session's lease on screen "+rl.screen+" ended")
	}
	return false
}

// watch renews the lease, and ends the session with the browser or tap.
func (rl *cdpRelay) watch() {
	t := time.NewTicker(cdpLeaseTick)
	defer t.Stop()
	for {
		select {
		case <-rl.ctx.Done():
			return
		case <-rl.b.Done():
			rl.end(websocket.StatusServiceRestart, "the screen's browser closed; connect again")
			return
		case <-rl.tap.Done():
			if errors.Is(rl.tap.Err(), cdp.ErrTapOverflow) {
				lim := rl.tap.Limits()
				rl.end(websocket.StatusPolicyViolation, fmt.Sprintf("the client did not read fast enough (at most %g MiB or %d messages wait for it)", float64(lim.QueueBytes)/(1<<20), lim.QueueMessages))
			} else {
				rl.end(websocket.StatusServiceRestart, "the screen's browser connection ended; connect again")
			}
			return
		case <-t.C:
			if !rl.checkLease() {
				return
			}
		}
	}
}

// command is a client message.
type command struct {
	ID        int64            `json:"id"`
	SessionID target.SessionID `json:"sessionId,omitempty"`
	Method    string           `json:"method"`
	Params    jsonv2.Value     `json:"params,omitempty"`
}

func (rl *cdpRelay) inbound() {
	for {
		typ, data, err := rl.ws.Read(rl.ctx)
		if err != nil {
			switch {
			case rl.ctx.Err() != nil:
			case websocket.CloseStatus(err) != -1:
				rl.end(websocket.StatusNormalClosure, "the client closed")
			case errors.Is(err, websocket.ErrMessageTooBig):
				rl.end(websocket.StatusMessageTooBig, fmt.Sprintf("a message over %d bytes", CDPMaxMessage))
			default:
				rl.end(websocket.StatusNormalClosure, "the client went away")
			}
			return
		}
		if typ != websocket.MessageText {
			rl.end(websocket.StatusUnsupportedData, "CDP messages are text")
			return
		}
		var cmd command
		if err := jsonv2.Unmarshal(data, &cmd, decodeOpts()); err != nil || cmd.ID <= 0 || cmd.Method == "" {
			rl.end(websocket.StatusPolicyViolation, "a message that is not a CDP command")
			return
		}
		// A person's takeover stops the client's input at once.
		if !rl.checkLease() {
			return
		}
		if reason := rl.refuse(&cmd); reason != "" {
			rl.tap.ReplyError(cmd.ID, cmd.SessionID, cmd.Method, cdpCodeRefused, refusedPrefix+reason)
			continue
		}
		if err := rl.tap.Send(rl.ctx, cmd.ID, cmd.SessionID, cmd.Method, cmd.Params); err != nil {
			if rl.ctx.Err() == nil {
				rl.end(websocket.StatusServiceRestart, "the screen's browser connection ended; connect again")
			}
			return
		}
	}
}

func decodeOpts() jsonv2.Options { return cdp.DecodeOptions() }

// Refusal reasons.
const (
	whyBrowser      = "the screen's browser is the bot's: closing or crashing it is refused"
	whyContext      = "the screen has one browser context, the bot's, whose sign-ins its screens share; use the default context"
	whyWayIn        = "it would open another way into the browser"
	whyGuard        = "changing a request's URL, method or body after interception would pass the apply guard unseen"
	whyOldIntercept = "request interception is through the Fetch domain"
	whyNotYours     = "it closes a tab this client did not open"
	whySealed       = "that tab received a vault secret; no CDP client may reach it"
	whyClear        = "it would sign the bot out everywhere (its sign-ins are shared by all its screens)"
)

// refuse is the reason a command is refused ("" to send it); it rewrites
// what it lets through changed and records what the replies need.
func (rl *cdpRelay) refuse(cmd *command) string {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if _, hid := rl.hidden[cmd.SessionID]; cmd.SessionID != "" && (hid || rl.b.cdpg.IsSealed(rl.sessTarget[cmd.SessionID])) {
		rl.hideLocked(cmd.SessionID, cmd.SessionID, true)
		return whySealed
	}
	switch cmd.Method {
	case "Browser.close", "Browser.crash", "Browser.crashGpuProcess", "Browser.executeBrowserCommand", "Page.crash":
		return whyBrowser
	case "Target.createBrowserContext", "Target.disposeBrowserContext":
		return whyContext
	case "Target.attachToBrowserTarget", "Target.exposeDevToolsProtocol", "Target.setRemoteLocations", "Tethering.bind", "Tethering.unbind":
		return whyWayIn
	case "Network.setRequestInterception", "Network.continueInterceptedRequest":
		return whyOldIntercept
	case "Network.clearBrowserCookies", "Storage.clearCookies", "Storage.clearDataForOrigin", "Storage.clearDataForStorageKey":
		return whyClear
	case "Fetch.continueRequest":
		var p struct {
			URL      *string `json:"url"`
			Method   *string `json:"method"`
			PostData *string `json:"postData"`
		}
		if jsonv2.Unmarshal(cmd.Params, &p, decodeOpts()) != nil {
			return "its params do not decode"
		}
		if p.URL != nil || p.Method != nil || p.PostData != nil {
			return whyGuard
		}
	case "Target.closeTarget":
		var p struct {
			TargetID target.ID `json:"targetId"`
		}
		if jsonv2.Unmarshal(cmd.Params, &p, decodeOpts()) != nil {
			return "its params do not decode"
		}
		if !rl.created[p.TargetID] {
			return whyNotYours
		}
	case "Page.close":
		if cmd.SessionID == "" || !rl.created[rl.sessTarget[cmd.SessionID]] {
			return whyNotYours
		}
	case "Target.attachToTarget":
		var p struct {
			TargetID target.ID `json:"targetId"`
		}
		if jsonv2.Unmarshal(cmd.Params, &p, decodeOpts()) != nil {
			return "its params do not decode"
		}
		if rl.b.cdpg.IsSealed(p.TargetID) {
			return whySealed
		}
		// Touched before the client can reach it (type_secret refuses it
		// from now on).
		rl.b.cdpg.touch(p.TargetID)
		rl.attachCmd[cmd.ID] = p.TargetID
	case "Browser.setDownloadBehavior", "Page.setDownloadBehavior":
		var p map[string]any
		if err := json.Unmarshal(cmd.Params, &p); err != nil {
			return "its params do not decode"
		}
		delete(p, "downloadPath")
		if p["behavior"] == "allow" || p["behavior"] == "allowAndName" {
			p["behavior"] = "default"
		}
		b, err := json.Marshal(p)
		if err != nil {
			return "its params do not encode"
		}
		cmd.Params = b
	}
	return ""
}

// outbound sends the tap's messages to the client, after the policy.
func (rl *cdpRelay) outbound() {
	var second time.Time
	events := 0
	for {
		m, err := rl.tap.Next(rl.ctx)
		if err != nil {
			return // watch or inbound ends the session
		}
		if !rl.pass(&m) {
			continue
		}
		data, err := m.Encode()
		if err != nil {
			continue
		}
		if rl.b.cdpg.carriesSecret(data) {
			if !m.IsReply() {
				rl.log.Warn().Str("method", m.Method).Msg("CDP event withheld: it carried a vault secret")
				continue
			}
			rl.log.Warn().Str("method", m.Method).Msg("CDP answer withheld: it carried a vault secret")
			m = cdp.TapMessage{ID: m.ID, Session: m.Session, Method: m.Method, Error: &cdproto.Error{Code: cdpCodeRefused, Message: refusedPrefix + "the answer would carry a vault secret typed in this browser"}}
			if data, err = m.Encode(); err != nil {
				continue
			}
		}
		if !m.IsReply() {
			if now := time.Now(); now.Sub(second) >= time.Second {
				second, events = now, 0
			}
			events++
			if events > CDPEventRate {
				rl.end(websocket.StatusPolicyViolation, fmt.Sprintf("more than %d events a second", CDPEventRate))
				return
			}
		}
		wt := cdpWriteTimeout
		if d := cdpWriteTimeoutSet.Load(); d > 0 {
			wt = time.Duration(d)
		}
		wctx, cancel := context.WithTimeout(rl.ctx, wt)
		err = rl.ws.Write(wctx, websocket.MessageText, data)
		cancel()
		if err != nil {
			if rl.ctx.Err() == nil {
				rl.end(websocket.StatusPolicyViolation, "the client did not read fast enough")
			}
			return
		}
	}
}

// targetInfo is the part of a TargetInfo the policy reads.
type targetInfo struct {
	TargetID target.ID `json:"targetId"`
	Type     string    `json:"type"`
}

// pass applies the policy to one message for the client: false drops it;
// it may rewrite m (then marked changed).
func (rl *cdpRelay) pass(m *cdp.TapMessage) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	g := &rl.b.cdpg
	if _, hid := rl.hidden[m.Session]; m.Session != "" && hid {
		return false
	}
	if m.Session != "" && g.IsSealed(rl.sessTarget[m.Session]) {
		// Sealed while the client had it: detach, and say so.
		rl.hideLocked(m.Session, m.Session, true)
		return false
	}
	if m.IsReply() {
		if m.Error != nil {
			delete(rl.attachCmd, m.ID)
			return true
		}
		switch m.Method {
		case "Target.attachToTarget":
			var res struct {
				SessionID target.SessionID `json:"sessionId"`
			}
			tid := rl.attachCmd[m.ID]
			delete(rl.attachCmd, m.ID)
			if jsonv2.Unmarshal(m.Result, &res, decodeOpts()) == nil && res.SessionID != "" && tid != "" {
				rl.sessTarget[res.SessionID] = tid
				if g.IsSealed(tid) {
					rl.hideLocked(res.SessionID, m.Session, false)
					m.Result, m.Error = nil, &cdproto.Error{Code: cdpCodeRefused, Message: refusedPrefix + whySealed}
					m.Changed()
				}
			}
		case "Target.createTarget":
			var res struct {
				TargetID target.ID `json:"targetId"`
			}
			if jsonv2.Unmarshal(m.Result, &res, decodeOpts()) == nil && res.TargetID != "" {
				rl.created[res.TargetID] = true
				g.touch(res.TargetID)
			}
		case "Target.getTargets":
			var res struct {
				TargetInfos []jsonv2.Value `json:"targetInfos"`
			}
			if jsonv2.Unmarshal(m.Result, &res, decodeOpts()) != nil {
				return true
			}
			kept := res.TargetInfos[:0]
			for _, raw := range res.TargetInfos {
				var ti targetInfo
				if jsonv2.Unmarshal(raw, &ti, decodeOpts()) == nil && g.IsSealed(ti.TargetID) {
					continue
				}
				kept = append(kept, raw)
			}
			if len(kept) != len(res.TargetInfos) {
				res.TargetInfos = kept
				if b, err := jsonv2.Marshal(&res); err == nil {
					m.Result = b
					m.Changed()
				}
			}
		case "Target.getTargetInfo":
			var res struct {
				TargetInfo targetInfo `json:"targetInfo"`
			}
			if jsonv2.Unmarshal(m.Result, &res, decodeOpts()) == nil && g.IsSealed(res.TargetInfo.TargetID) {
				m.Result, m.Error = nil, &cdproto.Error{Code: -32602, Message: "No target with given id found"}
				m.Changed()
			}
		}
		return true
	}
	switch m.Method {
	case "Target.attachedToTarget":
		var ev struct {
			SessionID  target.SessionID `json:"sessionId"`
			TargetInfo targetInfo       `json:"targetInfo"`
		}
		if jsonv2.Unmarshal(m.Params, &ev, decodeOpts()) != nil || ev.SessionID == "" {
			return false
		}
		rl.sessTarget[ev.SessionID] = ev.TargetInfo.TargetID
		if g.IsSealed(ev.TargetInfo.TargetID) {
			rl.hideLocked(ev.SessionID, m.Session, false)
			return false
		}
		g.touch(ev.TargetInfo.TargetID)
	case "Target.detachedFromTarget":
		var ev struct {
			SessionID target.SessionID `json:"sessionId"`
		}
		if jsonv2.Unmarshal(m.Params, &ev, decodeOpts()) == nil {
			shown, hid := rl.hidden[ev.SessionID]
			delete(rl.hidden, ev.SessionID)
			delete(rl.sessTarget, ev.SessionID)
			if hid && !shown {
				return false
			}
		}
	case "Target.targetCreated", "Target.targetInfoChanged":
		var ev struct {
			TargetInfo targetInfo `json:"targetInfo"`
		}
		if jsonv2.Unmarshal(m.Params, &ev, decodeOpts()) == nil && g.IsSealed(ev.TargetInfo.TargetID) {
			return false
		}
	}
	return true
}

// hideLocked stops everything of session sid reaching the client and
// detaches it (parent is the session it was attached from, as the client
// names it; sid itself: from the root). shown: the client knows sid.
func (rl *cdpRelay) hideLocked(sid, parent target.SessionID, shown bool) {
	if _, hid := rl.hidden[sid]; hid {
		return
	}
	rl.hidden[sid] = shown
	go func() {
		ctx, cancel := context.WithTimeout(rl.ctx, 5*time.Second)
		defer cancel()
		if parent == sid {
			parent = ""
		}
		_ = rl.tap.Call(ctx, parent, "Target.detachFromTarget", target.DetachFromTargetParams{SessionID: sid}, nil)
	}()
}

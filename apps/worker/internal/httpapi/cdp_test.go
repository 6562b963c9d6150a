package httpapi

// The CDP route's rules that need no browser (issue 34): who gets a
// session, and which tickets work. The machine is a stand-in botd that
// answers the few routes the worker calls (health, start, lease, the CDP
// upgrade) and records every upgrade it is asked for, so a refusal can be
// shown to happen before anything reaches the computer. Real clients
// (Playwright, Puppeteer) against a real botd are in apps/worker/cdp_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/cdp"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/openapi/openapitest"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// cdpBotd is the stand-in botd.
type cdpBotd struct {
	srv *httptest.Server

	// mu guards the fields below.
	mu       sync.Mutex
	n        int
	leases   map[string]string // screen → lease id
	holder   map[string]string // screen → its lease's holder
	sessions map[string]bool   // screens with a CDP session
	holders  []string
	released []string
	dials    []string // screens whose CDP upgrade botd was asked for
	person   map[string]bool
}

func newCDPBotd(t *testing.T) *cdpBotd {
	b := &cdpBotd{leases: map[string]string{}, holder: map[string]string{}, sessions: map[string]bool{}, person: map[string]bool{}}
	mux := http.NewServeMux()
	j := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	authed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+botdTok {
				j(w, 401, map[string]any{"error": map[string]string{"code": "unauthorized", "message": "bad token"}})
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /health", authed(func(w http.ResponseWriter, r *http.Request) {
		j(w, 200, map[string]any{"ok": true})
	}))
	mux.HandleFunc("POST /screens/{id}/start", authed(func(w http.ResponseWriter, r *http.Request) {
		screen := r.PathValue("id")
		b.mu.Lock()
		defer b.mu.Unlock()
		out := map[string]any{"id": screen}
		if b.leases[screen] != "" {
			out["lease"] = map[string]any{"kind": "agent", "holder": b.holder[screen], "expiresAt": time.Now().Add(time.Minute)}
		}
		j(w, 200, out)
	}))
	mux.HandleFunc("POST /screens/{id}/lease", authed(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Kind, Holder string
			TTLSeconds   int
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.person[r.PathValue("id")] {
			j(w, 409, map[string]any{"error": map[string]string{"code": "user_has_control", "message": "a person has control of this screen"}})
			return
		}
		b.holders = append(b.holders, req.Kind+"/"+req.Holder)
		screen := r.PathValue("id")
		id := b.leases[screen]
		switch {
		case id != "" && b.holder[screen] == req.Holder: // botd renews the holder's lease and hands it back
		case id != "":
			j(w, 409, map[string]any{"error": map[string]string{"code": "conflict", "message": "held by another agent"}})
			return
		default:
			b.n++
			id = fmt.Sprintf("lease-%d", b.n)
			b.leases[screen], b.holder[screen] = id, req.Holder
		}
		j(w, 200, map[string]any{"leaseId": id, "kind": req.Kind, "holder": req.Holder, "expiresAt": time.Now().Add(time.Duration(req.TTLSeconds) * time.Second)})
	}))
	mux.HandleFunc("DELETE /screens/{id}/lease/{lease}", authed(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.released = append(b.released, r.PathValue("lease"))
		if b.leases[r.PathValue("id")] == r.PathValue("lease") {
			delete(b.leases, r.PathValue("id"))
			delete(b.holder, r.PathValue("id"))
		}
		b.mu.Unlock()
		j(w, 200, map[string]bool{"released": true})
	}))
	mux.HandleFunc("GET /screens/{id}/cdp", authed(func(w http.ResponseWriter, r *http.Request) {
		screen := r.PathValue("id")
		b.mu.Lock()
		b.dials = append(b.dials, screen)
		ok := b.leases[screen] != "" && b.leases[screen] == r.Header.Get("X-Lease-Id")
		busy := b.sessions[screen]
		if ok && !busy {
			b.sessions[screen] = true
		}
		b.mu.Unlock()
		if !ok {
			j(w, 409, map[string]any{"error": map[string]string{"code": "lease_required", "message": "X-Lease-Id is not this screen's lease"}})
			return
		}
		if busy {
			j(w, 409, map[string]any{"error": map[string]string{"code": "conflict", "message": "this screen already has a CDP session"}})
			return
		}
		defer func() {
			b.mu.Lock()
			delete(b.sessions, screen)
			b.mu.Unlock()
		}()
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(8 << 20) // above the worker's bound, which is the one tested
		ctx := context.WithoutCancel(r.Context())
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if string(msg) == "take over" { // what botd does when a person takes the screen
				_ = c.Close(4001, "a person took over screen "+screen)
				return
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	}))
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

// grant gives holder an agent lease on screen, as another user of the
// worker (the OSWorld guest API) takes one.
func (b *cdpBotd) grant(screen, holder string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	b.leases[screen], b.holder[screen] = fmt.Sprintf("lease-%d", b.n), holder
}

func (b *cdpBotd) snapshot() (dials, holders, released []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dials...), append([]string(nil), b.holders...), append([]string(nil), b.released...)
}

// cdpFixture is the worker's API with the CDP routes mounted over two
// Private computers on the stand-in botd, each with bot alice.
type cdpFixture struct {
	*fixture
	// refusals is a checked client for upgrades that must be refused (one
	// that is not comes back as 101 with its connection dropped).
	refusals   *http.Client
	bd         *cdpBotd
	clock      *ticketClock
	id1, cap1  string
	id2, cap2  string
	ticketsURL func(id string) string
}

type ticketClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *ticketClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *ticketClock) Add(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func newCDPFixture(t *testing.T) *cdpFixture {
	dir := t.TempDir()
	st, err := store.OpenSQLite(t.Context(), filepath.Join(dir, "worker.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	sealer, err := secret.LoadOrCreate(filepath.Join(dir, "secret.key"))
	require.NoError(t, err)
	logs := &lockedBuf{}
	log := zerolog.New(logs)
	comps, err := computers.New(computers.Options{Store: st, Providers: map[string]providers.Provider{providers.KindAttach: providers.NewAttach()},
		DefaultProvider: providers.KindAttach, Sealer: sealer, Caps: capability.NewSet(), Log: log})
	require.NoError(t, err)
	clock := &ticketClock{}
	svc := cdp.New(cdp.Options{Computers: comps, Tickets: &cdp.Tickets{Now: clock.Now}, Log: log})
	srv := httptest.NewServer(Handler(Options{Token: token, OperatorToken: opToken, Computers: comps, Runs: runs.NewManager(runs.Options{Store: st, Computers: comps, Log: log}), Log: log,
		Mount: func(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc) { MountCDP(mux, gate, svc) }}))
	t.Cleanup(srv.Close)
	client, _ := openapitest.Client(t)
	refusals, checker := openapitest.Client(t)
	checker.Base = noUpgrade{http.DefaultTransport}
	f := &cdpFixture{fixture: &fixture{url: srv.URL, st: st, logs: logs, dir: dir, client: client}, refusals: refusals, bd: newCDPBotd(t), clock: clock}
	attach := map[string]any{"url": f.bd.srv.URL, "token": botdTok}
	for _, c := range []*[2]*string{{&f.id1, &f.cap1}, {&f.id2, &f.cap2}} {
		st, id, capa := f.create(t, map[string]any{"scope": map[string]any{}, "kind": "private", "attach": attach})
		require.Equal(t, http.StatusCreated, st)
		*c[0], *c[1] = id, capa
		code, body := f.req(t, "POST", "/v1/computers/"+id+"/bots", token, capa, map[string]string{"id": "alice"})
		require.Equal(t, http.StatusCreated, code, body)
	}
	return f
}

// noUpgrade drops the connection of an upgrade that should not have
// happened, so the checker's read of its answer ends (a hijacked
// connection's body ignores the request's context) and the test sees 101.
type noUpgrade struct{ http.RoundTripper }

func (n noUpgrade) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := n.RoundTripper.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body.Close()
		resp.Body = http.NoBody
	}
	return resp, err
}

func (f *cdpFixture) wsURL(id, bot, query string) string {
	u := "ws" + strings.TrimPrefix(f.url, "http") + "/v1/computers/" + id + "/bots/" + bot + "/cdp"
	if query != "" {
		u += "?" + query
	}
	return u
}

// dial opens the CDP websocket with the worker token and capa ("" sends
// neither); it returns the connection or the refusal's status and body.
func (f *cdpFixture) dial(t *testing.T, id, bot, query, capa string) (*websocket.Conn, int, string) {
	t.Helper()
	return f.dialFrom(t, "", id, bot, query, capa)
}

// dialFrom is dial with an Origin header ("" none).
func (f *cdpFixture) dialFrom(t *testing.T, origin, id, bot, query, capa string) (*websocket.Conn, int, string) {
	t.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	if capa != "" {
		h.Set("Authorization", "Bearer "+token)
		h.Set(capability.Header, capa)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, f.wsURL(id, bot, query), &websocket.DialOptions{HTTPHeader: h, HTTPClient: f.client})
	if err == nil {
		t.Cleanup(func() { c.CloseNow() })
		return c, http.StatusSwitchingProtocols, ""
	}
	require.NotNil(t, resp, "dial: %v", err)
	var b strings.Builder
	if resp.Body != nil {
		buf := make([]byte, 1024)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
	}
	return nil, resp.StatusCode, b.String()
}

// refused asks for the upgrade through the OpenAPI checker (the refusal
// must be a documented answer) and returns its status and body.
func (f *cdpFixture) refused(t *testing.T, id, bot, query, capa string) (int, string) {
	t.Helper()
	u := strings.Replace(f.wsURL(id, bot, query), "ws", "http", 1)
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if capa != "" {
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(capability.Header, capa)
	}
	resp, err := f.refusals.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NotEqual(t, http.StatusSwitchingProtocols, resp.StatusCode, "upgraded")
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String()
}

// mint asks for a ticket for bot's screen (body nil: the default).
func (f *cdpFixture) mint(t *testing.T, id, bot, capa string, body any) (int, struct {
	Ticket, URL string
	ExpiresAt   time.Time
}) {
	t.Helper()
	var out struct {
		Ticket, URL string
		ExpiresAt   time.Time
	}
	st, b := f.req(t, "POST", "/v1/computers/"+id+"/bots/"+bot+"/cdp/tickets", token, capa, body)
	if st == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(b), &out))
	}
	return st, out
}

// echo proves c is a live session: a CDP message comes back.
func echo(t *testing.T, c *websocket.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	msg := `{"id":1,"method":"Browser.getVersion"}`
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(msg)))
	_, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, msg, string(b))
}

// TestCDPSession: with the token and the capability a client gets a
// session on the bot's screen under an agent lease "cdp-alice"; botd's
// close (a person took over) reaches the client with its code and reason,
// and the lease is released.
func TestCDPSession(t *testing.T) {
	f := newCDPFixture(t)
	c, st, body := f.dial(t, f.id1, "alice", "", f.cap1)
	require.Equal(t, http.StatusSwitchingProtocols, st, body)
	echo(t, c)
	dials, holders, _ := f.bd.snapshot()
	require.Equal(t, []string{"alice"}, dials)
	require.Equal(t, []string{"agent/cdp-alice"}, holders)

	// A second session on the screen is refused, and the first keeps its
	// lease: both would have the holder cdp-alice, to which botd hands
	// the same lease again.
	st, body = f.refused(t, f.id1, "alice", "", f.cap1)
	require.Equal(t, http.StatusConflict, st, body)
	require.Contains(t, body, "already has a CDP session")
	_, _, released := f.bd.snapshot()
	require.Empty(t, released, "the refused session released the open one's lease")
	echo(t, c)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("take over")))
	_, _, err := c.Read(ctx)
	require.Equal(t, websocket.StatusCode(4001), websocket.CloseStatus(err), "%v", err)
	var ce websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "a person took over screen alice", ce.Reason)
	waitFor(t, "the session's lease released", func() bool {
		_, _, released := f.bd.snapshot()
		return len(released) == 1 && released[0] == "lease-1"
	})

	// A screen of the bot's namespace, by query.
	c, st, body = f.dial(t, f.id1, "alice", "screen=alice-2", f.cap1)
	require.Equal(t, http.StatusSwitchingProtocols, st, body)
	echo(t, c)
	require.NoError(t, c.Close(websocket.StatusNormalClosure, "bye"))
	waitFor(t, "the second lease released", func() bool {
		_, _, released := f.bd.snapshot()
		return len(released) == 2
	})

	// A client message over 4 MiB: 1009, and the session ends.
	c, st, body = f.dial(t, f.id1, "alice", "", f.cap1)
	require.Equal(t, http.StatusSwitchingProtocols, st, body)
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", cdp.ClientReadLimit+1))))
	_, _, err = c.Read(ctx)
	require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "%v", err)
	require.ErrorContains(t, err, fmt.Sprint(cdp.ClientReadLimit+1), "the worker's bound")
	waitFor(t, "the third lease released", func() bool {
		_, _, released := f.bd.snapshot()
		return len(released) == 3
	})

	// The holder held the screen before the session (the OSWorld guest
	// API takes the same one): the session shares that lease and leaves
	// it held when it ends.
	f.bd.grant("alice", "cdp-alice")
	_, _, before := f.bd.snapshot()
	// The oversized session's lease is released before its end is done:
	// a dial at once can still meet it ("one at a time", rehearsal 48).
	waitFor(t, "the oversized session's end (a new one opens)", func() bool {
		c, st, body = f.dial(t, f.id1, "alice", "", f.cap1)
		if st == http.StatusConflict && strings.Contains(body, "already has a CDP session") {
			return false
		}
		require.Equal(t, http.StatusSwitchingProtocols, st, body)
		return true
	})
	echo(t, c)
	require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))
	// A new session opens once the first one's end (its release, or
	// none) is done.
	waitFor(t, "the session's end (a new one opens)", func() bool {
		c, st, _ := f.dial(t, f.id1, "alice", "", f.cap1)
		if st != http.StatusSwitchingProtocols {
			return false
		}
		_ = c.Close(websocket.StatusNormalClosure, "")
		return true
	})
	_, _, after := f.bd.snapshot()
	require.Equal(t, before, after, "a lease held before the session was released")
	f.bd.mu.Lock()
	require.NotEmpty(t, f.bd.leases["alice"], "the shared lease is still held")
	delete(f.bd.leases, "alice")
	f.bd.mu.Unlock()

	// A person holds the screen: botd's 409, before any upgrade.
	f.bd.mu.Lock()
	f.bd.person["alice"] = true
	f.bd.mu.Unlock()
	// (The last session above may still be ending: its screen is busy
	// until then.)
	waitFor(t, "the person's 409", func() bool {
		st, body = f.refused(t, f.id1, "alice", "", f.cap1)
		return !strings.Contains(body, "already has a CDP session")
	})
	require.Equal(t, http.StatusConflict, st, body)
	require.Contains(t, body, "user_has_control")

	// Not a websocket.
	st, body = f.req(t, "GET", "/v1/computers/"+f.id1+"/bots/alice/cdp", token, f.cap1, nil)
	require.Equal(t, http.StatusBadRequest, st, body)
}

// TestRedteamCDPAccess: a session only for the computer whose capability
// the caller holds, only for a bot of it and a screen of that bot, each
// refused before anything reaches the machine.
func TestRedteamCDPAccess(t *testing.T) {
	f := newCDPFixture(t)
	rows := []struct {
		name           string
		id, bot, query string
		capa           string
		want           int
	}{
		{"another computer's capability", f.id1, "alice", "", f.cap2, http.StatusNotFound},
		{"no capability", f.id1, "alice", "", "none", http.StatusNotFound},
		{"a bot not on the computer", f.id1, "bob", "", f.cap1, http.StatusNotFound},
		{"another bot's screen", f.id1, "alice", "screen=bob", f.cap1, http.StatusForbidden},
		{"a screen that only starts with the bot's id", f.id1, "alice", "screen=alicebob", f.cap1, http.StatusForbidden},
		{"an invalid screen id", f.id1, "alice", "screen=" + url.QueryEscape("../alice"), f.cap1, http.StatusForbidden},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			capa := r.capa
			if capa == "none" {
				capa = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
			}
			st, body := f.refused(t, r.id, r.bot, r.query, capa)
			require.Equal(t, r.want, st, body)
			dials, holders, _ := f.bd.snapshot()
			require.Empty(t, dials, "the machine was asked for a CDP session")
			require.Empty(t, holders, "a lease was taken")
		})
	}
	// Without the token: 401, whatever the capability.
	req, _ := http.NewRequest("GET", strings.Replace(f.wsURL(f.id1, "alice", ""), "ws", "http", 1), nil)
	req.Header.Set(capability.Header, f.cap1)
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestRedteamCDPTickets: a ticket works once, for 60 s, for its own
// computer, bot and screen; it opens nothing else; it is never logged.
func TestRedteamCDPTickets(t *testing.T) {
	f := newCDPFixture(t)
	st, tk := f.mint(t, f.id1, "alice", f.cap1, nil)
	require.Equal(t, http.StatusOK, st)
	require.Len(t, tk.Ticket, 43)
	require.WithinDuration(t, time.Now().Add(cdp.TicketTTL), tk.ExpiresAt, 2*time.Second)
	u, err := url.Parse(tk.URL)
	require.NoError(t, err)
	require.Equal(t, f.wsURL(f.id1, "alice", ""), "ws://"+u.Host+u.Path)
	require.Equal(t, "alice", u.Query().Get("screen"))
	require.Equal(t, tk.Ticket, u.Query().Get("ticket"))
	first := tk.Ticket

	// The URL alone (no token, no capability) opens the session, from a
	// page of any origin (a browser client).
	c, code, body := f.dialFrom(t, "https://elsewhere.example", f.id1, "alice", u.RawQuery, "")
	require.Equal(t, http.StatusSwitchingProtocols, code, body)
	echo(t, c)
	require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))

	t.Run("reused", func(t *testing.T) {
		code, body := f.refused(t, f.id1, "alice", u.RawQuery, "")
		require.Equal(t, http.StatusUnauthorized, code, body)
	})
	t.Run("expired", func(t *testing.T) {
		_, tk := f.mint(t, f.id1, "alice", f.cap1, nil)
		f.clock.Add(cdp.TicketTTL)
		code, body := f.refused(t, f.id1, "alice", "ticket="+tk.Ticket, "")
		f.clock.Add(-cdp.TicketTTL)
		require.Equal(t, http.StatusUnauthorized, code, body)
		code, body = f.refused(t, f.id1, "alice", "ticket="+tk.Ticket, "")
		require.Equal(t, http.StatusUnauthorized, code, "spent by the expired attempt: %s", body)
	})
	t.Run("another screen", func(t *testing.T) {
		_, tk := f.mint(t, f.id1, "alice", f.cap1, nil)
		code, body := f.refused(t, f.id1, "alice", "screen=alice-2&ticket="+tk.Ticket, "")
		require.Equal(t, http.StatusUnauthorized, code, body)
		code, _ = f.refused(t, f.id1, "alice", "ticket="+tk.Ticket, "")
		require.Equal(t, http.StatusUnauthorized, code, "spent by the refused attempt")
	})
	t.Run("another computer", func(t *testing.T) {
		_, tk := f.mint(t, f.id1, "alice", f.cap1, nil)
		code, body := f.refused(t, f.id2, "alice", "ticket="+tk.Ticket, "")
		require.Equal(t, http.StatusUnauthorized, code, body)
	})
	t.Run("another bot", func(t *testing.T) {
		_, tk := f.mint(t, f.id1, "alice", f.cap1, nil)
		code, body := f.refused(t, f.id1, "bob", "screen=alice&ticket="+tk.Ticket, "")
		require.Equal(t, http.StatusUnauthorized, code, body)
	})
	t.Run("a ticket for another screen, minted", func(t *testing.T) {
		st, tk := f.mint(t, f.id1, "alice", f.cap1, map[string]string{"screen": "alice-2"})
		require.Equal(t, http.StatusOK, st)
		code, body := f.refused(t, f.id1, "alice", "ticket="+tk.Ticket, "")
		require.Equal(t, http.StatusUnauthorized, code, body)
	})
	t.Run("minting is gated", func(t *testing.T) {
		st, _ := f.mint(t, f.id1, "alice", f.cap2, nil)
		require.Equal(t, http.StatusNotFound, st, "another computer's capability")
		st, _ = f.mint(t, f.id1, "bob", f.cap1, nil)
		require.Equal(t, http.StatusNotFound, st, "a bot not on the computer")
		st, _ = f.mint(t, f.id1, "alice", f.cap1, map[string]string{"screen": "bob"})
		require.Equal(t, http.StatusForbidden, st, "another bot's screen")
	})
	t.Run("a ticket opens no other route", func(t *testing.T) {
		_, tk := f.mint(t, f.id1, "alice", f.cap1, nil)
		for _, p := range []string{
			"/v1/computers/" + f.id1 + "?ticket=" + tk.Ticket,
			"/v1/computers/" + f.id1 + "/bots/alice/takeover?ticket=" + tk.Ticket,
			"/v1/computers/" + f.id1 + "/bots/alice/cdp/tickets?ticket=" + tk.Ticket,
		} {
			for _, m := range []string{"GET", "POST"} {
				req, _ := http.NewRequest(m, f.url+p, nil)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				require.Contains(t, []int{http.StatusUnauthorized}, resp.StatusCode, "%s %s", m, p)
			}
		}
		// POST and HEAD on the CDP route itself with a ticket: the bearer check.
		for _, m := range []string{"POST", "HEAD"} {
			req, _ := http.NewRequest(m, strings.Replace(f.wsURL(f.id1, "alice", "ticket="+tk.Ticket), "ws", "http", 1), nil)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, m)
		}
		// The ticket still works: nothing above spent it.
		c, code, body := f.dial(t, f.id1, "alice", "ticket="+tk.Ticket, "")
		require.Equal(t, http.StatusSwitchingProtocols, code, body)
		c.CloseNow()
	})
	logs := f.logs.String()
	require.NotContains(t, logs, first, "a ticket in the worker's log")
	require.Contains(t, logs, `"path":"/v1/computers/`+f.id1+`/bots/alice/cdp"`)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "waiting for %s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

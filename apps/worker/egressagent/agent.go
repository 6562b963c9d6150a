// Package egressagent is the egress agent: `worker egress` runs it on the
// user's own machine when botd's egress mode is tunnel. It keeps one
// websocket to botd's /egress route, serves the yamux streams botd opens over
// it (each names a host:port; the agent resolves and dials it here), and
// reconnects with capped, jittered backoff.
//
// It is not an internal package because botd's egress tests run it in
// process, against the real proxy.
package egressagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
	"github.com/open-bot/computer/pkg/shared/egresswire"
)

// Options configures the agent. Zero values get the defaults noted.
type Options struct {
	// BotdURL is botd's base URL (http, https, ws or wss); the agent adds
	// /egress unless the path already ends with it.
	BotdURL string
	// Token is BOTD_TOKEN, sent as a bearer header. Never logged.
	Token string
	// Log is the agent's logger; the zero value logs nothing.
	Log zerolog.Logger
	// HTTPClient makes the websocket handshake (default http.DefaultClient).
	HTTPClient *http.Client
	// Dial reaches targets (default a net.Dialer), always given an ip:port
	// that the policy let through: names are resolved first (Resolve) and
	// every address checked (egresspolicy), before any dial.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolve looks names up on this machine (default net.DefaultResolver).
	// Tests inject a stub here.
	Resolve egresspolicy.Resolver
	// Allow is what the bot may reach beyond the public internet (nil:
	// nothing; loopback, private, link-local, unique-local and CGNAT
	// addresses of this machine's networks are refused).
	Allow *egresspolicy.Policy
	// AllowLoopback adds this machine's loopback (127.0.0.0/8, ::1) to Allow.
	AllowLoopback bool

	// DialTimeout bounds reaching botd and each target (default 30s).
	DialTimeout time.Duration
	// HeaderTimeout bounds reading a stream's header (default 10s).
	HeaderTimeout time.Duration
	// IdleTimeout ends a connection with no bytes either way (default 5m).
	IdleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay (500ms, 30s).
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// StableAfter is how long a session must last for the backoff to reset
	// (default 10s), so a botd that drops us at once is not hammered.
	StableAfter time.Duration
	// KeepAlive is the yamux ping interval towards botd (default 15s).
	KeepAlive time.Duration
	// StreamWindow is yamux's per-stream receive window (default 1 MiB).
	StreamWindow uint32
	// Rand returns jitter in [0,1) (default math/rand/v2).
	Rand func() float64
}

func (o *Options) setDefaults() {
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 30 * time.Second
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
		o.Dial = d.DialContext
	}
	pol := o.Allow
	if o.AllowLoopback {
		pol = egresspolicy.MustParse(pol.String() + ",127.0.0.0/8,::1/128")
	}
	pd := &egresspolicy.Dialer{Policy: pol, Resolve: o.Resolve, Dial: o.Dial}
	o.Dial = pd.DialContext
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 10 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 500 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(30*time.Second, o.MinBackoff)
	}
	if o.StableAfter <= 0 {
		o.StableAfter = 10 * time.Second
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 15 * time.Second
	}
	if o.StreamWindow < 256*1024 {
		o.StreamWindow = 1 << 20
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
}

// Run keeps the agent connected until ctx ends. It returns an error only for
// bad options; cancellation is the way to stop and is not an error.
func Run(ctx context.Context, o Options) error {
	o.setDefaults()
	u, err := tunnelURL(o.BotdURL)
	if err != nil {
		return err
	}
	if strings.TrimSpace(o.Token) == "" {
		return errors.New("egress agent: empty token")
	}
	a := &agent{o: o, url: u, client: batchingClient(o.HTTPClient, u), log: o.Log.With().Str("component", "egress-agent").Str("botd", hostOf(u)).Logger()}
	bo := backoff{min: o.MinBackoff, max: o.MaxBackoff, rand: o.Rand}
	for {
		lived, err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if lived >= o.StableAfter {
			bo.reset()
		}
		d := bo.next()
		ev := a.log.Warn()
		if err != nil {
			ev = ev.Err(err)
		}
		ev.Dur("retry_in", d).Msg("egress tunnel down; reconnecting")
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// tunnelURL turns botd's base URL into the /egress websocket URL.
func tunnelURL(base string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("egress agent: --botd %q: want a URL like http://host:7000", base)
	}
	switch u.Scheme {
	case "http", "ws":
		u.Scheme = "ws"
	case "https", "wss":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("egress agent: --botd scheme %q: want http, https, ws or wss", u.Scheme)
	}
	if !strings.HasSuffix(u.Path, "/egress") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/egress"
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String(), nil
}

func hostOf(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Host
	}
	return ""
}

type agent struct {
	o   Options
	url string
	// client is o.HTTPClient with frame batching under the websocket (batch.go).
	client *http.Client
	log    zerolog.Logger
}

// session runs one websocket + yamux session until either ends. It returns
// how long the session was up (0 when it never came up).
func (a *agent) session(ctx context.Context) (time.Duration, error) {
	dctx, cancel := context.WithTimeout(withBatchSlot(ctx), a.o.DialTimeout)
	ws, resp, err := websocket.Dial(dctx, a.url, &websocket.DialOptions{
		HTTPClient: a.client,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + a.o.Token}},
	})
	cancel()
	if err != nil {
		return 0, refusal(resp, err)
	}
	armAfterHandshake(dctx)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	// One websocket message per yamux data frame, not two (header, body).
	nc := &wsConn{Conn: egresswire.CoalesceFrames(websocket.NetConn(sctx, ws, websocket.MessageBinary)), ws: ws}
	sess, err := yamux.Server(nc, a.yamuxConfig())
	if err != nil {
		_ = nc.Close()
		return 0, err
	}
	start := time.Now()
	a.log.Info().Msg("egress tunnel connected")
	stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
	defer stop()
	ss := &sessionState{relays: map[uint32]*relayState{}}
	var wg sync.WaitGroup
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serveStream(sctx, ss, st)
		}()
	}
	_ = sess.Close()
	wg.Wait()
	return time.Since(start), errors.New("egress tunnel closed")
}

// refusal explains a failed handshake without echoing anything secret: the
// status, and botd's error envelope message if there is one.
func refusal(resp *http.Response, err error) error {
	if resp == nil {
		return fmt.Errorf("connect to botd: %w", err)
	}
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		_ = json.Unmarshal(b, &env)
	}
	if env.Error.Code != "" {
		return fmt.Errorf("botd refused the tunnel: %d %s: %s", resp.StatusCode, env.Error.Code, env.Error.Message)
	}
	return fmt.Errorf("botd refused the tunnel: %d", resp.StatusCode)
}

func (a *agent) yamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.KeepAliveInterval = a.o.KeepAlive
	cfg.MaxStreamWindowSize = a.o.StreamWindow
	cfg.StreamCloseTimeout = a.o.IdleTimeout
	cfg.LogOutput = nil
	cfg.Logger = yamuxLogger{a.log}
	return cfg
}

// wsConn closes its websocket at once: NetConn's Close waits for the peer's
// close frame, which a dead botd never sends.
type wsConn struct {
	net.Conn
	ws *websocket.Conn
}

func (c *wsConn) Close() error {
	_ = c.ws.CloseNow()
	return c.Conn.Close()
}

// yamuxLogger is yamux's Logger on zerolog, at debug level.
type yamuxLogger struct{ log zerolog.Logger }

func (l yamuxLogger) Print(v ...any)                 { l.log.Debug().Msg(fmt.Sprint(v...)) }
func (l yamuxLogger) Printf(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l yamuxLogger) Println(v ...any)               { l.log.Debug().Msg(strings.TrimSpace(fmt.Sprintln(v...))) }

package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/egresswire"
)

// errNoAgent refuses a connection in tunnel mode while no agent is there.
// go-socks5 picks its reply from the text: "network is unreachable" gives
// the client SOCKS reply 3 (network unreachable).
var errNoAgent = errors.New("tunnel mode and no egress agent connected: network is unreachable")

// pingFailuresToDrop is how many pings in a row may fail before the tunnel
// is dropped (the agent is gone even if the socket is not).
const pingFailuresToDrop = 2

// tunnel holds the egress agent's sessions. The newest agent wins: a
// reconnecting agent often arrives before botd noticed its old socket died.
type tunnel struct {
	p   *Proxy
	log zerolog.Logger

	// mu guards cur and all.
	mu  sync.Mutex
	cur *agentSession
	all map[*agentSession]struct{}
}

// resetWait bounds how long a stream we reset waits for the peer's close.
const resetWait = 5 * time.Second

// agentSession is one /egress websocket and the yamux session over it.
type agentSession struct {
	sess   *yamux.Session
	ctrl   *yamux.Stream // the control stream (wire.go)
	remote string
	// online is true while the agent answers pings; guarded by tunnel.mu.
	online bool

	// mu guards conns: the proxied connection of each open stream id.
	mu    sync.Mutex
	conns map[uint32]*proxyConn
}

// sendReset asks the agent to reset stream id; false if it cannot be asked.
func (as *agentSession) sendReset(id uint32) bool {
	_ = as.ctrl.SetWriteDeadline(time.Now().Add(resetWait))
	return egresswire.WriteReset(as.ctrl, id) == nil
}

func (as *agentSession) register(id uint32, pc *proxyConn) {
	as.mu.Lock()
	as.conns[id] = pc
	as.mu.Unlock()
}

func (as *agentSession) unregister(id uint32) {
	as.mu.Lock()
	delete(as.conns, id)
	as.mu.Unlock()
}

// readResets serves the agent's reset requests until the session ends.
func (as *agentSession) readResets() {
	for {
		id, err := egresswire.ReadReset(as.ctrl)
		if err != nil {
			return
		}
		as.mu.Lock()
		pc := as.conns[id]
		as.mu.Unlock()
		if pc != nil {
			pc.remoteReset.Store(true)
			pc.abort()
		}
	}
}

func newTunnel(p *Proxy) *tunnel {
	return &tunnel{p: p, log: p.log.With().Str("part", "tunnel").Logger(), all: map[*agentSession]struct{}{}}
}

// state reports (tunnelConnected, agentOnline).
func (t *tunnel) state() (bool, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur == nil || t.cur.sess.IsClosed() {
		return false, false
	}
	return true, t.cur.online
}

// Register mounts GET /egress, the agent's tunnel, on mux. The API server's
// middleware has already checked the bearer token when the handler runs.
func (p *Proxy) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /egress", p.ServeTunnel)
}

// ServeTunnel accepts the egress agent's websocket and serves it until it
// ends, the agent is replaced, or the proxy closes.
func (p *Proxy) ServeTunnel(w http.ResponseWriter, r *http.Request) {
	if p.tun == nil {
		httpx.WriteError(w, http.StatusConflict, shared.CodeConflict, "egress mode is direct: this computer does not use an egress agent")
		return
	}
	if !p.enter() {
		httpx.WriteError(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "egress proxy is stopping")
		return
	}
	defer p.wg.Done()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		p.tun.log.Warn().Err(err).Msg("egress agent websocket accept failed")
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	// One websocket message per yamux data frame, not two (header, body).
	nc := &wsConn{Conn: egresswire.CoalesceFrames(websocket.NetConn(ctx, ws, websocket.MessageBinary)), ws: ws}
	sess, err := yamux.Client(nc, p.yamuxConfig())
	if err != nil {
		_ = nc.Close()
		p.tun.log.Error().Err(err).Msg("yamux session")
		return
	}
	ctrl, err := sess.OpenStream()
	if err == nil {
		err = egresswire.WriteControlHeader(ctrl)
	}
	if err != nil {
		_ = sess.Close()
		p.tun.log.Warn().Err(err).Msg("egress tunnel control stream")
		return
	}
	as := &agentSession{sess: sess, ctrl: ctrl, remote: r.RemoteAddr, conns: map[uint32]*proxyConn{}}
	resets := make(chan struct{})
	go func() {
		defer close(resets)
		as.readResets()
	}()
	p.tun.attach(as)
	p.tun.watch(ctx, as)
	p.tun.detach(as)
	<-resets
}

// enter counts a tunnel handler in wg unless the proxy is closing.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

func (p *Proxy) yamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	// Our own pings (watch) keep the session honest and feed agentOnline.
	cfg.EnableKeepAlive = false
	cfg.ConnectionWriteTimeout = p.opts.PingTimeout
	cfg.MaxStreamWindowSize = p.opts.StreamWindow
	cfg.StreamCloseTimeout = p.opts.IdleTimeout
	cfg.StreamOpenTimeout = p.opts.DialTimeout + p.opts.PingTimeout
	cfg.LogOutput = nil
	cfg.Logger = yamuxLogger{p.tun.log}
	return cfg
}

func (t *tunnel) attach(as *agentSession) {
	t.mu.Lock()
	old := t.cur
	t.cur = as
	t.all[as] = struct{}{}
	t.mu.Unlock()
	if old != nil {
		t.log.Info().Str("remote", old.remote).Msg("a new egress agent replaces the connected one")
		_ = old.sess.Close()
	}
	t.log.Info().Str("remote", as.remote).Msg("egress agent connected")
	t.p.notify()
}

func (t *tunnel) detach(as *agentSession) {
	_ = as.sess.Close()
	t.mu.Lock()
	delete(t.all, as)
	if t.cur == as {
		t.cur = nil
	}
	t.mu.Unlock()
	t.log.Info().Str("remote", as.remote).Msg("egress agent disconnected")
	t.p.notify()
}

// watch pings the agent at once and then every PingInterval until the
// session ends. agentOnline follows the pings.
func (t *tunnel) watch(ctx context.Context, as *agentSession) {
	tick := time.NewTicker(t.p.opts.PingInterval)
	defer tick.Stop()
	failures := 0
	for {
		_, err := as.sess.Ping()
		if as.sess.IsClosed() {
			return
		}
		if err != nil {
			failures++
			t.log.Warn().Err(err).Int("failures", failures).Msg("egress agent did not answer a ping")
		} else {
			failures = 0
		}
		t.setOnline(as, err == nil)
		if failures >= pingFailuresToDrop {
			t.log.Warn().Msg("dropping an unresponsive egress agent")
			return
		}
		select {
		case <-tick.C:
		case <-as.sess.CloseChan():
			return
		case <-ctx.Done():
			return
		}
	}
}

func (t *tunnel) setOnline(as *agentSession, online bool) {
	t.mu.Lock()
	changed := as.online != online
	as.online = online
	t.mu.Unlock()
	if changed {
		t.p.notify()
	}
}

func (t *tunnel) closeAll() {
	t.mu.Lock()
	all := make([]*agentSession, 0, len(t.all))
	for as := range t.all {
		all = append(all, as)
	}
	t.mu.Unlock()
	for _, as := range all {
		_ = as.sess.Close()
	}
}

// dial opens a stream to the agent, names the target and waits for the
// agent's answer, so the SOCKS reply tells the client the real outcome. With
// no agent it refuses (and says so in the log): never a silent direct dial.
func (t *tunnel) dial(ctx context.Context, addr string) (*yamux.Stream, *agentSession, error) {
	t.mu.Lock()
	as := t.cur
	t.mu.Unlock()
	if as == nil || as.sess.IsClosed() {
		if n := t.p.noAgent.hit(); n > 0 {
			t.log.Warn().Int("refused", n).Msg("tunnel mode and no egress agent connected: refusing connections (no fallback to direct)")
		}
		return nil, nil, errNoAgent
	}
	st, err := as.sess.OpenStream()
	if err != nil {
		return nil, nil, fmt.Errorf("open tunnel stream: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
	err = egresswire.WriteHeader(st, addr)
	if err == nil {
		err = egresswire.ReadStatus(st)
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = st.SetDeadline(time.Now())
		_ = st.Close()
		return nil, nil, err
	}
	_ = st.SetDeadline(time.Time{})
	return st, as, nil
}

// wsConn closes its websocket at once: NetConn's Close waits for the peer's
// close frame, which a dead agent never sends.
type wsConn struct {
	net.Conn
	ws *websocket.Conn
}

func (c *wsConn) Close() error {
	_ = c.ws.CloseNow()
	return c.Conn.Close()
}

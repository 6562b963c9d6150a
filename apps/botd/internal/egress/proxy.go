package egress

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// The modes EGRESS_MODE selects.
const (
	// ModeDirect resolves and dials from the computer.
	ModeDirect = "direct"
	// ModeTunnel carries every connection to the egress agent.
	ModeTunnel = "tunnel"
)

// Options configures a Proxy. Zero values get the defaults noted.
type Options struct {
	// Addr is the SOCKS5 listen address (default 127.0.0.1:1080).
	Addr string
	// Mode is ModeDirect (default) or ModeTunnel.
	Mode string
	// Log gets one sub-logger per component; the zero value logs nothing.
	Log zerolog.Logger
	// Hub, when set, receives an EventEgress whenever Health changes.
	Hub *health.Hub
	// Model, when set, is told (Changed) whenever Health changes.
	Model *health.Model

	// HandshakeTimeout bounds the SOCKS greeting and request (default 10s).
	HandshakeTimeout time.Duration
	// DialTimeout bounds reaching the target, through the agent in tunnel
	// mode (default 30s).
	DialTimeout time.Duration
	// IdleTimeout closes a proxied connection with no bytes either way for
	// this long (default 5m).
	IdleTimeout time.Duration
	// MaxConns caps concurrent client connections (default 1024); one over
	// the cap is closed at once.
	MaxConns int
	// Dial reaches targets in direct mode (default a net.Dialer), always
	// given an ip:port that Allow let through (names are resolved and
	// checked first, see egresspolicy). Tests inject their own.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Allow is EGRESS_ALLOW: what direct mode may reach beyond the public
	// internet (nil: nothing; loopback, private, link-local, unique-local
	// and CGNAT are refused before any dial).
	Allow *egresspolicy.Policy
	// Resolve looks names up in direct mode (default net.DefaultResolver).
	Resolve egresspolicy.Resolver

	// PingInterval is how often the agent is pinged over the tunnel
	// (default 15s); PingTimeout bounds one ping (default 10s). Two failed
	// pings in a row drop the tunnel.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// StreamWindow is yamux's per-stream receive window in bytes
	// (default 1 MiB).
	StreamWindow uint32
}

func (o *Options) setDefaults() {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:1080"
	}
	if o.Mode == "" {
		o.Mode = ModeDirect
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 30 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 1024
	}
	if o.Dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		o.Dial = d.DialContext
	}
	// Every direct dial goes through the destination policy.
	pd := &egresspolicy.Dialer{Policy: o.Allow, Resolve: o.Resolve, Dial: o.Dial}
	o.Dial = pd.DialContext
	if o.PingInterval <= 0 {
		o.PingInterval = 15 * time.Second
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = 10 * time.Second
	}
	if o.StreamWindow < 256*1024 {
		o.StreamWindow = 1 << 20
	}
}

// Proxy is the SOCKS5 egress proxy. Create it with New; Close stops it.
type Proxy struct {
	opts   Options
	log    zerolog.Logger
	ln     net.Listener
	ctx    context.Context // ends at Close; bounds dials and tunnels
	cancel context.CancelFunc
	slots  chan struct{} // one token per open client connection
	tun    *tunnel       // non-nil in tunnel mode

	// wg counts the accept loop, connection handlers and tunnel handlers.
	wg sync.WaitGroup

	// mu guards closed and conns.
	mu     sync.Mutex
	closed bool
	conns  map[*proxyConn]struct{}

	// notifyMu guards lastHealth and orders health publications.
	notifyMu   sync.Mutex
	lastHealth shared.EgressHealth

	refusals rateLog // over-cap refusals
	noAgent  rateLog // tunnel mode without an agent

	socksLogOnce sync.Once
	socksLogger  *log.Logger
}

// New listens on o.Addr and starts serving SOCKS5.
func New(o Options) (*Proxy, error) {
	o.setDefaults()
	if o.Mode != ModeDirect && o.Mode != ModeTunnel {
		return nil, fmt.Errorf("egress: mode %q: want %s or %s", o.Mode, ModeDirect, ModeTunnel)
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("egress: listen %s: %w", o.Addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		opts:   o,
		log:    o.Log.With().Str("component", "egress").Logger(),
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		slots:  make(chan struct{}, o.MaxConns),
		conns:  map[*proxyConn]struct{}{},
	}
	p.refusals.every, p.noAgent.every = 10*time.Second, 10*time.Second
	if o.Mode == ModeTunnel {
		p.tun = newTunnel(p)
	}
	p.lastHealth = p.Health()
	p.wg.Add(1)
	go p.acceptLoop()
	p.log.Info().Str("listen", ln.Addr().String()).Str("mode", o.Mode).Msg("socks5 egress proxy listening")
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// Mode is the proxy's mode.
func (p *Proxy) Mode() string { return p.opts.Mode }

// Health is the egress line of ComputerHealth. In direct mode agentOnline
// and tunnelConnected are false: there is no tunnel.
func (p *Proxy) Health() shared.EgressHealth {
	h := shared.EgressHealth{Mode: p.opts.Mode}
	if p.tun != nil {
		h.TunnelConnected, h.AgentOnline = p.tun.state()
	}
	return h
}

// notify publishes Health on the hub and tells the model, when it changed.
func (p *Proxy) notify() {
	p.notifyMu.Lock()
	h := p.Health()
	changed := h != p.lastHealth
	if changed {
		p.lastHealth = h
		if p.opts.Hub != nil {
			p.opts.Hub.Publish(shared.EventEgress, h)
		}
		p.log.Info().Bool("tunnel_connected", h.TunnelConnected).Bool("agent_online", h.AgentOnline).Msg("egress health changed")
	}
	p.notifyMu.Unlock()
	if changed && p.opts.Model != nil {
		p.opts.Model.Changed()
	}
}

// Close stops accepting, ends every proxied connection and the tunnel, and
// waits for their goroutines. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()

	p.cancel()
	err := p.ln.Close()
	if p.tun != nil {
		p.tun.closeAll() // first: a reset then has no agent to wait for
	}
	for _, c := range conns {
		c.abort()
	}
	p.wg.Wait()
	p.notify()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// acceptLoop is our own: go-socks5's Serve returns on the first Accept
// error, and a busy machine (EMFILE) must not stop egress for good.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	var delay time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else if delay *= 2; delay > time.Second {
				delay = time.Second
			}
			p.log.Warn().Err(err).Dur("retry_in", delay).Msg("accept failed")
			select {
			case <-time.After(delay):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		select {
		case p.slots <- struct{}{}:
		default:
			if n := p.refusals.hit(); n > 0 {
				p.log.Warn().Int("max_conns", p.opts.MaxConns).Int("refused", n).Msg("connection cap reached; refusing new connections")
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		pc := &proxyConn{p: p, client: c}
		if !p.track(pc) {
			<-p.slots
			_ = c.Close()
			return
		}
		go pc.serve()
	}
}

// track registers pc (and counts it in wg) unless the proxy is closing.
func (p *Proxy) track(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[pc] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	<-p.slots
	p.wg.Done()
}

// rateLog lets a repeated warning through at most once per period and
// counts what it held back.
type rateLog struct {
	every time.Duration

	// mu guards last and n.
	mu   sync.Mutex
	last time.Time
	n    int
}

// hit counts one occurrence; it returns how many to report (0: stay quiet).
func (r *rateLog) hit() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if now := time.Now(); r.last.IsZero() || now.Sub(r.last) >= r.every {
		r.last = now
		n := r.n
		r.n = 0
		return n
	}
	return 0
}

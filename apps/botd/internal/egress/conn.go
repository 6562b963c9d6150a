package egress

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

	socks5 "github.com/armon/go-socks5"
	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// A user-space copy (tunnel mode) starts with a small buffer, as io.Copy's,
// and moves to a big one once a read fills it: an idle or chatty connection
// holds 32 KiB a direction, a bulk transfer makes a quarter of the syscalls.
const (
	smallBufSize = 32 * 1024
	bigBufSize   = 256 * 1024
	// hugeBufSize is direct mode's bulk buffer (copyTCP).
	hugeBufSize = 1 << 20
)

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, smallBufSize); return &b }}
	bigBufs   = sync.Pool{New: func() any { b := make([]byte, bigBufSize); return &b }}
	hugeBufs  = sync.Pool{New: func() any { b := make([]byte, hugeBufSize); return &b }}
)

// epoch makes activity stamps monotonic (time.Since keeps the monotonic clock).
var epoch = time.Now()

// errTunnelLost is what a proxied connection sees when the tunnel under its
// stream went away: an error (so the client gets a reset), not a clean EOF.
var errTunnelLost = errors.New("egress tunnel lost")

// proxyConn is one client connection: the SOCKS handshake, then bytes both
// ways between client and target.
type proxyConn struct {
	p      *Proxy
	client net.Conn
	// last is the time of the last byte moved, in ns since epoch.
	last    atomic.Int64
	aborted atomic.Bool
	// remoteReset is set when the agent reset the stream (no reset back).
	remoteReset atomic.Bool

	// mu guards target, idle and done.
	mu     sync.Mutex
	target *targetConn
	idle   *time.Timer
	done   bool
}

// passName is go-socks5's Resolver: it resolves nothing, so the name goes to
// the dialer untouched (in tunnel mode it must resolve on the agent's side).
type passName struct{}

func (passName) Resolve(ctx context.Context, _ string) (context.Context, net.IP, error) {
	return ctx, nil, nil
}

// serve runs go-socks5 on this one connection. A server per connection lets
// the dialer know its client (to lift the handshake deadline and watch
// idleness); go-socks5 keeps no other state.
func (pc *proxyConn) serve() {
	defer pc.p.untrack(pc)
	defer pc.finish()
	_ = pc.client.SetDeadline(time.Now().Add(pc.p.opts.HandshakeTimeout))
	srv, err := socks5.New(&socks5.Config{
		Resolver: passName{},
		Dial:     pc.dial,
		Logger:   pc.p.socksLog(),
	})
	if err != nil {
		_ = pc.client.Close()
		return
	}
	_ = srv.ServeConn(&clientConn{Conn: pc.client, pc: pc})
}

// dial is called once the request is read: the handshake is over, so its
// deadline goes; the dial has its own bound.
func (pc *proxyConn) dial(_ context.Context, network, addr string) (net.Conn, error) {
	_ = pc.client.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(pc.p.ctx, pc.p.opts.DialTimeout)
	defer cancel()
	var (
		c   net.Conn
		st  *yamux.Stream
		as  *agentSession
		err error
	)
	if pc.p.tun != nil {
		if st, as, err = pc.p.tun.dial(ctx, addr); err == nil {
			c = st
			as.register(st.StreamID(), pc)
		}
	} else {
		c, err = pc.p.opts.Dial(ctx, network, addr)
	}
	if err != nil {
		pc.p.log.Debug().Str("target", addr).Err(err).Msg("dial failed")
		return nil, err
	}
	tc := &targetConn{Conn: c, pc: pc, stream: st, sess: as}
	pc.mu.Lock()
	if pc.done || pc.aborted.Load() {
		// The client went away while we dialled. Close may wait on the
		// agent (a reset), so never under mu.
		pc.mu.Unlock()
		_ = tc.Close()
		return nil, net.ErrClosed
	}
	pc.target = tc
	pc.touch()
	pc.idle = time.AfterFunc(pc.p.opts.IdleTimeout, pc.checkIdle)
	pc.mu.Unlock()
	return tc, nil
}

func (pc *proxyConn) touch() { pc.last.Store(int64(time.Since(epoch))) }

// checkIdle ends the connection after IdleTimeout without a byte either way.
// Direct mode's copies stamp nothing per read, so the kernel's own account
// of the client socket counts too.
func (pc *proxyConn) checkIdle() {
	quiet := time.Since(epoch) - time.Duration(pc.last.Load())
	if kq, ok := kernelQuiet(pc.client); ok && kq < quiet {
		quiet = kq
	}
	pc.mu.Lock()
	if pc.done {
		pc.mu.Unlock()
		return
	}
	if left := pc.p.opts.IdleTimeout - quiet; left > 0 {
		pc.idle.Reset(left)
		pc.mu.Unlock()
		return
	}
	pc.mu.Unlock()
	pc.p.log.Debug().Dur("idle", quiet).Msg("closing idle connection")
	pc.abort()
}

// abort ends the connection both ways now, with a reset to the client.
func (pc *proxyConn) abort() {
	pc.aborted.Store(true)
	pc.mu.Lock()
	t := pc.target
	pc.mu.Unlock()
	_ = (&clientConn{Conn: pc.client, pc: pc}).Close()
	if t != nil {
		_ = t.Close()
	}
}

// finish runs when go-socks5 is done with the connection.
func (pc *proxyConn) finish() {
	pc.mu.Lock()
	pc.done = true
	if pc.idle != nil {
		pc.idle.Stop()
	}
	t := pc.target
	pc.mu.Unlock()
	if t != nil {
		_ = t.Close()
	}
	_ = (&clientConn{Conn: pc.client, pc: pc}).Close()
}

// relay moves src to dst until EOF: between two TCP sockets (direct mode)
// with copyTCP, otherwise pumped through a buffer. A clean EOF returns
// nil; any other failure marks the connection aborted so both ends get a
// reset rather than a FIN that would pass a cut-off transfer for a
// complete one.
func (pc *proxyConn) relay(dst, src net.Conn, lost func() bool) (int64, error) {
	if d, ok := dst.(*net.TCPConn); ok {
		if s, ok := src.(*net.TCPConn); ok {
			pc.touch()
			n, err := copyTCP(d, s)
			pc.touch()
			if err != nil {
				pc.aborted.Store(true)
			}
			return n, err
		}
	}
	return pc.pump(dst, src, lost)
}

// copyTCP is direct mode's relay: plain reads and writes, with nothing
// done per read beyond choosing the buffer (idleness is the kernel's own
// account, kernelQuiet; the count is the copy's). A connection starts
// with a small buffer and takes a 1 MiB one while reads fill what they
// are given (a bulk transfer: each read then drains all the socket holds,
// each write hands it all on), and gives it back once the flow slows to
// a trickle, so an idle or chatty connection holds 32 KiB a direction.
//
// Not splice(2): measured with curl through a real web server
// (BenchmarkEgressCurl), a splice relay moved uploads at 0.88x
// `socat -b 262144` and downloads at 0.66-1.3x on this kind of machine
// (2 vCPUs, paravirtualised), for all its saved copies; 1 MiB copies kept
// up with socat both ways for about the same CPU per byte.
func copyTCP(dst, src *net.TCPConn) (int64, error) {
	small := smallBufs.Get().(*[]byte)
	defer smallBufs.Put(small)
	var big *[]byte
	defer func() {
		if big != nil {
			hugeBufs.Put(big)
		}
	}()
	buf := *small
	var n int64
	for {
		nr, er := src.Read(buf)
		if nr > 0 {
			nw, ew := dst.Write(buf[:nr])
			n += int64(nw)
			if ew != nil {
				return n, ew
			}
		}
		if er != nil {
			if er == io.EOF {
				return n, nil
			}
			return n, er
		}
		switch {
		case big == nil && nr == len(buf):
			big = hugeBufs.Get().(*[]byte)
			buf = *big
		case big != nil && nr < smallBufSize/2:
			hugeBufs.Put(big)
			big, buf = nil, *small
		}
	}
}

// pump is relay's user-space path, stamping activity as bytes move.
func (pc *proxyConn) pump(dst, src net.Conn, lost func() bool) (int64, error) {
	pool := &smallBufs
	bp := pool.Get().(*[]byte)
	defer func() { pool.Put(bp) }()
	buf := *bp
	var n int64
	for {
		nr, er := src.Read(buf)
		if nr == len(buf) && pool == &smallBufs {
			big := bigBufs.Get().(*[]byte)
			copy(*big, buf[:nr])
			smallBufs.Put(bp)
			pool, bp, buf = &bigBufs, big, *big
		}
		if nr > 0 {
			pc.touch()
			nw, ew := dst.Write(buf[:nr])
			n += int64(nw)
			if ew != nil {
				pc.aborted.Store(true)
				return n, ew
			}
			pc.touch()
		}
		if er == io.EOF && (lost == nil || !lost()) {
			return n, nil
		}
		if er != nil {
			if er == io.EOF {
				er = errTunnelLost
			}
			pc.aborted.Store(true)
			return n, er
		}
	}
}

// clientConn is the client side as go-socks5 sees it.
type clientConn struct {
	net.Conn
	pc *proxyConn
}

// WriteTo carries client→target. go-socks5 copies from a bufio.Reader over
// this conn, and bufio hands the copy to WriteTo after its buffered bytes.
func (c *clientConn) WriteTo(w io.Writer) (int64, error) {
	if t, ok := w.(*targetConn); ok {
		return c.pc.relay(t.Conn, c.Conn, nil)
	}
	return io.Copy(w, struct{ io.Reader }{c.Conn})
}

// CloseWrite passes the target's EOF on as a TCP half-close. go-socks5
// calls it after a failed copy too; then Close's reset must come first, or
// the client would take the FIN for the end of a complete transfer.
func (c *clientConn) CloseWrite() error {
	if c.pc.aborted.Load() {
		return c.Close()
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close resets instead of closing politely when the connection was aborted.
func (c *clientConn) Close() error {
	if c.pc.aborted.Load() {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	return c.Conn.Close()
}

// targetConn is the target side: a TCP conn (direct) or a yamux stream
// (tunnel).
type targetConn struct {
	net.Conn
	pc     *proxyConn
	stream *yamux.Stream // nil in direct mode
	sess   *agentSession // the stream's session; nil in direct mode
	once   sync.Once     // closes the stream once
	// readMu makes a yamux stream's reads one at a time: the relay's and
	// an aborted stream's drain in closeStream may overlap, and yamux's
	// Stream.Read is not safe for two readers (Read takes stateLock then
	// recvLock, its window update recvLock then stateLock: two readers on
	// a closing stream deadlock, as a CI run under load showed).
	readMu sync.Mutex
}

// serialReader reads a stream under its targetConn's readMu.
type serialReader struct {
	net.Conn
	mu *sync.Mutex
}

func (r serialReader) Read(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Conn.Read(b)
}

// reader is what reads the target: the stream under readMu, or the TCP
// conn itself.
func (t *targetConn) reader() net.Conn {
	if t.stream != nil {
		return serialReader{Conn: t.Conn, mu: &t.readMu}
	}
	return t.Conn
}

// Read reads the target (one reader at a time on a stream).
func (t *targetConn) Read(b []byte) (int, error) { return t.reader().Read(b) }

// LocalAddr is always a *net.TCPAddr: go-socks5 type-asserts it for its
// reply and panics on anything else (a yamux stream's address is not one).
func (t *targetConn) LocalAddr() net.Addr {
	if a, ok := t.Conn.LocalAddr().(*net.TCPAddr); ok {
		return a
	}
	return &net.TCPAddr{IP: net.IPv4zero}
}

// WriteTo carries target→client (io.Copy prefers the source's WriteTo).
func (t *targetConn) WriteTo(w io.Writer) (int64, error) {
	var lost func() bool
	if t.stream != nil {
		lost = t.stream.Session().IsClosed
	}
	if c, ok := w.(*clientConn); ok {
		return t.pc.relay(c.Conn, t.reader(), lost)
	}
	return io.Copy(w, struct{ io.Reader }{t.reader()})
}

// CloseWrite half-closes: TCP's own, or a yamux FIN (a yamux stream's Close
// only stops our writes; the peer's bytes still arrive).
func (t *targetConn) CloseWrite() error {
	if t.pc.aborted.Load() {
		return t.Close()
	}
	if t.stream != nil {
		return t.stream.Close()
	}
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close ends both ways. A yamux stream's Close is only a half-close, so the
// deadline is what wakes a read still waiting on it. An aborted stream is
// reset through the control stream first (wire.go), and its FIN waits for
// the agent's, so the agent's target sees a reset, never a clean end.
func (t *targetConn) Close() error {
	if t.stream != nil {
		t.once.Do(t.closeStream)
		return nil
	}
	if t.pc.aborted.Load() {
		if tc, ok := t.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	return t.Conn.Close()
}

func (t *targetConn) closeStream() {
	defer t.sess.unregister(t.stream.StreamID())
	if t.pc.aborted.Load() && !t.pc.remoteReset.Load() && t.sess.sendReset(t.stream.StreamID()) {
		_ = t.stream.SetWriteDeadline(time.Now())
		_ = t.stream.SetReadDeadline(time.Now().Add(resetWait))
		_, _ = io.Copy(io.Discard, struct{ io.Reader }{t.reader()})
	}
	_ = t.stream.SetDeadline(time.Now())
	_ = t.stream.Close()
}

// socksLog routes go-socks5's log.Logger lines to zerolog at debug level.
func (p *Proxy) socksLog() *log.Logger {
	p.socksLogOnce.Do(func() {
		p.socksLogger = log.New(logWriter{p.log.With().Str("lib", "go-socks5").Logger()}, "", 0)
	})
	return p.socksLogger
}

// kernelQuiet is how long ago the kernel last sent or received data on c,
// when c is a TCP socket (TCP_INFO's last_data_sent and last_data_recv).
func kernelQuiet(c net.Conn) (time.Duration, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var (
		info *unix.TCPInfo
		gerr error
	)
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0, false
	}
	return time.Duration(min(info.Last_data_recv, info.Last_data_sent)) * time.Millisecond, true
}

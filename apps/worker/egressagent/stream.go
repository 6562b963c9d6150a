package egressagent

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
	"github.com/open-bot/computer/pkg/shared/egresswire"
)

// A copy starts with a small buffer, as io.Copy's, and moves to a big one
// once a read fills it (as botd's does): an idle or chatty connection holds
// 32 KiB a direction, a bulk transfer makes an eighth of the writes.
const (
	smallBufSize = 32 * 1024
	bigBufSize   = 256 * 1024
)

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, smallBufSize); return &b }}
	bigBufs   = sync.Pool{New: func() any { b := make([]byte, bigBufSize); return &b }}
)

// epoch makes activity stamps monotonic.
var epoch = time.Now()

// resetWait bounds how long a stream we reset waits for botd's close.
const resetWait = 5 * time.Second

// sessionState is what one session's streams share: the control stream and
// the relay of each open stream id.
type sessionState struct {
	// mu guards ctrl and relays.
	mu     sync.Mutex
	ctrl   *yamux.Stream
	relays map[uint32]*relayState
}

// sendReset asks botd to reset stream id; false if it cannot be asked (no
// control stream yet, or the session is gone).
func (ss *sessionState) sendReset(id uint32) bool {
	ss.mu.Lock()
	ctrl := ss.ctrl
	ss.mu.Unlock()
	if ctrl == nil {
		return false
	}
	_ = ctrl.SetWriteDeadline(time.Now().Add(resetWait))
	return egresswire.WriteReset(ctrl, id) == nil
}

// serveControl reads botd's reset requests until the session ends.
func (ss *sessionState) serveControl(st *yamux.Stream) {
	_ = st.SetDeadline(time.Time{})
	ss.mu.Lock()
	ss.ctrl = st
	ss.mu.Unlock()
	for {
		id, err := egresswire.ReadReset(st)
		if err != nil {
			abortStream(st)
			return
		}
		ss.mu.Lock()
		r := ss.relays[id]
		ss.mu.Unlock()
		if r != nil {
			r.abort(true)
		}
	}
}

// serveStream reads the target from the header, dials it here, answers with
// a status byte and relays until both sides are done.
func (a *agent) serveStream(ctx context.Context, ss *sessionState, st *yamux.Stream) {
	_ = st.SetDeadline(time.Now().Add(a.o.HeaderTimeout))
	addr, err := egresswire.ReadHeader(st)
	if errors.Is(err, egresswire.ErrControl) {
		ss.serveControl(st)
		return
	}
	if err != nil {
		if errors.Is(err, egresswire.ErrBadHeader) {
			_, _ = st.Write([]byte{egresswire.StatusBadReq})
		}
		a.log.Debug().Err(err).Msg("bad stream header")
		abortStream(st)
		return
	}
	_ = st.SetDeadline(time.Time{})
	dctx, cancel := context.WithTimeout(ctx, a.o.DialTimeout)
	target, err := a.o.Dial(dctx, "tcp", addr)
	cancel()
	if err != nil {
		status := egresswire.DialStatus(err)
		if errors.Is(err, egresspolicy.ErrRefused) {
			status = egresswire.StatusDenied
		}
		a.log.Debug().Str("target", addr).Err(err).Msg("dial failed")
		_ = st.SetWriteDeadline(time.Now().Add(a.o.HeaderTimeout))
		_, _ = st.Write([]byte{status})
		_ = st.Close()
		_ = st.SetDeadline(time.Now())
		return
	}
	// Registered before botd hears "ok", so a reset botd sends at once
	// finds the relay.
	r := &relayState{ss: ss, st: st, target: target}
	id := st.StreamID()
	ss.mu.Lock()
	ss.relays[id] = r
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		delete(ss.relays, id)
		ss.mu.Unlock()
	}()
	_ = st.SetWriteDeadline(time.Now().Add(a.o.HeaderTimeout))
	if _, err := st.Write([]byte{egresswire.StatusOK}); err != nil {
		_ = target.Close()
		abortStream(st)
		return
	}
	_ = st.SetWriteDeadline(time.Time{})
	r.run(a.o.IdleTimeout)
}

// abortStream ends a stream both ways: yamux's Close is only a half-close,
// so the deadline wakes anything still waiting on it.
func abortStream(st *yamux.Stream) {
	_ = st.SetDeadline(time.Now())
	_ = st.Close()
}

// run copies both ways with half-close: an EOF from one side becomes a
// FIN on the other. A broken side (or the tunnel lost under the stream)
// aborts both: a reset to the target, and one asked of botd for its
// client. No bytes either way for idle aborts too.
func (r *relayState) run(idle time.Duration) {
	st, target := r.st, r.target
	r.touch()
	// Armed only once stored, so checkIdle always finds it.
	timer := time.AfterFunc(time.Hour, func() { r.checkIdle(idle) })
	timer.Stop()
	r.timer.Store(timer)
	timer.Reset(idle)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.pump(st, target, nil); err == nil {
			_ = st.Close() // target said EOF: FIN to botd
		} else {
			r.abort(false)
		}
	}()
	if err := r.pump(target, st, st.Session().IsClosed); err == nil {
		if r.aborted.Load() {
			// botd closed after our reset request: nothing to pass on.
		} else if cw, ok := target.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	} else {
		r.abort(false)
	}
	wg.Wait()
	r.done.Store(true)
	timer.Stop()
	_ = target.Close()
	if r.asked.Load() {
		// We asked botd to reset: wait (bounded) for its close, so our FIN
		// cannot overtake the reset.
		_, _ = io.Copy(io.Discard, st)
	}
	abortStream(st)
}

type relayState struct {
	ss      *sessionState
	asked   atomic.Bool // botd was asked to reset the stream
	st      *yamux.Stream
	target  net.Conn
	last    atomic.Int64
	done    atomic.Bool
	aborted atomic.Bool
	timer   atomic.Pointer[time.Timer]
}

func (r *relayState) touch() { r.last.Store(int64(time.Since(epoch))) }

func (r *relayState) checkIdle(idle time.Duration) {
	if r.done.Load() {
		return
	}
	quiet := time.Since(epoch) - time.Duration(r.last.Load())
	if left := idle - quiet; left > 0 {
		r.timer.Load().Reset(left)
		return
	}
	r.abort(false)
}

// abort resets the target. remote is true when botd asked for it; then the
// stream just closes. Otherwise botd is asked to reset its client too, and
// the stream stays open (reads bounded by resetWait) until botd closes it.
func (r *relayState) abort(remote bool) {
	if r.aborted.Swap(true) {
		return
	}
	if tc, ok := r.target.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = r.target.Close()
	if !remote && r.ss.sendReset(r.st.StreamID()) {
		r.asked.Store(true)
		_ = r.st.SetWriteDeadline(time.Now())
		_ = r.st.SetReadDeadline(time.Now().Add(resetWait))
		return
	}
	abortStream(r.st)
}

var errTunnelLost = errors.New("egress tunnel lost")

// pump copies src to dst. A clean EOF is nil; an EOF from a stream whose
// session died is errTunnelLost, so the target sees a reset, not a FIN.
func (r *relayState) pump(dst io.Writer, src io.Reader, lost func() bool) error {
	pool := &smallBufs
	bp := pool.Get().(*[]byte)
	defer func() { pool.Put(bp) }()
	buf := *bp
	for {
		nr, er := src.Read(buf)
		if nr == len(buf) && pool == &smallBufs {
			big := bigBufs.Get().(*[]byte)
			copy(*big, buf[:nr])
			smallBufs.Put(bp)
			pool, bp, buf = &bigBufs, big, *big
		}
		if nr > 0 {
			r.touch()
			if _, ew := dst.Write(buf[:nr]); ew != nil {
				return ew
			}
			r.touch()
		}
		if er == io.EOF && (lost == nil || !lost()) {
			return nil
		}
		if er != nil {
			if er == io.EOF {
				return errTunnelLost
			}
			return er
		}
	}
}

// Package wsrelay copies websocket messages between two connections, for the
// worker's relays to botd (dashboard thumbnails, control links, CDP).
package wsrelay

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// copyBuf is the most of one message the relay holds at a time.
const copyBuf = 32 << 10

// WriteTimeout bounds how long Relay waits for one side to take one
// message: a peer that stops reading would otherwise hold the relay (and
// whatever the caller holds for it, a lease) while the other side's close
// goes unread.
const WriteTimeout = time.Minute

// closeWait is how long Relay waits, after a side failed to take a
// message, for that side's read to say how it ended before dropping it.
const closeWait = 5 * time.Second

// End is how a relay ended.
type End struct {
	// From is the connection whose read ended first (a or b); nil when
	// ctx ended the relay.
	From *websocket.Conn
	// Status and Reason are From's close frame; Status is -1 when it ended
	// without one (dropped, its read limit exceeded, ctx).
	Status websocket.StatusCode
	Reason string
}

// Pipe copies messages both ways until either side ends or ctx is done; it
// closes neither connection, so the caller can say why it ended (the other
// side's read is cut short, which drops that connection). A message is
// streamed through, never held whole: a machine's side may have no read
// limit (RFB updates are large) and its message sizes cost the worker no
// memory (issue 36); each side's read limit still applies.
func Pipe(ctx context.Context, a, b *websocket.Conn) End {
	return pipe(ctx, a, b, false)
}

// Relay is Pipe that carries the end through, for a relay that must look
// like one connection to both ends (CDP clients read botd's close reason):
// when one side closes, the other is closed with the same status and
// reason; one that ends without a close frame closes the other with
// StatusGoingAway. A side that takes no message for WriteTimeout is
// dropped. It returns once both connections are closed; ctx ending drops
// both without a close frame.
func Relay(ctx context.Context, a, b *websocket.Conn) End {
	return pipe(ctx, a, b, true)
}

func pipe(ctx context.Context, a, b *websocket.Conn, carry bool) End {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once sync.Once
		end  End
	)
	cp := func(dst, src *websocket.Conn) {
		buf := make([]byte, copyBuf)
		// ended is src's read ending: the first to end says how.
		ended := func(err error) {
			e := End{From: src, Status: websocket.CloseStatus(err)}
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				e.Reason = ce.Reason
			}
			if ctx.Err() != nil {
				e = End{Status: -1}
			}
			first := false
			once.Do(func() { end, first = e, true })
			if first && carry && e.From != nil {
				closeLike(dst, e)
			}
			cancel()
		}
		for {
			typ, r, err := src.Reader(ctx)
			if err != nil {
				ended(err)
				return
			}
			rd := &readErr{r: r}
			if err := write(ctx, dst, typ, rd, buf, carry); err != nil {
				if rd.err != nil && rd.err != io.EOF {
					// src failed mid-message (e.g. over its read limit,
					// which closed it with 1009).
					ended(rd.err)
					return
				}
				if carry {
					// dst is gone or too slow: its own read (the other
					// copy) reports how it ended, its close frame too
					// when its peer sent one; dropped if it has not
					// within closeWait.
					drop := time.AfterFunc(closeWait, func() { _ = dst.CloseNow() })
					<-ctx.Done()
					drop.Stop()
					return
				}
				cancel()
				return
			}
		}
	}
	if !carry {
		go cp(b, a)
		cp(a, b)
		return end
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cp(b, a)
	}()
	cp(a, b)
	wg.Wait()
	return end
}

// write copies one message from r to dst; carry bounds it by WriteTimeout.
func write(ctx context.Context, dst *websocket.Conn, typ websocket.MessageType, r io.Reader, buf []byte, carry bool) error {
	if carry {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, WriteTimeout)
		defer cancel()
	}
	w, err := dst.Writer(ctx, typ)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(w, r, buf); err != nil {
		return err
	}
	return w.Close()
}

// readErr remembers the error its reader returned.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// closeLike closes c the way e's side closed: its status and reason
// (a close frame without a status is sent as one), else StatusGoingAway.
func closeLike(c *websocket.Conn, e End) {
	if e.Status == -1 {
		_ = c.Close(websocket.StatusGoingAway, "the other side of the relay went away")
		return
	}
	_ = c.Close(e.Status, e.Reason)
}

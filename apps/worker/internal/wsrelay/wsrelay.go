// Package wsrelay copies websocket messages between two connections, for the
// worker's relays to botd (dashboard thumbnails, control links).
package wsrelay

import (
	"context"
	"io"

	"github.com/coder/websocket"
)

// copyBuf is the most of one message the relay holds at a time.
const copyBuf = 32 << 10

// Pipe copies messages both ways until either side ends or ctx is done; it
// closes neither connection, so the caller can say why it ended. A message
// is streamed through, never held whole: a machine's side may have no read
// limit (RFB updates are large) and its message sizes cost the worker no
// memory (issue 36); each side's read limit still applies.
func Pipe(ctx context.Context, a, b *websocket.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cp := func(dst, src *websocket.Conn) {
		defer cancel()
		buf := make([]byte, copyBuf)
		for {
			typ, r, err := src.Reader(ctx)
			if err != nil {
				return
			}
			w, err := dst.Writer(ctx, typ)
			if err != nil {
				return
			}
			if _, err := io.CopyBuffer(w, r, buf); err != nil {
				return
			}
			if err := w.Close(); err != nil {
				return
			}
		}
	}
	go cp(b, a)
	cp(a, b)
}

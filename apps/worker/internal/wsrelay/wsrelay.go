// Package wsrelay copies websocket messages between two connections, for the
// worker's relays to botd (dashboard thumbnails, control links).
package wsrelay

import (
	"context"

	"github.com/coder/websocket"
)

// Pipe copies messages both ways until either side ends or ctx is done; it
// closes neither connection, so the caller can say why it ended.
func Pipe(ctx context.Context, a, b *websocket.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cp := func(dst, src *websocket.Conn) {
		defer cancel()
		for {
			typ, msg, err := src.Read(ctx)
			if err != nil {
				return
			}
			if err := dst.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	}
	go cp(b, a)
	cp(a, b)
}

package codexrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
)

// NewStream speaks JSON-RPC over rwc as newline-delimited JSON (Codex
// app-server's stdio transport: `codex app-server` started with its stdin
// and stdout streamed, as a sandbox's process API gives them). The caps
// are the websocket's: a line longer than MaxMessage ends the connection.
// Closing the Conn closes rwc.
func NewStream(rwc io.ReadWriteCloser, h Handler) *Conn {
	cctx, cancel := context.WithCancel(context.Background())
	c := &Conn{stream: rwc, lines: bufio.NewReaderSize(rwc, 64<<10), handler: h, ctx: cctx, cancel: cancel, pending: map[string]chan message{}, done: make(chan struct{})}
	go c.readLoop()
	return c
}

// readLine reads one JSON line into buf (reused) under MaxMessage; an
// empty line is skipped.
func (c *Conn) readLine(buf *bytes.Buffer) ([]byte, error) {
	for {
		buf.Reset()
		for {
			frag, err := c.lines.ReadSlice('\n')
			buf.Write(frag)
			if int64(buf.Len()) > MaxMessage+1 {
				return nil, Limitf("the computer sent a JSON-RPC message of more than %s; the cap is %s", Size(int64(buf.Len())), Size(MaxMessage))
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err == io.EOF && buf.Len() > 0 {
				break
			}
			return nil, err
		}
		b := bytes.TrimSpace(buf.Bytes())
		if len(b) > 0 {
			return b, nil
		}
	}
}

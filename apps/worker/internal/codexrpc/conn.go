// Package codexrpc speaks Codex app-server's JSON-RPC over a websocket (botd's
// /agent relay): calls with ids, notifications, and answers to the server's
// own requests (tool calls, approvals, user input) so a turn never stalls.
package codexrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Handler answers server requests and receives notifications. HandleRequest
// runs on its own goroutine (a tool call may take long); its result, or its
// error as a JSON-RPC error, is sent back.
type Handler interface {
	HandleRequest(ctx context.Context, method string, params json.RawMessage) (any, error)
	HandleNotification(method string, params json.RawMessage)
}

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *RPCError       `json:"error,omitempty"`
}

// Conn is one app-server connection.
type Conn struct {
	ws *websocket.Conn
	// stream, when set instead of ws, is a newline-delimited JSON
	// connection (NewStream) read through lines.
	stream io.ReadWriteCloser
	lines  *bufio.Reader

	handler Handler
	nextID  atomic.Int64
	ctx     context.Context
	cancel  context.CancelFunc

	// mu guards pending and err.
	mu      sync.Mutex
	pending map[string]chan message
	err     error
	done    chan struct{}
	writeMu sync.Mutex // writeMu serializes websocket writes
	// inflight counts server requests being answered (MaxInflight).
	inflight atomic.Int32
}

// ErrClosed is returned by calls on a closed connection.
var ErrClosed = errors.New("codex app-server connection closed")

// Dial connects to url (ws://…/agent) with header (Authorization) and starts
// reading. h may be nil (requests are then refused with an error).
func Dial(ctx context.Context, url string, header http.Header, h Handler) (*Conn, error) {
	return DialClient(ctx, url, header, nil, h)
}

// DialClient is Dial through hc (nil: http.DefaultClient), the only client
// that reaches url when a vendor's in-process forwarder serves it.
func DialClient(ctx context.Context, url string, header http.Header, hc *http.Client, h Handler) (*Conn, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header, HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("dial codex app-server: %w", err)
	}
	// The library's limit is only the backstop of readMessage's own cap:
	// an oversized message is read up to maxDrain to say its size.
	ws.SetReadLimit(maxDrain)
	cctx, cancel := context.WithCancel(context.Background())
	c := &Conn{ws: ws, handler: h, ctx: cctx, cancel: cancel, pending: map[string]chan message{}, done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// Done is closed when the connection ends; Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while open).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection.
func (c *Conn) Close() error {
	c.cancel()
	if c.stream != nil {
		return c.stream.Close()
	}
	return c.ws.Close(websocket.StatusNormalClosure, "")
}

func (c *Conn) write(ctx context.Context, m any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.stream != nil {
		_, err := c.stream.Write(append(b, '\n'))
		return err
	}
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// Call sends a request and decodes its result into out (nil to discard).
func (c *Conn) Call(ctx context.Context, method string, params, out any) error {
	id := strconv.FormatInt(c.nextID.Add(1), 10)
	ch := make(chan message, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.write(ctx, map[string]any{"id": json.RawMessage(id), "method": method, "params": params}); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %w", method, m.Error)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				return fmt.Errorf("%s: decode result: %w", method, err)
			}
		}
		return nil
	case <-c.done:
		return fmt.Errorf("%s: %w", method, c.Err())
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Notify sends a notification.
func (c *Conn) Notify(ctx context.Context, method string, params any) error {
	m := map[string]any{"method": method}
	if params != nil {
		m["params"] = params
	}
	return c.write(ctx, m)
}

func (c *Conn) readLoop() {
	var err error
	defer func() {
		c.mu.Lock()
		c.err = fmt.Errorf("%w: %w", ErrClosed, err)
		c.mu.Unlock()
		c.cancel()
		if _, ok := AsLimit(err); ok {
			// No close handshake with a peer that broke a cap: it may
			// still be sending.
			if c.stream != nil {
				_ = c.stream.Close()
			} else {
				_ = c.ws.CloseNow()
			}
		}
		close(c.done)
	}()
	var buf bytes.Buffer
	for {
		var b []byte
		if b, err = c.readMessage(&buf); err != nil {
			return
		}
		var m message
		if jerr := json.Unmarshal(b, &m); jerr != nil {
			continue // not JSON-RPC; nothing to answer
		}
		if err = checkMessage(m); err != nil {
			return
		}
		switch {
		case m.Method != "" && len(m.ID) > 0:
			if c.inflight.Add(1) > MaxInflight {
				err = Limitf("the computer had more than %d requests waiting for the worker's answer; the cap is %d", MaxInflight, MaxInflight)
				return
			}
			go c.answer(m)
		case m.Method != "":
			if c.handler != nil {
				c.handler.HandleNotification(m.Method, m.Params)
			}
		case len(m.ID) > 0:
			c.mu.Lock()
			ch := c.pending[string(m.ID)]
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

// readMessage reads one message into buf (reused) under MaxMessage. An
// oversized message is read on, up to maxDrain, and dropped, so the error
// can say how big it was.
func (c *Conn) readMessage(buf *bytes.Buffer) ([]byte, error) {
	if c.stream != nil {
		return c.readLine(buf)
	}
	_, rd, err := c.ws.Reader(c.ctx)
	if err != nil {
		if errors.Is(err, websocket.ErrMessageTooBig) {
			return nil, Limitf("the computer sent a JSON-RPC message of more than %s; the cap is %s", Size(maxDrain), Size(MaxMessage))
		}
		return nil, err
	}
	buf.Reset()
	n, err := buf.ReadFrom(io.LimitReader(rd, MaxMessage+1))
	if err != nil {
		return nil, err
	}
	if n <= MaxMessage {
		return buf.Bytes(), nil
	}
	// A peer that trickles the rest is not waited for long.
	stop := time.AfterFunc(drainTime, func() { _ = c.ws.CloseNow() })
	more, err := io.Copy(io.Discard, rd)
	stop.Stop()
	buf.Reset()
	switch {
	case errors.Is(err, websocket.ErrMessageTooBig):
		return nil, Limitf("the computer sent a JSON-RPC message of more than %s; the cap is %s", Size(maxDrain), Size(MaxMessage))
	case err != nil:
		return nil, Limitf("the computer sent a JSON-RPC message of at least %s; the cap is %s", Size(n+more), Size(MaxMessage))
	}
	return nil, Limitf("the computer sent a %s JSON-RPC message; the cap is %s", Size(n+more), Size(MaxMessage))
}

// checkMessage applies the caps on a message's parts.
func checkMessage(m message) error {
	if len(m.Method) > MaxMethod {
		return Limitf("the computer sent a JSON-RPC method name of %s; the cap is %s", Size(int64(len(m.Method))), Size(MaxMethod))
	}
	if len(m.ID) > MaxID {
		return Limitf("the computer sent a JSON-RPC id of %s; the cap is %s", Size(int64(len(m.ID))), Size(MaxID))
	}
	return nil
}

// answer runs the handler for a server request and replies.
func (c *Conn) answer(m message) {
	defer c.inflight.Add(-1)
	var (
		res any
		err error
	)
	if c.handler == nil {
		err = fmt.Errorf("no handler for %s", m.Method)
	} else {
		res, err = c.safeHandle(m)
	}
	reply := map[string]any{"id": m.ID}
	if err != nil {
		var re *RPCError
		if !errors.As(err, &re) {
			re = &RPCError{Code: -32603, Message: err.Error()}
		}
		reply["error"] = re
	} else {
		reply["result"] = res
	}
	_ = c.write(c.ctx, reply)
}

func (c *Conn) safeHandle(m message) (res any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler for %s panicked: %v", m.Method, v)
		}
	}()
	return c.handler.HandleRequest(c.ctx, m.Method, m.Params)
}

package main

// A raw RFB client over a websocket, enough to prove what a control link
// delivers: a frame, and input that reaches the screen.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

type rfbClient struct {
	ws   *websocket.Conn
	conn net.Conn
	br   *bufio.Reader
	W, H int
}

// dialRFB opens url (ws://…) with subprotocol "binary"; on an HTTP refusal
// it returns the status.
func dialRFB(ctx context.Context, url string) (*rfbClient, int, error) {
	c, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		if res != nil {
			return nil, res.StatusCode, err
		}
		return nil, 0, err
	}
	c.SetReadLimit(64 << 20)
	nc := websocket.NetConn(context.Background(), c, websocket.MessageBinary)
	return &rfbClient{ws: c, conn: nc, br: bufio.NewReaderSize(nc, 1<<20)}, http.StatusSwitchingProtocols, nil
}

func wsURL(httpURL string) string { return "ws" + strings.TrimPrefix(httpURL, "http") }

func (c *rfbClient) Close() {
	c.ws.Close(websocket.StatusNormalClosure, "")
	c.conn.Close()
}

// handshake: version 3.8, security None, shared ClientInit, ServerInit;
// then raw 32-bit pixels.
func (c *rfbClient) handshake() error {
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.conn.SetDeadline(time.Time{})
	ver := make([]byte, 12)
	if _, err := io.ReadFull(c.br, ver); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	if !strings.HasPrefix(string(ver), "RFB ") {
		return fmt.Errorf("not RFB: %q", ver)
	}
	if _, err := c.conn.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	n, err := c.br.ReadByte()
	if err != nil {
		return err
	}
	types := make([]byte, n)
	if _, err := io.ReadFull(c.br, types); err != nil {
		return err
	}
	if !bytes.Contains(types, []byte{1}) {
		return fmt.Errorf("no None security: %v", types)
	}
	if _, err := c.conn.Write([]byte{1}); err != nil {
		return err
	}
	res := make([]byte, 4)
	if _, err := io.ReadFull(c.br, res); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(res) != 0 {
		return errors.New("security failed")
	}
	if _, err := c.conn.Write([]byte{1}); err != nil {
		return err
	}
	si := make([]byte, 24)
	if _, err := io.ReadFull(c.br, si); err != nil {
		return err
	}
	c.W, c.H = int(binary.BigEndian.Uint16(si[0:2])), int(binary.BigEndian.Uint16(si[2:4]))
	name := make([]byte, binary.BigEndian.Uint32(si[20:24]))
	if _, err := io.ReadFull(c.br, name); err != nil {
		return err
	}
	pf := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	enc := []byte{2, 0, 0, 1, 0, 0, 0, 0} // raw only
	_, err = c.conn.Write(append(pf, enc...))
	return err
}

func (c *rfbClient) request(incremental bool, x, y, w, h int) error {
	b := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if incremental {
		b[1] = 1
	}
	binary.BigEndian.PutUint16(b[2:], uint16(x))
	binary.BigEndian.PutUint16(b[4:], uint16(y))
	binary.BigEndian.PutUint16(b[6:], uint16(w))
	binary.BigEndian.PutUint16(b[8:], uint16(h))
	_, err := c.conn.Write(b)
	return err
}

func (c *rfbClient) pointer(mask byte, x, y int) error {
	b := []byte{5, mask, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], uint16(x))
	binary.BigEndian.PutUint16(b[4:], uint16(y))
	_, err := c.conn.Write(b)
	return err
}

func (c *rfbClient) typeText(s string) error {
	for _, r := range s {
		for _, down := range []byte{1, 0} {
			b := []byte{4, down, 0, 0, 0, 0, 0, 0}
			binary.BigEndian.PutUint32(b[4:], uint32(r))
			if _, err := c.conn.Write(b); err != nil {
				return err
			}
		}
	}
	return nil
}

type rect struct {
	X, Y, W, H int
	Pix        []byte
}

// readUpdate reads server messages until one FramebufferUpdate was read.
func (c *rfbClient) readUpdate(timeout time.Duration) ([]rect, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
	defer c.conn.SetReadDeadline(time.Time{})
	for {
		t, err := c.br.ReadByte()
		if err != nil {
			return nil, err
		}
		switch t {
		case 0:
			h := make([]byte, 3)
			if _, err := io.ReadFull(c.br, h); err != nil {
				return nil, err
			}
			var rects []rect
			for i := 0; i < int(binary.BigEndian.Uint16(h[1:3])); i++ {
				rh := make([]byte, 12)
				if _, err := io.ReadFull(c.br, rh); err != nil {
					return nil, err
				}
				if enc := int32(binary.BigEndian.Uint32(rh[8:])); enc != 0 {
					return nil, fmt.Errorf("unexpected encoding %d", enc)
				}
				r := rect{X: int(binary.BigEndian.Uint16(rh[0:])), Y: int(binary.BigEndian.Uint16(rh[2:])),
					W: int(binary.BigEndian.Uint16(rh[4:])), H: int(binary.BigEndian.Uint16(rh[6:]))}
				r.Pix = make([]byte, r.W*r.H*4)
				if _, err := io.ReadFull(c.br, r.Pix); err != nil {
					return nil, err
				}
				rects = append(rects, r)
			}
			return rects, nil
		case 1:
			h := make([]byte, 5)
			if _, err := io.ReadFull(c.br, h); err != nil {
				return nil, err
			}
			if _, err := io.CopyN(io.Discard, c.br, int64(binary.BigEndian.Uint16(h[3:5]))*6); err != nil {
				return nil, err
			}
		case 2:
		case 3:
			h := make([]byte, 7)
			if _, err := io.ReadFull(c.br, h); err != nil {
				return nil, err
			}
			if _, err := io.CopyN(io.Discard, c.br, int64(binary.BigEndian.Uint32(h[3:7]))); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("unexpected server message %d", t)
		}
	}
}

// fullFrame asks for the whole screen and reads updates until they cover it.
func (c *rfbClient) fullFrame(timeout time.Duration) ([]rect, error) {
	if err := c.request(false, 0, 0, c.W, c.H); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	var all []rect
	area := 0
	for area < c.W*c.H {
		rects, err := c.readUpdate(time.Until(deadline))
		if err != nil {
			return nil, err
		}
		for _, r := range rects {
			area += r.W * r.H
		}
		all = append(all, rects...)
	}
	return all, nil
}

// variance of the frame's grey levels: a drawn screen is far from 0.
func variance(rects []rect) float64 {
	var n, sum, sq float64
	for _, r := range rects {
		for i := 0; i+3 < len(r.Pix); i += 4 * 7 {
			g := (float64(r.Pix[i]) + float64(r.Pix[i+1]) + float64(r.Pix[i+2])) / 3
			n++
			sum += g
			sq += g * g
		}
	}
	if n == 0 {
		return 0
	}
	m := sum / n
	return sq/n - m*m
}

// drain reads (and discards) until the connection ends; it returns the
// error that ended it, or a timeout.
func (c *rfbClient) drain(within time.Duration) error {
	_ = c.conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c.br)
	if err == nil {
		err = io.EOF
	}
	return err
}

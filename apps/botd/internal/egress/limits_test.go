package egress

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/worker/egressagent"
)

// readClosed waits until the server ends c (EOF or reset), returning what it
// sent first.
func readClosed(t *testing.T, c net.Conn, within time.Duration) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %q)", within, b)
	}
	return b
}

func TestBadInputIsRefusedCleanly(t *testing.T) {
	leakCheck(t)
	p := newProxy(t, Options{HandshakeTimeout: 500 * time.Millisecond})
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())
	ph, pl := byte(port>>8), byte(port)
	for _, tc := range []struct {
		name  string
		send  []byte
		close bool   // half-close after sending (a truncated message)
		want  []byte // the reply before the server hangs up
	}{
		{name: "http request", send: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{name: "socks4", send: []byte{4, 1, ph, pl, 127, 0, 0, 1, 0}},
		{name: "tls hello", send: []byte{0x16, 3, 1, 0, 0x2f, 1, 0, 0}},
		{name: "nothing (handshake deadline)"},
		{name: "version only", send: []byte{5}},
		{name: "version only, then EOF", send: []byte{5}, close: true},
		{name: "greeting truncated", send: []byte{5, 3, 0}},
		{name: "no acceptable method", send: []byte{5, 1, 2}, want: []byte{5, 0xff}},
		{name: "request truncated", send: []byte{5, 1, 0, 5, 1, 0, 1, 127, 0}, want: []byte{5, 0}},
		{name: "name truncated", send: []byte{5, 1, 0, 5, 1, 0, 3, 20, 'a', 'b'}, close: true, want: []byte{5, 0}},
		{name: "bind", send: []byte{5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, ph, pl}, want: []byte{5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}},
		{name: "udp associate", send: []byte{5, 1, 0, 5, 3, 0, 1, 127, 0, 0, 1, ph, pl}, want: []byte{5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}},
		{name: "unknown command", send: []byte{5, 1, 0, 5, 9, 0, 1, 127, 0, 0, 1, ph, pl}, want: []byte{5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}},
		{name: "unknown address type", send: []byte{5, 1, 0, 5, 1, 0, 7, 1, 2, 3, 4, ph, pl}, want: []byte{5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0}},
		{name: "wrong request version", send: []byte{5, 1, 0, 4, 1, 0, 1, 127, 0, 0, 1, ph, pl}, want: []byte{5, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", p.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if len(tc.send) > 0 {
				if _, err := c.Write(tc.send); err != nil {
					t.Fatal(err)
				}
			}
			if tc.close {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			if got := readClosed(t, c, 3*time.Second); !bytes.Equal(got, tc.want) {
				t.Fatalf("reply %v, want %v", got, tc.want)
			}
		})
	}
	// The proxy still serves after all that.
	c, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestHandshakeDeadlineDoesNotCutAnEstablishedConnection(t *testing.T) {
	p := newProxy(t, Options{HandshakeTimeout: 500 * time.Millisecond})
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())
	c, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Idle past the handshake deadline on purpose (not a wait for state):
	// a longer pause under load only makes the check stricter.
	time.Sleep(800 * time.Millisecond)
	echoRoundTrip(t, c, []byte("still here"))
}

func echoRoundTrip(t testing.TB, c net.Conn, msg []byte) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // liveness, not speed
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, want %q", got, msg)
	}
}

func TestIdleTimeout(t *testing.T) {
	leakCheck(t)
	idle := time.Second
	p := newProxy(t, Options{IdleTimeout: idle})
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())

	opened := time.Now()
	quiet, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	busy, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// The busy one pings back to back (never a pause near idle, however
	// loaded the machine) until the quiet one is gone and three idle
	// periods have passed.
	var quietGone time.Duration
	deadline := time.Now().Add(60 * time.Second)
	for quietGone == 0 || time.Since(opened) < 3*idle {
		if time.Now().After(deadline) {
			t.Fatalf("the quiet connection is still open after %v", time.Since(opened))
		}
		echoRoundTrip(t, busy, []byte("ping"))
		if quietGone == 0 && closedNow(t, quiet) {
			quietGone = time.Since(opened)
		}
	}
	if quietGone < idle/2 {
		t.Fatalf("the quiet connection closed after %v, before its %v idle timeout", quietGone, idle)
	}
	echoRoundTrip(t, busy, []byte("still here"))
}

// closedNow reports whether the peer has closed c, reading for a moment.
func closedNow(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	var b [64]byte
	n, err := c.Read(b[:])
	if n > 0 {
		t.Fatalf("unexpected bytes %q on a quiet connection", b[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

func TestConnectionCap(t *testing.T) {
	leakCheck(t)
	p := newProxy(t, Options{MaxConns: 3})
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if _, err := socksConnect(p.Addr().String(), "127.0.0.1", port); err == nil {
		t.Fatal("a fourth connection got through a cap of three")
	}
	for _, c := range held {
		echoRoundTrip(t, c, []byte("ok"))
	}
	held[0].Close()
	waitFor(t, 5*time.Second, "a slot to free", func() bool {
		c, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
		if err != nil {
			return false
		}
		echoRoundTrip(t, c, []byte("again"))
		c.Close()
		return true
	})
	for _, c := range held[1:] {
		c.Close()
	}
}

// stuckServer accepts and then neither reads nor writes.
func stuckServer(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln
}

// oneStuckTargetBlocksNothing fills a stuck target's connection (writes
// block), leaves a dial hanging, and checks other connections still work.
func oneStuckTargetBlocksNothing(t *testing.T, proxy string) {
	stuck := stuckServer(t)
	echo := echoServer(t)
	_, sport := splitPort(t, stuck.Addr().String())
	_, eport := splitPort(t, echo.Addr().String())

	sc, err := socksConnect(proxy, "127.0.0.1", sport)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	writing := make(chan struct{})
	var written atomic.Int64
	go func() {
		defer close(writing)
		chunk := make([]byte, 64*1024)
		for {
			n, err := sc.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	// A dial that never answers: the hang-forever name of the test dialer.
	hung := make(chan error, 1)
	go func() {
		c, err := socksConnect(proxy, "hang.test", 1)
		if err == nil {
			c.Close()
		}
		hung <- err
	}()
	// Let the writer fill every buffer: wait until its byte count stops moving.
	var last, still int64 = -1, 0
	deadline := time.Now().Add(60 * time.Second)
	for still < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the stuck target's writer never blocked (%d bytes)", written.Load())
		}
		time.Sleep(100 * time.Millisecond)
		if n := written.Load(); n > 0 && n == last {
			still++
		} else {
			last, still = n, 0
		}
	}

	start := time.Now()
	for i := 0; i < 20; i++ {
		c, err := socksConnect(proxy, "127.0.0.1", eport)
		if err != nil {
			t.Fatal(err)
		}
		echoRoundTrip(t, c, bytes.Repeat([]byte("x"), 100_000))
		c.Close()
	}
	t.Logf("20 round trips beside a stuck target: %v", time.Since(start)) // each one bounded by echoRoundTrip
	select {
	case <-writing:
		t.Fatal("the stuck target's writer was not blocked")
	default:
	}
	sc.Close()
	<-writing
	if err := <-hung; err == nil {
		t.Fatal("the hanging dial succeeded")
	}
}

// hangDial hangs on hang.test until ctx ends and otherwise dials as the agent
// would in tests.
func hangDial(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, _, _ := net.SplitHostPort(addr); host == "hang.test" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return onlyAgentDial(ctx, network, addr)
}

func TestStuckTargetDirect(t *testing.T) {
	p := newProxy(t, Options{Dial: hangDial, DialTimeout: 2 * time.Second})
	oneStuckTargetBlocksNothing(t, p.Addr().String())
}

func TestStuckTargetTunnel(t *testing.T) {
	s := newTunnelSetup(t, Options{DialTimeout: 2 * time.Second}, func(o *egressagent.Options) { o.Dial = hangDial })
	oneStuckTargetBlocksNothing(t, s.p.Addr().String())
}

func TestCloseIsSafeTwiceAndLeavesNothing(t *testing.T) {
	leakCheck(t)
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())
	for _, mode := range []string{ModeDirect, ModeTunnel} {
		t.Run(mode, func(t *testing.T) {
			var p *Proxy
			if mode == ModeTunnel {
				p = newTunnelSetup(t, Options{}, nil).p
			} else {
				p = newProxy(t, Options{})
			}
			open, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
			if err != nil {
				t.Fatal(err)
			}
			defer open.Close()
			echoRoundTrip(t, open, []byte("hi"))
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			readClosed(t, open, 2*time.Second)
			if _, err := net.DialTimeout("tcp", p.Addr().String(), time.Second); err == nil {
				t.Fatal("still listening after Close")
			}
		})
	}
}

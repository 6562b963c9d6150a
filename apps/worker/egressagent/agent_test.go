package egressagent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
	"github.com/open-bot/computer/pkg/shared/egresswire"
)

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rand   float64
		resets map[int]bool // reset before attempt i
		want   []time.Duration
	}{
		{name: "no jitter doubles to the cap", rand: 0,
			want: []time.Duration{250, 500, 1000, 2000, 2000, 2000}},
		{name: "full jitter doubles to the cap", rand: 0.999999999,
			want: []time.Duration{500, 1000, 2000, 4000, 4000, 4000}},
		{name: "reset starts over", rand: 0, resets: map[int]bool{3: true},
			want: []time.Duration{250, 500, 1000, 250, 500, 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := backoff{min: 500 * time.Millisecond, max: 4 * time.Second, rand: func() float64 { return tc.rand }}
			for i, w := range tc.want {
				if tc.resets[i] {
					b.reset()
				}
				got := b.next().Round(time.Millisecond)
				if got != w*time.Millisecond {
					t.Fatalf("attempt %d: %v, want %v", i, got, w*time.Millisecond)
				}
			}
		})
	}
}

func TestBackoffNeverOverflows(t *testing.T) {
	b := backoff{min: time.Second, max: time.Hour, rand: func() float64 { return 1 }}
	for i := 0; i < 100; i++ {
		if d := b.next(); d <= 0 || d > time.Hour {
			t.Fatalf("attempt %d: %v", i, d)
		}
	}
}

func TestTunnelURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:7000":             "ws://h:7000/egress",
		"https://h:7000/":           "wss://h:7000/egress",
		"ws://h/base":               "ws://h/base/egress",
		"wss://h/egress":            "wss://h/egress",
		"http://u:p@h:1/?token=x#f": "ws://h:1/egress",
	} {
		got, err := tunnelURL(in)
		if err != nil || got != want {
			t.Errorf("tunnelURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "h:7000", "ftp://h", "http://"} {
		if _, err := tunnelURL(bad); err == nil {
			t.Errorf("tunnelURL(%q) accepted", bad)
		}
	}
}

func header(addr string) []byte {
	b := []byte{egresswire.Version, 0, 0}
	binary.BigEndian.PutUint16(b[1:], uint16(len(addr)))
	return append(b, addr...)
}

func TestReadHeader(t *testing.T) {
	if got, err := egresswire.ReadHeader(bytes.NewReader(header("example.com:443"))); err != nil || got != "example.com:443" {
		t.Fatalf("%q %v", got, err)
	}
	for name, in := range map[string][]byte{
		"empty":         {},
		"short":         {1, 0},
		"wrong version": append([]byte{2}, header("a:1")[1:]...),
		"too long":      {1, 0xff, 0xff},
		"no port":       header("example.com"),
		"truncated":     header("example.com:443")[:8],
	} {
		if _, err := egresswire.ReadHeader(bytes.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestReadHeaderControl(t *testing.T) {
	if _, err := egresswire.ReadHeader(bytes.NewReader([]byte{1, 0, 0})); !errors.Is(err, egresswire.ErrControl) {
		t.Fatalf("a zero-length header is the control stream, got %v", err)
	}
}

func TestDialStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want byte
	}{
		{nil, egresswire.StatusOK},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, egresswire.StatusRefused},
		{&net.OpError{Op: "dial", Err: syscall.ENETUNREACH}, egresswire.StatusNetUnr},
		{&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}}, egresswire.StatusHostUnr},
		{context.DeadlineExceeded, egresswire.StatusTimedOut},
		{errors.New("odd"), egresswire.StatusFailure},
	} {
		if got := egresswire.DialStatus(tc.err); got != tc.want {
			t.Errorf("egresswire.DialStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// fakeBotd accepts the agent's websocket and hands the test a yamux session
// over it, as botd's /egress does.
func fakeBotd(t *testing.T, token string) (*httptest.Server, <-chan *yamux.Session) {
	t.Helper()
	sessions := make(chan *yamux.Session, 4)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/egress" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":{"code":"unauthorized","message":"missing or invalid bearer token"}}`, http.StatusUnauthorized)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
		cfg := yamux.DefaultConfig()
		cfg.LogOutput = io.Discard
		sess, err := yamux.Client(nc, cfg)
		if err != nil {
			return
		}
		sessions <- sess
		<-sess.CloseChan()
	}))
	t.Cleanup(ts.Close)
	return ts, sessions
}

func openTo(t *testing.T, sess *yamux.Session, addr string) (*yamux.Stream, byte) {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	_ = st.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := st.Write(header(addr)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(st, b[:]); err != nil {
		t.Fatal(err)
	}
	_ = st.SetDeadline(time.Time{})
	return st, b[0]
}

func TestAgentServesStreamsAndReconnects(t *testing.T) {
	g0 := runtime.NumGoroutine()
	ts, sessions := fakeBotd(t, "tok-0123456789abcdef")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{BotdURL: ts.URL, Token: "tok-0123456789abcdef", AllowLoopback: true,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	}()
	sess := <-sessions

	st, status := openTo(t, sess, ln.Addr().String())
	if status != egresswire.StatusOK {
		t.Fatalf("status %d", status)
	}
	msg := []byte("through the agent")
	if _, err := st.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = st.Close() // half-close: the echo server sees EOF and closes
	got, err := io.ReadAll(st)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, %v", got, err)
	}

	// A closed port, and a header the agent refuses.
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	if _, status := openTo(t, sess, closedAddr); status != egresswire.StatusRefused {
		t.Fatalf("closed port: status %d", status)
	}
	if _, status := openTo(t, sess, "no-port"); status != egresswire.StatusBadReq {
		t.Fatalf("bad header: status %d", status)
	}

	// botd drops the session: the agent comes back on its own.
	_ = sess.Close()
	select {
	case sess = <-sessions:
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not reconnect")
	}
	if _, status := openTo(t, sess, ln.Addr().String()); status != egresswire.StatusOK {
		t.Fatalf("after reconnect: status %d", status)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v on cancel", err)
	}
	_ = sess.Close()
	ts.Close()
	ln.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines %d → %d\n%s", g0, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDefaultDialerRefusesLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := Options{}
	o.setDefaults()
	_, err = o.Dial(context.Background(), "tcp", ln.Addr().String())
	if !errors.Is(err, egresspolicy.ErrRefused) {
		t.Fatalf("dial loopback: %v", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if _, err := o.Dial(context.Background(), "tcp", fmt.Sprintf("localhost:%s", port)); !errors.Is(err, egresspolicy.ErrRefused) {
		t.Fatalf("dial localhost: %v", err)
	}
	o = Options{AllowLoopback: true}
	o.setDefaults()
	c, err := o.Dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestRunRejectsBadOptions(t *testing.T) {
	if err := Run(context.Background(), Options{BotdURL: "http://h:1"}); err == nil {
		t.Fatal("empty token accepted")
	}
	if err := Run(context.Background(), Options{BotdURL: "nope", Token: "x"}); err == nil {
		t.Fatal("bad URL accepted")
	}
}

func TestAgentIdleTimeout(t *testing.T) {
	ts, sessions := fakeBotd(t, "tok-0123456789abcdef")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = Run(ctx, Options{BotdURL: ts.URL, Token: "tok-0123456789abcdef", AllowLoopback: true, IdleTimeout: 200 * time.Millisecond})
	}()
	sess := <-sessions
	defer sess.Close()
	st, status := openTo(t, sess, ln.Addr().String())
	if status != egresswire.StatusOK {
		t.Fatalf("status %d", status)
	}
	target := <-accepted
	defer target.Close()
	// Nothing moves: the agent resets its target and ends the stream.
	_ = target.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := target.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("target read after idle: %v, want a reset", err)
	}
	_ = st.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadAll(st); err != nil {
		t.Fatalf("stream after idle: %v", err)
	}
}

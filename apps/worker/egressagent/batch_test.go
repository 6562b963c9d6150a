package egressagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"

	"github.com/open-bot/computer/pkg/shared/egresswire"
)

// recConn records every write made to it.
type recConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *recConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, append([]byte(nil), p...))
	c.mu.Unlock()
	return len(p), nil
}

func (c *recConn) all() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Join(c.writes, nil)
}

// frame builds a websocket frame with an n-byte payload, masked or not, in
// each of the three length encodings.
func frame(n int, masked bool, r *rand.Rand) []byte {
	f := []byte{0x82, 0}
	switch {
	case n < 126:
		f[1] = byte(n)
	case n <= 0xffff:
		f[1] = 126
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f[1] = 127
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	if masked {
		f[1] |= 0x80
		f = binary.BigEndian.AppendUint32(f, r.Uint32())
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.IntN(256))
	}
	return append(f, p...)
}

// The batcher sends each frame whole (one write for a frame up to
// batchMax), never holds a frame's tail once the frame is written, and
// passes everything through unchanged, however the frames are cut up.
func TestFrameBatcherWritesWholeFrames(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 125, 126, 127, 4000, 65535, 65536, 70000, 256 * 1024, 700 * 1024}
	for _, cut := range []int{1, 3, 4096, 1 << 20} {
		rc := &recConn{}
		b := newFrameBatcher(rc)
		// Before arming, writes pass straight through (the handshake).
		hs := []byte("GET /egress HTTP/1.1\r\n\r\n")
		if _, err := b.Write(hs); err != nil {
			t.Fatal(err)
		}
		if len(rc.writes) != 1 {
			t.Fatalf("cut %d: handshake held", cut)
		}
		b.arm()
		var sent []byte
		sent = append(sent, hs...)
		for i, n := range sizes {
			f := frame(n, i%2 == 0, r)
			before := len(rc.writes)
			for off := 0; off < len(f); off += cut {
				if _, err := b.Write(f[off:min(off+cut, len(f))]); err != nil {
					t.Fatal(err)
				}
			}
			sent = append(sent, f...)
			if got := rc.all(); !bytes.Equal(got, sent) {
				t.Fatalf("cut %d, frame of %d: %d bytes on the wire, want %d (a frame's tail is held or bytes changed)", cut, n, len(got), len(sent))
			}
			if want := (len(f) + batchMax - 1) / batchMax; len(rc.writes)-before > want {
				t.Fatalf("cut %d, frame of %d: %d writes, want at most %d", cut, n, len(rc.writes)-before, want)
			}
		}
	}
}

// Through a proxy the bytes under the websocket may be TLS to the proxy,
// so the client is left alone; without one it is a batching copy.
func TestBatchingClientSkipsProxies(t *testing.T) {
	proxied := &http.Client{Transport: &http.Transport{Proxy: func(*http.Request) (*url.URL, error) {
		return url.Parse("http://127.0.0.1:3128")
	}}}
	if got := batchingClient(proxied, "ws://h:7000/egress"); got != proxied {
		t.Fatal("a proxied client was changed")
	}
	plain := &http.Client{Transport: &http.Transport{}}
	got := batchingClient(plain, "ws://h:7000/egress")
	if got == plain || got.Transport.(*http.Transport).DialContext == nil {
		t.Fatal("a direct client does not batch")
	}
	if plain.Transport.(*http.Transport).DialContext != nil {
		t.Fatal("the caller's transport was modified")
	}
}

// A real download through the agent, over ws and over wss: the bytes
// arrive intact and leave the agent in a few large writes rather than
// coder/websocket's 4 KiB ones.
func TestAgentDownloadIsBatched(t *testing.T) {
	const total = 8 << 20
	src, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	data := make([]byte, total)
	dr := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(dr.Uint32())
	}
	go func() {
		for {
			c, err := src.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write(data)
			}()
		}
	}()
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "ws", true: "wss"}[secure]
		t.Run(name, func(t *testing.T) {
			armed := make(chan *frameBatcher, 4)
			armedHook = func(b *frameBatcher) { armed <- b }
			defer func() { armedHook = nil }()
			sessions := make(chan *yamux.Session, 4)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ws, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				cfg := yamux.DefaultConfig()
				cfg.LogOutput = io.Discard
				sess, err := yamux.Client(websocket.NetConn(context.Background(), ws, websocket.MessageBinary), cfg)
				if err != nil {
					return
				}
				sessions <- sess
				<-sess.CloseChan()
			})
			var ts *httptest.Server
			if secure {
				ts = httptest.NewTLSServer(h)
			} else {
				ts = httptest.NewServer(h)
			}
			defer ts.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, Options{BotdURL: ts.URL, Token: "tok-0123456789abcdef", AllowLoopback: true,
					HTTPClient: ts.Client(), MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
			}()
			defer func() { cancel(); <-done }()
			var sess *yamux.Session
			select {
			case sess = <-sessions:
			case <-time.After(10 * time.Second):
				t.Fatal("agent did not connect")
			}
			defer sess.Close()
			var b *frameBatcher
			select {
			case b = <-armed:
			case <-time.After(5 * time.Second):
				t.Fatal("the agent's connection was not batched")
			}
			st, status := openTo(t, sess, src.Addr().String())
			if status != egresswire.StatusOK {
				t.Fatalf("status %d", status)
			}
			_ = st.SetDeadline(time.Now().Add(30 * time.Second))
			w0 := b.writes.Load()
			got, err := io.ReadAll(st)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != total || sha256.Sum256(got) != sha256.Sum256(data) {
				t.Fatalf("downloaded %d bytes, want %d intact", len(got), total)
			}
			// coder/websocket alone makes ≥ total/4096 = 2048 writes.
			if w := b.writes.Load() - w0; w > total/(16<<10) {
				t.Fatalf("%d writes for %d bytes: not batched", w, total)
			}
		})
	}
}

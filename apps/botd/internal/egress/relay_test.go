package egress

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// seeded is a deterministic byte stream (so either end can check it).
func seeded(seed uint64) io.Reader {
	return rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)})
}

// duplexServer reads each connection to EOF while it writes down bytes of
// seeded(2) at the same time; once both are done it sends a trailer, the
// SHA-256 and length of what it read, and closes.
func duplexServer(t testing.TB, down int64) net.Listener {
	t.Helper()
	return serveTCP(t, func(c net.Conn) {
		defer c.Close()
		got := make(chan []byte, 1)
		go func() {
			h := sha256.New()
			n, _ := io.CopyBuffer(h, c, make([]byte, 64*1024))
			got <- binary.BigEndian.AppendUint64(h.Sum(nil), uint64(n))
		}()
		if _, err := io.CopyN(c, seeded(2), down); err != nil {
			return
		}
		_, _ = c.Write(<-got)
	})
}

// The relay after the handshake moves every byte, both ways at once, in
// the order sent: 48 MiB up and 48 MiB down over one connection, in each
// mode, checked by hash at the far end (up) and here (down). A destination
// the policy does not name is still refused and never reached.
func TestRelayMovesEveryByteBothWays(t *testing.T) {
	const size = 48 << 20
	srv := duplexServer(t, size)
	host, port := splitPort(t, srv.Addr().String())
	for _, mode := range []string{ModeDirect, ModeTunnel} {
		t.Run(mode, func(t *testing.T) {
			var proxy string
			if mode == ModeTunnel {
				proxy = newTunnelSetup(t, Options{}, nil).p.Addr().String()
			} else {
				// EGRESS_ALLOW names exactly the server.
				proxy = newProxy(t, Options{Allow: egresspolicy.MustParse(srv.Addr().String())}).Addr().String()
			}
			c, err := socksConnect(proxy, host, port)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			sent := make(chan []byte, 1)
			go func() {
				h := sha256.New()
				_, err := io.CopyN(io.MultiWriter(c, h), seeded(1), size)
				if err != nil {
					t.Error(err)
				}
				_ = c.(*net.TCPConn).CloseWrite()
				sent <- h.Sum(nil)
			}()
			want := sha256.New()
			if _, err := io.CopyN(want, seeded(2), size); err != nil {
				t.Fatal(err)
			}
			got := sha256.New()
			if n, err := io.CopyN(got, c, size); err != nil {
				t.Fatalf("down: %d of %d bytes: %v", n, size, err)
			}
			if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
				t.Fatal("down: the bytes that arrived are not the bytes sent")
			}
			trailer, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("trailer: %v", err)
			}
			if len(trailer) != sha256.Size+8 {
				t.Fatalf("trailer: %d bytes after the download, want %d", len(trailer), sha256.Size+8)
			}
			if n := binary.BigEndian.Uint64(trailer[sha256.Size:]); n != size {
				t.Fatalf("up: the server read %d bytes, want %d", n, size)
			}
			if !bytes.Equal(trailer[:sha256.Size], <-sent) {
				t.Fatal("up: the bytes that arrived are not the bytes sent")
			}
		})
	}
	t.Run("denied", func(t *testing.T) {
		other := duplexServer(t, 1)
		accepted := make(chan struct{}, 1)
		ln := serveTCP(t, func(c net.Conn) { accepted <- struct{}{}; c.Close() })
		proxy := newProxy(t, Options{Allow: egresspolicy.MustParse(other.Addr().String())}).Addr().String()
		_, lport := splitPort(t, ln.Addr().String())
		_, err := socksConnect(proxy, "127.0.0.1", lport)
		var se *socksError
		if !errors.As(err, &se) || !bytes.Contains([]byte{socksNotAllowed, socksHostUnreach, socksRefused}, []byte{se.code}) {
			t.Fatalf("a destination EGRESS_ALLOW does not name: %v, want a SOCKS refusal", err)
		}
		select {
		case <-accepted:
			t.Fatal("the refused destination received a connection")
		case <-time.After(200 * time.Millisecond):
		}
	})
}

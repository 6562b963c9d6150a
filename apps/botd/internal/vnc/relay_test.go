package vnc

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFromClientView feeds one chunk (as one websocket message would
// carry it) through a view relay: the framebuffer request before a key
// event reaches x11vnc at once, the key event and the resize never do.
func TestFromClientView(t *testing.T) {
	up, x11vnc := net.Pipe()
	r := &relay{mode: ModeView, up: up, closed: make(chan struct{})}
	fbur := cat([]byte{3, 0}, be16(0), be16(0), be16(8), be16(8))
	key := cat([]byte{4, 1, 0, 0}, be32(0x61))
	size := cat([]byte{251, 0}, be16(800), be16(600), []byte{1, 0}, make([]byte, 16))
	ptr := cat([]byte{5, 1}, be16(10), be16(20))
	chunk := cat(fbur, key, size, ptr)

	cr, cw := io.Pipe()
	errc := make(chan error, 1)
	cs := newClientStream(cr)
	cs.state = stMessages // after greet
	go func() { errc <- r.fromClient(cs) }()
	go func() { _, _ = cw.Write(chunk) }() // the client then waits: no EOF yet

	want := fbur
	got := make([]byte, len(want))
	_ = x11vnc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadFull(x11vnc, got)
	require.NoError(t, err, "the request was held back behind the dropped input")
	require.Equal(t, want, got)

	// Nothing else arrives, then a garbage byte ends it.
	_ = x11vnc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	n, _ := x11vnc.Read(make([]byte, 1))
	require.Equal(t, 0, n)
	_, _ = cw.Write([]byte{9})
	require.ErrorIs(t, <-errc, errProtocol)
	require.False(t, bytes.Contains(got, key))
}

// TestGreet: botd answers each RFB version a viewer may pick, and hands
// over x11vnc's ServerInit.
func TestGreet(t *testing.T) {
	si := cat(be16(1280), be16(800), make([]byte, 16), be32(4), []byte("test"))
	for _, tc := range []struct {
		client, want []byte
	}{
		{[]byte("RFB 003.008\n\x01\x00"), cat([]byte("RFB 003.008\n"), []byte{1, 1}, be32(0), si)},
		{[]byte("RFB 003.007\n\x01\x00"), cat([]byte("RFB 003.008\n"), []byte{1, 1}, si)},
		{[]byte("RFB 003.003\n\x00"), cat([]byte("RFB 003.008\n"), be32(1), si)},
	} {
		var out bytes.Buffer
		require.NoError(t, greet(&out, newClientStream(bytes.NewReader(tc.client)), si))
		require.Equal(t, tc.want, out.Bytes(), "%q", tc.client[:12])
	}
	for _, bad := range [][]byte{[]byte("GET / HTTP/1.1\r\n"), []byte("RFB 003.008\n\x02"), []byte("RFB 003.008\n")} {
		require.Error(t, greet(io.Discard, newClientStream(bytes.NewReader(bad)), si))
	}
}

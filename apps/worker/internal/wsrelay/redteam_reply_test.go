package wsrelay

// Red-team row of issue 36, row 5: a hostile machine answers a relayed
// viewer (the dashboard's thumbnail, a control link) with one 512 MiB
// websocket message. The relay's machine side has no read limit (RFB
// updates are large), so the relay must stream a message rather than hold
// it: the worker's heap grows by a bounded amount while the viewer still
// gets every byte.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/heapwatch"
)

func TestRedTeamRelayHugeMessage(t *testing.T) {
	const size = 512 << 20
	// The hostile machine: one binary message of size bytes, written in
	// 1 MiB pieces (never held whole).
	machine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		wr, err := c.Writer(r.Context(), websocket.MessageBinary)
		if err != nil {
			return
		}
		chunk := []byte(strings.Repeat("A", 1<<20))
		for n := 0; n < size; n += len(chunk) {
			if _, err := wr.Write(chunk); err != nil {
				return
			}
		}
		_ = wr.Close()
		_, _, _ = c.Read(r.Context()) // until the relay closes
	}))
	defer machine.Close()

	// The worker's relay, as the dashboard runs it.
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up, _, err := websocket.Dial(r.Context(), "ws"+strings.TrimPrefix(machine.URL, "http"), nil)
		if err != nil {
			return
		}
		defer up.CloseNow()
		down, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer down.CloseNow()
		up.SetReadLimit(-1)
		down.SetReadLimit(1 << 20)
		Pipe(r.Context(), down, up)
	}))
	defer relay.Close()

	w := heapwatch.Start(10 * time.Millisecond)

	// The viewer reads the message as a stream (a browser would hold it,
	// but the browser is not the worker).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	viewer, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(relay.URL, "http"), nil)
	require.NoError(t, err)
	defer viewer.CloseNow()
	viewer.SetReadLimit(-1)
	var got int64
	for got < size {
		_, rd, err := viewer.Reader(ctx)
		require.NoError(t, err)
		n, err := io.Copy(io.Discard, rd)
		require.NoError(t, err)
		got += n
	}
	grew := w.Stop()
	t.Logf("the viewer got %d MiB; the heap (machine, relay and viewer together) grew by %d MiB at its peak", got>>20, max(grew, 0)>>20)
	assert.Equal(t, int64(size), got)
	assert.Less(t, grew, int64(64<<20), "the relay streams a message rather than hold it")
}

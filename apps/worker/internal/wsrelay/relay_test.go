package wsrelay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestRelayCarriesClose: Relay is invisible to both ends. Messages pass
// both ways, and whichever end closes, the other sees its close code and
// reason (a CDP client reads botd's "a person took over screen X" this
// way); an end that drops without a close frame is a 1001 to the other.
func TestRelayCarriesClose(t *testing.T) {
	rows := []struct {
		name string
		// machineCloses: the machine's end closes (else the client's);
		// drop: without a close frame.
		machineCloses, drop bool
		code                websocket.StatusCode
		reason              string
		wantCode            websocket.StatusCode
	}{
		{"the machine closes with 4001", true, false, 4001, "a person took over screen alice", 4001},
		{"the machine closes with 1012", true, false, websocket.StatusServiceRestart, "the browser restarted", websocket.StatusServiceRestart},
		{"the client closes with 1000", false, false, websocket.StatusNormalClosure, "done", websocket.StatusNormalClosure},
		{"the client closes with 4100", false, false, 4100, "mine", 4100},
		{"the machine drops", true, true, 0, "", websocket.StatusGoingAway},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			// The machine's end: echoes until told to close.
			machineGot := make(chan error, 1)
			machine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				c, err := websocket.Accept(w, req, nil)
				if err != nil {
					return
				}
				defer c.CloseNow()
				for {
					typ, b, err := c.Read(ctx)
					if err != nil {
						machineGot <- err
						return
					}
					if string(b) == "close" {
						if r.drop {
							_ = c.CloseNow()
						} else {
							_ = c.Close(r.code, r.reason)
						}
						machineGot <- nil
						return
					}
					if err := c.Write(ctx, typ, b); err != nil {
						machineGot <- err
						return
					}
				}
			}))
			defer machine.Close()
			ends := make(chan End, 1)
			relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				up, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(machine.URL, "http"), nil)
				if err != nil {
					return
				}
				down, err := websocket.Accept(w, req, nil)
				if err != nil {
					return
				}
				ends <- Relay(context.WithoutCancel(req.Context()), down, up)
			}))
			defer relay.Close()

			client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(relay.URL, "http"), nil)
			require.NoError(t, err)
			defer client.CloseNow()
			require.NoError(t, client.Write(ctx, websocket.MessageText, []byte(`{"id":1,"method":"Browser.getVersion"}`)))
			_, b, err := client.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, `{"id":1,"method":"Browser.getVersion"}`, string(b))

			if r.machineCloses {
				require.NoError(t, client.Write(ctx, websocket.MessageText, []byte("close")))
				_, _, err = client.Read(ctx)
				require.Equal(t, r.wantCode, websocket.CloseStatus(err), "the client's close: %v", err)
				var ce websocket.CloseError
				require.ErrorAs(t, err, &ce)
				if !r.drop {
					require.Equal(t, r.reason, ce.Reason)
				}
				require.NoError(t, <-machineGot)
			} else {
				require.NoError(t, client.Close(r.code, r.reason))
				err := <-machineGot
				require.Equal(t, r.wantCode, websocket.CloseStatus(err), "the machine's close: %v", err)
				var ce websocket.CloseError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, r.reason, ce.Reason)
			}
			select {
			case e := <-ends:
				if !r.drop {
					require.Equal(t, r.code, e.Status)
					require.Equal(t, r.reason, e.Reason)
				}
			case <-ctx.Done():
				t.Fatal("Relay did not return")
			}
		})
	}
}

// TestRelayTooBig: a message over one side's read limit closes that side
// 1009 (the websocket library's answer) and the other side 1001, cleanly,
// and Relay says which side ended it.
func TestRelayTooBig(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	machineGot := make(chan error, 1)
	machine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, err := websocket.Accept(w, req, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(-1)
		for {
			if _, _, err := c.Read(ctx); err != nil {
				machineGot <- err
				return
			}
		}
	}))
	defer machine.Close()
	ends := make(chan End, 1)
	var down *websocket.Conn
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		up, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(machine.URL, "http"), nil)
		if err != nil {
			return
		}
		d, err := websocket.Accept(w, req, nil)
		if err != nil {
			return
		}
		down = d
		d.SetReadLimit(1 << 10)
		ends <- Relay(context.WithoutCancel(req.Context()), d, up)
	}))
	defer relay.Close()

	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(relay.URL, "http"), nil)
	require.NoError(t, err)
	defer client.CloseNow()
	require.NoError(t, client.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 64<<10))))
	_, _, err = client.Read(ctx)
	require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "the client's close: %v", err)
	err = <-machineGot
	require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "the machine's close: %v", err)
	e := <-ends
	require.Same(t, down, e.From, "the client's side ended it")
	require.Equal(t, websocket.StatusCode(-1), e.Status)
}

// TestRelayCloseWhileWriting: a side that closes while the relay is
// writing a message to it (here over its own read limit: 1009) is still
// carried through with its code, not taken for a side that dropped
// (1001). 20 rounds: which of the relay's two copies notices first is a
// race.
func TestRelayCloseWhileWriting(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	machine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, err := websocket.Accept(w, req, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 10)
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	}))
	defer machine.Close()
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		up, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(machine.URL, "http"), nil)
		if err != nil {
			return
		}
		down, err := websocket.Accept(w, req, nil)
		if err != nil {
			return
		}
		down.SetReadLimit(-1)
		Relay(context.WithoutCancel(req.Context()), down, up)
	}))
	defer relay.Close()
	for i := range 20 {
		client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(relay.URL, "http"), nil)
		require.NoError(t, err)
		_ = client.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 1<<20)))
		_, _, err = client.Read(ctx)
		require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "round %d: %v", i, err)
		client.CloseNow()
	}
}

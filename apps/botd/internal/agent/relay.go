package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
)

// relayReadLimit bounds one JSON-RPC message (screenshots travel as base64).
const relayReadLimit = 64 << 20

// Relay serves ws /agent: it relays messages both ways between the client and
// Codex's app-server, adding nothing but the app-server's capability token.
// The upstream dial carries no Origin header (the app-server refuses any
// request that has one). When Codex goes
// away (a crash or restart) the client sees a close and may reconnect.
func (a *Agent) Relay(log zerolog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		dctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		up, _, err := websocket.Dial(dctx, "ws://"+a.opts.Addr, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + a.token}}})
		cancel()
		if err != nil {
			log.Warn().Err(err).Msg("agent relay: codex app-server unreachable")
			httpx.WriteError(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "the Codex app-server is not reachable (it may be restarting); retry")
			return
		}
		defer up.CloseNow()
		up.SetReadLimit(relayReadLimit)
		down, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer down.CloseNow()
		down.SetReadLimit(relayReadLimit)

		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		type end struct {
			upstream bool
			err      error
		}
		ends := make(chan end, 2)
		go func() { ends <- end{upstream: false, err: pipe(ctx, up, down)} }()
		go func() { ends <- end{upstream: true, err: pipe(ctx, down, up)} }()
		e := <-ends
		// Close before cancelling ctx: cancelling a pending Read makes
		// coder/websocket drop the connection without a close frame.
		if e.upstream {
			// Codex went away (crash or restart): tell the client so it can
			// reconnect once the supervisor has it running again.
			_ = down.Close(websocket.StatusGoingAway, "codex app-server went away")
		} else {
			_ = up.Close(websocket.StatusNormalClosure, "")
		}
		stop()
		log.Debug().Bool("upstream_ended", e.upstream).Msg("agent relay closed")
	}
}

// pipe copies messages from src to dst until either side fails.
func pipe(ctx context.Context, dst, src *websocket.Conn) error {
	for {
		typ, b, err := src.Read(ctx)
		if err != nil {
			return err
		}
		if err := dst.Write(ctx, typ, b); err != nil {
			return err
		}
	}
}

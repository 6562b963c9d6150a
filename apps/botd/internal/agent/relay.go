package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
)

// MaxMessage bounds one JSON-RPC message either way (screenshots travel as
// base64).
const MaxMessage = 64 << 20

// closeError ends a relay with a close status of its own.
type closeError struct {
	code   websocket.StatusCode
	reason string
}

func (e *closeError) Error() string { return e.reason }

// Relay serves ws /agent: each connection gets an app-server of its own,
// started for it and stopped when it ends. Each text message from the client
// goes to Codex's stdin as one line, each line Codex writes goes to the
// client as one text message; botd adds nothing (its readiness check is
// answered before the client is accepted). When Codex goes away the client
// sees a close (1001) and may reconnect; when Codex cannot start the upgrade
// is answered 503.
func (a *Agent) Relay(log zerolog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := a.open(r.Context(), fmt.Sprintf("codex:%d", a.seq.Add(1)))
		if err != nil {
			if r.Context().Err() == nil {
				log.Warn().Err(err).Msg("agent relay: codex app-server did not start")
				httpx.WriteError(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "the Codex app-server did not start; retry")
			}
			return
		}
		defer s.Close()
		a.setState(shared.StateRunning, "")
		down, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer down.CloseNow()
		down.SetReadLimit(MaxMessage)

		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		type end struct {
			upstream bool
			err      error
		}
		ends := make(chan end, 2)
		go func() { ends <- end{upstream: true, err: s.toClient(ctx, down)} }()
		go func() { ends <- end{upstream: false, err: s.fromClient(ctx, down)} }()
		e := <-ends
		// Close before cancelling ctx: cancelling a pending Read makes
		// coder/websocket drop the connection without a close frame.
		var ce *closeError
		switch {
		case errors.As(e.err, &ce):
			_ = down.Close(ce.code, ce.reason)
		case e.upstream:
			// Codex went away (it crashed or was killed): tell the client
			// so it can reconnect (to a new app-server).
			_ = down.Close(websocket.StatusGoingAway, "codex app-server went away")
		}
		s.Close()
		stop()
		log.Debug().Bool("upstream_ended", e.upstream).Msg("agent relay closed")
	}
}

// toClient sends each line the app-server writes as one text message.
func (s *Session) toClient(ctx context.Context, down *websocket.Conn) error {
	for s.lines.Scan() {
		b := s.lines.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if err := down.Write(ctx, websocket.MessageText, b); err != nil {
			return err
		}
	}
	if errors.Is(s.lines.Err(), bufio.ErrTooLong) {
		return &closeError{websocket.StatusMessageTooBig, "a Codex message exceeds 64 MiB"}
	}
	if err := s.lines.Err(); err != nil {
		return err
	}
	return errors.New("codex app-server closed its output")
}

// fromClient writes each text message to the app-server as one line: a
// message with a line break in it is compacted first (JSON allows breaks
// only between tokens); one that is not JSON then is refused.
func (s *Session) fromClient(ctx context.Context, down *websocket.Conn) error {
	nl := []byte{'\n'}
	for {
		typ, b, err := down.Read(ctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			return &closeError{websocket.StatusUnsupportedData, "JSON-RPC travels as text messages"}
		}
		if bytes.ContainsAny(b, "\r\n") {
			var c bytes.Buffer
			if err := json.Compact(&c, b); err != nil {
				return &closeError{websocket.StatusInvalidFramePayloadData, "a message with a line break must be one JSON value"}
			}
			b = c.Bytes()
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		bufs := net.Buffers{b, nl}
		if _, err := bufs.WriteTo(s.conn); err != nil {
			return err
		}
	}
}

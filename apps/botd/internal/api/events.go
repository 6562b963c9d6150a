package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/pkg/shared"
)

// events streams hub events to a websocket client. The first message is the
// current health, so a client never starts blind.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	ch, cancel := s.hub.Subscribe()
	defer cancel()
	ctx := c.CloseRead(r.Context())
	send := func(ev shared.Event) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return c.Write(wctx, websocket.MessageText, b)
	}
	if err := send(shared.Event{Type: shared.EventHealth, At: time.Now().UTC(), Data: s.health.Snapshot()}); err != nil {
		return
	}
	ping := time.NewTicker(30 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				c.Close(websocket.StatusGoingAway, "event stream ended")
				return
			}
			if err := send(ev); err != nil {
				return
			}
		case <-ping.C:
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Ping(pctx)
			pcancel()
			if err != nil {
				return
			}
		}
	}
}

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
//
// It subscribes to the hub before the upgrade completes: a client may act as
// soon as its dial returns (kill Codex, stop a screen), and every event that
// action causes must reach it. Subscribing after Accept lost those that fell
// in between (issue 16: "events so far: []" under load).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	ch, cancel := s.hub.Subscribe()
	defer cancel()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
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

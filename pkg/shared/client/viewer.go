package client

import (
	"context"
	"net/http"
	"time"
)

// ViewerLink is POST /screens/{id}/viewer-token's reply.
type ViewerLink struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	ViewPath  string    `json:"viewPath"`
	VNCPath   string    `json:"vncPath"`
}

// ViewerToken is POST /screens/{id}/viewer-token: a signed link to watch
// (mode "view") or control (mode "control", acting as holder) one screen.
func (c *Client) ViewerToken(ctx context.Context, id, mode, holder string, ttl time.Duration) (ViewerLink, error) {
	var v ViewerLink
	body := map[string]any{"mode": mode, "ttlSeconds": int(ttl.Seconds())}
	if holder != "" {
		body["holder"] = holder
	}
	return v, c.Do(ctx, http.MethodPost, "/screens/"+esc(id)+"/viewer-token", body, &v)
}

// Screens is GET /screens.
func (c *Client) Screens(ctx context.Context) ([]Screen, error) {
	var r struct {
		Screens []Screen `json:"screens"`
	}
	return r.Screens, c.Do(ctx, http.MethodGet, "/screens", nil, &r)
}

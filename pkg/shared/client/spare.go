package client

import (
	"context"
	"net/http"
)

// PrepareSpareScreen is POST /screens/spare: botd starts one screen's stack
// under no id (or waits for the one starting), and the next screen to
// start takes it. It returns once the spare runs.
func (c *Client) PrepareSpareScreen(ctx context.Context) error {
	return c.do(ctx, screenCall, http.MethodPost, "/screens/spare", struct{}{}, nil)
}

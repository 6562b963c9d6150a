package client

import (
	"context"
	"net/http"
)

// RotateToken is PUT /token: botd takes newToken as its bearer token (a
// warm pool's machine, started with the pool's token, gets its computer's
// own). It returns a client of the same botd and HTTP client that sends
// newToken; c's token stops working. botd keeps newToken in memory only: a
// restarted botd is back on its BOTD_TOKEN_FILE.
//
// botd refuses (400) a token shorter than 16 bytes or equal to the current
// one. When the call fails without botd's answer (a timeout, a dropped
// connection) the rotation may or may not have happened: try the new
// token before the old.
func (c *Client) RotateToken(ctx context.Context, newToken string) (*Client, error) {
	if err := c.Do(ctx, http.MethodPut, "/token", map[string]string{"token": newToken}, nil); err != nil {
		return nil, err
	}
	nc := *c
	nc.token = newToken
	return &nc, nil
}

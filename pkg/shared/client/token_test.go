package client

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

// TestRotateTokenWire: RotateToken sends PUT /token {"token"} with the old
// bearer and returns a client of the same botd and HTTP client that sends
// the new one; the client it was called on keeps the old. A refusal is
// botd's error, no client, and never shows the new token. (Against a real
// botd server: apps/botd/internal/api's TestClientRotateToken.)
func TestRotateTokenWire(t *testing.T) {
	const newTok = "new-token-0123456789abcdef"
	c, got := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/token" && r.Header.Get("Authorization") == "Bearer tok-0123456789abcdef":
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/token":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"code":"unauthorized","message":"missing or invalid bearer token"}}`)
		default:
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	})
	ctx := context.Background()
	nc, err := c.RotateToken(ctx, newTok)
	require.NoError(t, err)
	require.Equal(t, newTok, nc.Token())
	require.Equal(t, c.BaseURL(), nc.BaseURL())
	require.Same(t, c.HTTPClient(), nc.HTTPClient())
	_, err = nc.Health(ctx)
	require.NoError(t, err)
	_, err = c.Health(ctx)
	require.NoError(t, err)

	g := got()
	require.Len(t, g, 3)
	require.Equal(t, "PUT", g[0].Method)
	require.Equal(t, "/token", g[0].Path)
	require.Equal(t, "Bearer tok-0123456789abcdef", g[0].Auth)
	require.Equal(t, "application/json", g[0].CType)
	require.JSONEq(t, `{"token":"`+newTok+`"}`, g[0].Body)
	require.Equal(t, "Bearer "+newTok, g[1].Auth, "the returned client sends the new token")
	require.Equal(t, "Bearer tok-0123456789abcdef", g[2].Auth, "the client it was called on is unchanged")

	bad, err := nc.RotateToken(ctx, "another-token-0123456789")
	require.Nil(t, bad)
	require.Equal(t, shared.CodeUnauthorized, CodeOf(err))
	require.NotContains(t, err.Error(), "another-token-0123456789")
}

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// TestTokenRotationLastsUntilRestart is a warm pool's machine: botd starts
// on the pool's token (BOTD_TOKEN_FILE), the worker that claims it rotates
// to the computer's own (PUT /token through the client), and run.go's
// wiring makes every consumer follow: the pool token is 401, a viewer link
// minted under it is refused, the computer's token mints links that work.
// The log says it rotated and shows neither token. The rotation is not
// persisted: a restarted botd is on the pool token again.
func TestTokenRotationLastsUntilRestart(t *testing.T) {
	const (
		poolToken     = "pool-token-0123456789abcdef"
		computerToken = "computer-token-0123456789abcdef"
	)
	home := tempHome(t)
	tokenFile := filepath.Join(t.TempDir(), "botd-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(poolToken+"\n"), 0o600))
	fromFile := []string{"BOTD_TOKEN=", "BOTD_TOKEN_FILE=" + tokenFile, "DISPLAY_BASE=870", "VIEW_PORT_BASE=25800"}
	ctx := testenv.Context(t, 3*time.Minute)

	d := startDaemon(t, home, poolToken, fromFile...)
	d.waitHealthy(60 * time.Second)
	pool := client.New("http://"+d.addr, poolToken, nil)
	before, err := pool.ViewerToken(ctx, "rot", "view", "", time.Minute)
	require.NoError(t, err)
	viewerState := func(link string) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+d.addr+"/screens/rot/viewer-state", nil)
		req.Header.Set("X-Viewer-Token", link)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, viewerState(before.Token))

	comp, err := pool.RotateToken(ctx, computerToken)
	require.NoError(t, err)
	_, err = pool.Health(ctx)
	require.Equal(t, shared.CodeUnauthorized, client.CodeOf(err), "the pool token after the rotation")
	_, err = comp.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, viewerState(before.Token), "a link minted under the pool token")
	_, err = pool.ViewerToken(ctx, "rot", "view", "", time.Minute)
	require.Equal(t, shared.CodeUnauthorized, client.CodeOf(err))
	after, err := comp.ViewerToken(ctx, "rot", "view", "", time.Minute)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, viewerState(after.Token))
	d.stop()
	require.Contains(t, d.logs(), "bearer token rotated")
	require.NotContains(t, d.logs(), poolToken)
	require.NotContains(t, d.logs(), computerToken)

	d2 := startDaemon(t, home, poolToken, fromFile...)
	d2.waitHealthy(60 * time.Second)
	_, err = client.New("http://"+d2.addr, poolToken, nil).Health(ctx)
	require.NoError(t, err, "a restarted botd reads BOTD_TOKEN_FILE again")
	_, err = client.New("http://"+d2.addr, computerToken, nil).Health(ctx)
	require.Equal(t, shared.CodeUnauthorized, client.CodeOf(err), "the rotated token is not persisted")
	d2.stop()
}

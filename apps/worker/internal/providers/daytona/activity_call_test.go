package daytona

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// TestToolboxCallIsUseWhileInFlight: a toolbox call counts as use of the
// computer for its whole length, not only at its start and end: a command
// that runs longer than the idle window (or any call on a loaded host) is
// not mistaken for idleness, which would let the vendor's auto-stop take
// the sandbox mid-command (rehearsal 42 caught a followed process's log
// read in flight past the window).
func TestToolboxCallIsUseWhileInFlight(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`{"exitCode":0,"result":"done"}`))
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before srv.Close: a failed check leaves no call hanging
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(testKey, sealer)
	require.NoError(t, err)
	var act vendorkit.Activity
	tb := &toolbox{a: &api{base: srv.URL, key: k, hc: &http.Client{}}, base: srv.URL + "/toolbox", hold: act.Hold}

	const idle = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := tb.execute(context.Background(), "sleep 600", nil, time.Hour)
		done <- err
	}()
	time.Sleep(3 * idle)
	require.True(t, act.Active(time.Now(), idle), "a command in flight for longer than the idle window is use")
	free()
	require.NoError(t, <-done)
	require.True(t, act.Active(time.Now(), idle), "the call's end is use")
	time.Sleep(2 * idle)
	require.False(t, act.Active(time.Now(), idle), "after the call and the idle window, idle")
}

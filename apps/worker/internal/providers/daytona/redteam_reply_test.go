package daytona

// Red-team row of issue 36, row 5, for the daytona kind: the sandbox is a
// machine, and what the toolbox answers comes from it. A file read asks for
// at most max bytes and reads no more (a 1 GiB file is not read whole to be
// cut), and a JSON answer over its cap fails instead of being held.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/secret"
)

func TestRedTeamToolboxReplyCaps(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		head := ""
		if r.URL.Path == "/toolbox/process/execute" {
			w.Header().Set("Content-Type", "application/json")
			head = `{"exitCode":0,"result":"`
		}
		_, _ = io.WriteString(w, head)
		chunk := []byte(strings.Repeat("A", 1<<20))
		for sent.Load() < 1<<30 {
			k, err := w.Write(chunk)
			sent.Add(int64(k))
			if err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}`)
	}))
	defer srv.Close()
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(testKey, sealer)
	require.NoError(t, err)
	tb := &toolbox{a: &api{base: srv.URL, key: k, hc: &http.Client{}}, base: srv.URL + "/toolbox", hold: func() func() { return func() {} }}

	t.Run("a 1 GiB file read for 256 KiB", func(t *testing.T) {
		sent.Store(0)
		b, err := tb.download(context.Background(), "big", 256<<10)
		t.Logf("download: %d bytes, %v; the sandbox wrote %d MiB", len(b), err, sent.Load()>>20)
		require.NoError(t, err)
		assert.Len(t, b, 256<<10)
		assert.Less(t, sent.Load(), int64(64<<20), "the rest is not read")
	})
	t.Run("a command answered with 1 GiB", func(t *testing.T) {
		sent.Store(0)
		_, err := tb.execute(context.Background(), "true", nil, 0)
		t.Logf("execute: %v; the sandbox wrote %d MiB", err, sent.Load()>>20)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "larger than 67108864 bytes, the cap")
		assert.Less(t, sent.Load(), int64(maxAnswer+64<<20), "the rest is not read")
	})
}

package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// Displays 588-595 and loopback ports 15200-15221 and 15300-15321 (local
// machines: 2 slots of 4 screens, 11 ports each) are this file's alone.
const destroyHomeDisplayBase = 588

// TestDestroyForgetsHome (issue 25, red team): destroying a computer used
// to leave DATA_DIR/homes/<id> (the sign-in jar inside) forever. Now DELETE
// /v1/computers/{id} removes its checkpoint and metadata from the home
// store, and ?keepHome=true keeps them; on the local store and on S3.
func TestDestroyForgetsHome(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	t.Run("local", func(t *testing.T) {
		testDestroyForgetsHome(t, map[string]string{"WORKER_LOCAL_PORT_BASE": "15200"}, func(e *workerEnv, id string) []string {
			var have []string
			for _, p := range []string{filepath.Join(e.dataDir, "homes", id), filepath.Join(e.dataDir, "home-revisions", id+".json")} {
				if _, err := os.Stat(p); err == nil {
					have = append(have, p)
				}
			}
			return have
		})
	})
	t.Run("s3", func(t *testing.T) {
		backend, env := fakeS3(t, "w1/")
		env["WORKER_LOCAL_PORT_BASE"] = "15300"
		testDestroyForgetsHome(t, env, func(_ *workerEnv, id string) []string {
			res, err := backend.ListBucket("homes", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
			require.NoError(t, err)
			var have []string
			for _, o := range res.Contents {
				if strings.Contains(o.Key, id) {
					have = append(have, o.Key)
				}
			}
			return have
		})
	})
}

// testDestroyForgetsHome makes two computers on the local provider with a
// checkpoint each, destroys one plainly and one with keepHome=true, and
// checks the home store through stored (what it holds of a computer) and
// the worker-owned homes the machines used.
func testDestroyForgetsHome(t *testing.T, env map[string]string, stored func(e *workerEnv, id string) []string) {
	const bot = "bob"
	dir := openDir(t, "wire-destroyhome-")
	env["WORKER_PROVIDER"] = providers.KindLocal
	env["WORKER_BOTD_BIN"] = buildBotd(t, dir)
	env["WORKER_LOCAL_DISPLAY_BASE"] = fmt.Sprint(destroyHomeDisplayBase)
	env["WORKER_LOCAL_SLOTS"] = "2"
	a := providerWorker(t, env, filepath.Join(dir, "machines"), bot)

	// A second computer on the same worker.
	var created struct {
		Computer struct {
			ID, State, LastError string
		} `json:"computer"`
		Capability string `json:"capability"`
	}
	require.Equal(t, http.StatusCreated, post(t, a.url+"/v1/computers", a.token, map[string]any{"scope": map[string]string{"team": "t2"}}, &created))
	require.Equal(t, "running", created.Computer.State, created.Computer.LastError)
	b := &workerEnv{url: a.url, token: a.token, computer: created.Computer.ID, capa: created.Capability, w: a.w, dataDir: a.dataDir}
	t.Cleanup(func() {
		if b.computer != "" {
			_, _ = a.w.Computers.Destroy(t.Context(), b.computer)
		}
	})
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))

	// Each machine uses a worker-owned home (with the sign-in in it too).
	liveHome := func(e *workerEnv) string {
		c, err := e.w.Store.GetComputer(t.Context(), e.computer)
		require.NoError(t, err)
		return e.w.Computers.HomeDir(c, providers.KindLocal)
	}
	homeA, homeB := liveHome(a), liveHome(b)
	for _, e := range []*workerEnv{a, b} {
		require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/file_write", map[string]any{"botId": bot,
			"args": map[string]string{"path": "bots/" + bot + "/signed-in.txt", "content": "a sign-in of " + e.computer + "\n"}}, nil))
		var cp struct{ Revision int64 }
		require.Equal(t, http.StatusOK, e.do(t, "POST", "/checkpoint", nil, &cp))
		require.Positive(t, cp.Revision)
		require.NotEmpty(t, stored(e, e.computer), "the checkpoint is in the home store")
	}

	// A bad keepHome is refused, nothing destroyed.
	require.Equal(t, http.StatusBadRequest, a.do(t, "DELETE", "?keepHome=maybe", nil, nil))
	require.NotEmpty(t, stored(a, a.computer))

	// Destroy: the checkpoint and its metadata go.
	var out struct {
		Computer struct{ State, LastError string } `json:"computer"`
	}
	require.Equal(t, http.StatusOK, a.do(t, "DELETE", "", nil, &out))
	require.Equal(t, store.StateDestroyed, out.Computer.State, out.Computer.LastError)
	require.Empty(t, stored(a, a.computer), "the destroyed computer's home is gone from the store")
	require.NoDirExists(t, filepath.Dir(homeA), "the destroyed computer's worker-owned home is gone")
	a.computer = ""

	// keepHome=true: kept.
	require.Equal(t, http.StatusOK, b.do(t, "DELETE", "?keepHome=true", nil, &out))
	require.Equal(t, store.StateDestroyed, out.Computer.State, out.Computer.LastError)
	require.NotEmpty(t, stored(b, b.computer), "keepHome=true keeps the home")
	require.FileExists(t, filepath.Join(homeB, "bot", "bots", bot, "signed-in.txt"), "keepHome=true keeps the worker-owned home")
	b.computer = ""
}

// fakeS3 serves an in-memory S3 (gofakes3) on loopback with bucket
// "homes", and returns it with the worker's env for it as a home store
// (objects under prefix, key files in a temp dir).
func fakeS3(t testing.TB, prefix string) (*s3mem.Backend, map[string]string) {
	t.Helper()
	backend := s3mem.New()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	keys := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(keys, "ak"), []byte("test-access\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(keys, "sk"), []byte("test-secret-key\n"), 0o600))
	return backend, map[string]string{
		"WORKER_HOMES_S3_ENDPOINT": l.Addr().String(), "WORKER_HOMES_S3_BUCKET": "homes",
		"WORKER_HOMES_S3_ACCESS_KEY_FILE": filepath.Join(keys, "ak"), "WORKER_HOMES_S3_SECRET_KEY_FILE": filepath.Join(keys, "sk"),
		"WORKER_HOMES_S3_REGION": "us-east-1", "WORKER_HOMES_S3_PREFIX": prefix, "WORKER_HOMES_S3_INSECURE": "true",
	}
}

package providers

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFromEnv(t *testing.T) {
	none := "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	ctx := testCtx(t, 30*time.Second)

	// No engine answers: local is the default.
	s, err := FromEnv(ctx, env(map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-a"), "DOCKER_HOST": none, "WORKER_BOTD_BIN": "/opt/botd/botd"}), nil)
	require.NoError(t, err)
	require.Equal(t, KindLocal, s.Default)
	require.Contains(t, s.Why, "no Docker engine answers")
	for _, k := range []string{KindLocal, KindDocker, KindSingleScreen} {
		p, err := s.Registry.Get(k)
		require.NoError(t, err)
		require.Equal(t, k, p.Describe().Kind)
	}
	require.False(t, s.Registry[KindSingleScreen].Describe().Capabilities.MultiScreen)
	_, err = s.Registry.Get("e2b")
	require.ErrorIs(t, err, ErrUnknownKind)
	require.NoError(t, s.Close(context.Background()))

	s, err = FromEnv(ctx, env(map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-b"), "DOCKER_HOST": none, "WORKER_PROVIDER": "single-screen"}), nil)
	require.NoError(t, err)
	require.Equal(t, KindSingleScreen, s.Default)
	require.NoError(t, s.Close(context.Background()))

	_, err = FromEnv(ctx, env(map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-c"), "WORKER_PROVIDER": "e2b"}), nil)
	require.ErrorIs(t, err, ErrUnknownKind)
	_, err = FromEnv(ctx, env(map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-c"), "WORKER_LOCAL_PORT_BASE": "x"}), nil)
	require.ErrorContains(t, err, "WORKER_LOCAL_PORT_BASE")
}

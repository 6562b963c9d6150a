package providers

import (
	"context"
	"fmt"
	"os"
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
	require.ErrorContains(t, err, "E2B_API_KEY", "e2b without a key says which variable is missing")
	_, err = FromEnv(ctx, env(map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-c"), "WORKER_PROVIDER": "e3b"}), nil)
	require.ErrorIs(t, err, ErrUnknownKind)
	_, err = FromEnv(ctx, env(map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-c"), "WORKER_LOCAL_PORT_BASE": "x"}), nil)
	require.ErrorContains(t, err, "WORKER_LOCAL_PORT_BASE")
}

func TestFromEnvE2B(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	none := "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")
	keyFile := filepath.Join(t.TempDir(), "e2b-key")
	const key = "e2b_test_key_0123456789abcdef"
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o644))
	kv := map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-e2b"), "DOCKER_HOST": none,
		"WORKER_PROVIDER": "e2b", "E2B_API_KEY_FILE": keyFile, "E2B_API_URL": "http://127.0.0.1:1"}
	env := func(k string) string { return kv[k] }

	_, err := FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "mode 0644", "a key file others can read is refused")
	require.NotContains(t, err.Error(), key)

	require.NoError(t, os.Chmod(keyFile, 0o600))
	s, err := FromEnv(ctx, env, nil)
	require.NoError(t, err)
	require.Equal(t, KindE2B, s.Default)
	p, err := s.Registry.Get(KindE2B)
	require.NoError(t, err)
	d := p.Describe()
	require.Equal(t, KindE2B, d.Kind)
	require.True(t, d.Capabilities.Stop && d.Capabilities.Persistent && d.Capabilities.MultiScreen)
	require.NotContains(t, fmt.Sprintf("%+v %#v", s, s.E2B.Adapter()), key, "the key is never rendered")
	require.NoError(t, s.Close(context.Background()))

	kv["E2B_TIMEOUT_SECONDS"] = "5"
	_, err = FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "E2B_TIMEOUT_SECONDS")
}

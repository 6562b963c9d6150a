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

// TestFromEnvBox: WORKER_PROVIDER=box wants a key; a key file others can
// read is refused, and so is a key that is not a box_ key; the key is
// never rendered; the kind is one-screen; a bad TTL is refused.
func TestFromEnvBox(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	none := "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")
	keyFile := filepath.Join(t.TempDir(), "box-key")
	const key = "box_test_key_0123456789abcdef"
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o644))
	kv := map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-box"), "DOCKER_HOST": none, "WORKER_PROVIDER": "box"}
	env := func(k string) string { return kv[k] }

	_, err := FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "WORKER_PROVIDER=box: set BOX_API_KEY or BOX_API_KEY_FILE")

	kv["BOX_API_KEY_FILE"], kv["BOX_API_URL"] = keyFile, "http://127.0.0.1:1"
	_, err = FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "mode 0644", "a key file others can read is refused")
	require.NotContains(t, err.Error(), key)

	require.NoError(t, os.Chmod(keyFile, 0o600))
	s, err := FromEnv(ctx, env, nil)
	require.NoError(t, err)
	require.Equal(t, KindBox, s.Default)
	p, err := s.Registry.Get(KindBox)
	require.NoError(t, err)
	d := p.Describe()
	require.Equal(t, KindBox, d.Kind)
	require.False(t, d.Capabilities.MultiScreen, "one desktop per box")
	require.True(t, d.Capabilities.Stop && d.Capabilities.Persistent)
	require.NotContains(t, fmt.Sprintf("%+v %#v %v", s, s.Box.Adapter(), s.Box), key, "the key is never rendered")
	require.NoError(t, s.Close(context.Background()))

	kv["BOX_TTL_SECONDS"] = "30"
	_, err = FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "BOX_TTL_SECONDS")
	delete(kv, "BOX_TTL_SECONDS")

	delete(kv, "BOX_API_KEY_FILE")
	kv["BOX_API_KEY"] = "sk_not_a_box_key"
	_, err = FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "not a Box key")
	require.NotContains(t, err.Error(), "sk_not_a_box_key")
}

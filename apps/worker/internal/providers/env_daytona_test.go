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

// TestFromEnvDaytona: WORKER_PROVIDER=daytona wants a key; a key file
// others can read is refused; the key is never rendered; a bad auto-stop
// interval is refused.
func TestFromEnvDaytona(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	none := "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")
	keyFile := filepath.Join(t.TempDir(), "daytona-key")
	const key = "dtn_test_key_0123456789abcdef"
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o644))
	kv := map[string]string{"DATA_DIR": filepath.Join(tmpRoot, "env-daytona"), "DOCKER_HOST": none, "WORKER_PROVIDER": "daytona"}
	env := func(k string) string { return kv[k] }

	_, err := FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "WORKER_PROVIDER=daytona: set DAYTONA_API_KEY or DAYTONA_API_KEY_FILE")

	kv["DAYTONA_API_KEY_FILE"], kv["DAYTONA_API_URL"] = keyFile, "http://127.0.0.1:1"
	_, err = FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "mode 0644", "a key file others can read is refused")
	require.NotContains(t, err.Error(), key)

	require.NoError(t, os.Chmod(keyFile, 0o600))
	s, err := FromEnv(ctx, env, nil)
	require.NoError(t, err)
	require.Equal(t, KindDaytona, s.Default)
	p, err := s.Registry.Get(KindDaytona)
	require.NoError(t, err)
	d := p.Describe()
	require.Equal(t, KindDaytona, d.Kind)
	require.True(t, d.Capabilities.Stop && d.Capabilities.Persistent && d.Capabilities.MultiScreen)
	require.NotContains(t, fmt.Sprintf("%+v %#v", s, s.Daytona.Adapter()), key, "the key is never rendered")
	require.NoError(t, s.Close(context.Background()))

	kv["DAYTONA_AUTO_STOP_MINUTES"] = "-1"
	_, err = FromEnv(ctx, env, nil)
	require.ErrorContains(t, err, "DAYTONA_AUTO_STOP_MINUTES")
}

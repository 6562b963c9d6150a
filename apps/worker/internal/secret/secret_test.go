package secret

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSealOpenAndKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	s, err := LoadOrCreate(path)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	sealed, err := s.Seal([]byte("botd-token-123"), "c1")
	require.NoError(t, err)
	require.False(t, bytes.Contains(sealed, []byte("botd-token-123")), "no plaintext at rest")
	got, err := s.Open(sealed, "c1")
	require.NoError(t, err)
	require.Equal(t, "botd-token-123", string(got))
	_, err = s.Open(sealed, "c2")
	require.Error(t, err, "bound to its computer")

	again, err := LoadOrCreate(path) // the same key after a restart
	require.NoError(t, err)
	got, err = again.Open(sealed, "c1")
	require.NoError(t, err)
	require.Equal(t, "botd-token-123", string(got))

	require.NoError(t, os.Chmod(path, 0o644))
	_, err = LoadOrCreate(path)
	require.ErrorContains(t, err, "readable by others")
	require.NoError(t, os.Chmod(path, 0o600))
	require.NoError(t, os.WriteFile(path, []byte("short"), 0o600))
	_, err = LoadOrCreate(path)
	require.ErrorContains(t, err, "32-byte key")
}

package vendorkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/secret"
)

const plain = "vendor-key-0123456789abcdef"

func TestKeySealedAndNeverRendered(t *testing.T) {
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	k, err := NewKey(" "+plain+"\n", sealer, "acme", "ACME_API_KEY")
	require.NoError(t, err)
	require.False(t, bytes.Contains(k.sealed, []byte(plain)), "the key is sealed in memory")
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%v %+v %#v %s %q", k, k, k, k, k)
	b, err := json.Marshal(map[string]any{"key": k})
	require.NoError(t, err)
	buf.Write(b)
	require.NotContains(t, buf.String(), plain)
	require.Contains(t, buf.String(), "[acme api key]")
	got, err := k.Open()
	require.NoError(t, err)
	require.Equal(t, plain, got, "trimmed, and opened only on demand")

	// A key sealed for one vendor does not open as another's.
	other := &Key{sealed: k.sealed, s: sealer, vendor: "other"}
	_, err = other.Open()
	require.Error(t, err)
	_, err = NewKey("  ", sealer, "acme", "ACME_API_KEY")
	require.Error(t, err)
	var none *Key
	_, err = none.Open()
	require.Error(t, err)
}

func TestKeyFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	dir := t.TempDir()
	f := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(f, []byte(plain+"\n"), 0o644))
	_, err := KeyFromEnv(env(map[string]string{"ACME_API_KEY_FILE": f}), "ACME_API_KEY")
	require.ErrorContains(t, err, "must be mode 0600")
	require.NotContains(t, err.Error(), plain)
	require.NoError(t, os.Chmod(f, 0o600))
	got, err := KeyFromEnv(env(map[string]string{"ACME_API_KEY_FILE": f}), "ACME_API_KEY")
	require.NoError(t, err)
	require.Equal(t, plain, got)
	got, err = KeyFromEnv(env(map[string]string{"ACME_API_KEY": " x-key "}), "ACME_API_KEY")
	require.NoError(t, err)
	require.Equal(t, "x-key", got, "the variable wins over the file")
	got, err = KeyFromEnv(env(nil), "ACME_API_KEY")
	require.NoError(t, err)
	require.Equal(t, "", got)
	_, err = KeyFromEnv(env(map[string]string{"ACME_API_KEY_FILE": dir}), "ACME_API_KEY")
	require.ErrorContains(t, err, "not a regular file")
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = KeyFromEnv(env(map[string]string{"ACME_API_KEY_FILE": empty}), "ACME_API_KEY")
	require.ErrorContains(t, err, "is empty")
}

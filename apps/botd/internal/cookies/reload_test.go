package cookies

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReloadTakesTheJarOnDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cookies.json")
	s, err := Load(Options{Path: path})
	require.NoError(t, err)
	require.Equal(t, 0, s.Len())

	// Another computer's jar arrives (a workspace import).
	other := filepath.Join(dir, "other.json")
	jar := map[Key]Cookie{}
	c := Cookie{Name: "sid", Value: "v", Domain: "example.test", Path: "/"}
	jar[c.Key()] = c
	require.NoError(t, writeJar(other, jar, map[Key]Tombstone{}))
	require.NoError(t, os.Rename(other, path))

	require.NoError(t, s.Reload())
	require.Equal(t, 1, s.Len())
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o600))
	require.Error(t, s.Reload(), "a broken jar is reported, and the loaded one kept")
	require.Equal(t, 1, s.Len())
}

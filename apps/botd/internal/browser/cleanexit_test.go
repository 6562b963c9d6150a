package browser

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestMarkCleanExit: a profile whose Preferences records a crash is marked
// clean, the rest of the file kept byte for byte; a Preferences that is a
// symlink, a hard link, or under a Default that is a symlink is never
// written through; a profile without one is left alone.
func TestMarkCleanExit(t *testing.T) {
	const crashed = `{"profile":{"exit_type":"Crashed","exited_cleanly":false,"name":"Person 1"},"x":12345678901234567890}`
	const clean = `{"profile":{"exit_type":"Normal","exited_cleanly":true,"name":"Person 1"},"x":12345678901234567890}`
	newProfile := func(t *testing.T) (profile, string) {
		base := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(base, "prof", "Default"), 0o700))
		return profile{dir: filepath.Join(base, "prof"), base: base, rel: "prof", uid: os.Getuid()}, filepath.Join(base, "prof", "Default", "Preferences")
	}
	read := func(t *testing.T, path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}

	t.Run("crashed becomes clean", func(t *testing.T) {
		p, prefs := newProfile(t)
		require.NoError(t, os.WriteFile(prefs, []byte(crashed), 0o600))
		require.NoError(t, markCleanExit(p, zerolog.Nop()))
		require.Equal(t, clean, read(t, prefs))
		require.NoError(t, markCleanExit(p, zerolog.Nop()), "a clean profile again")
		require.Equal(t, clean, read(t, prefs))
	})
	t.Run("no Preferences", func(t *testing.T) {
		p, _ := newProfile(t)
		require.NoError(t, markCleanExit(p, zerolog.Nop()))
		require.NoError(t, os.RemoveAll(filepath.Join(p.dir, "Default")))
		require.NoError(t, markCleanExit(p, zerolog.Nop()))
	})
	t.Run("a symlink is not followed", func(t *testing.T) {
		p, prefs := newProfile(t)
		target := filepath.Join(t.TempDir(), "elsewhere")
		require.NoError(t, os.WriteFile(target, []byte(crashed), 0o600))
		require.NoError(t, os.Symlink(target, prefs))
		require.NoError(t, markCleanExit(p, zerolog.Nop()))
		require.Equal(t, crashed, read(t, target))
	})
	t.Run("a hard link is not written", func(t *testing.T) {
		p, prefs := newProfile(t)
		other := filepath.Join(filepath.Dir(p.dir), "other")
		require.NoError(t, os.WriteFile(other, []byte(crashed), 0o600))
		require.NoError(t, os.Link(other, prefs))
		require.NoError(t, markCleanExit(p, zerolog.Nop()))
		require.Equal(t, crashed, read(t, other))
	})
	t.Run("Default a symlink", func(t *testing.T) {
		p, _ := newProfile(t)
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "Preferences"), []byte(crashed), 0o600))
		require.NoError(t, os.RemoveAll(filepath.Join(p.dir, "Default")))
		require.NoError(t, os.Symlink(dir, filepath.Join(p.dir, "Default")))
		require.NoError(t, markCleanExit(p, zerolog.Nop()))
		require.Equal(t, crashed, read(t, filepath.Join(dir, "Preferences")))
	})
	t.Run("another user's file", func(t *testing.T) {
		p, prefs := newProfile(t)
		require.NoError(t, os.WriteFile(prefs, []byte(crashed), 0o600))
		p.uid = os.Getuid() + 1
		require.NoError(t, markCleanExit(p, zerolog.Nop()))
		require.Equal(t, crashed, read(t, prefs))
	})
}

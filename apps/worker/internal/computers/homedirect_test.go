package computers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// TestWorkerOwnedHomeBookkeeping: a worker-owned home is made once and
// kept (its files too) while it exists; a missing one is made again empty
// and marked restore-pending until homeRestored; a restore that did not
// finish leaves the mark, and the next prepare starts again from empty;
// a move's prepare (empty) always starts from empty. Single-screen (and
// attach) machines keep their own homes.
func TestWorkerOwnedHomeBookkeeping(t *testing.T) {
	s, _ := newService(t)
	s.o.LiveHomes = filepath.Join(t.TempDir(), "homes")
	c := store.Computer{ID: "c_1", HomeKey: "c_1"}
	require.Empty(t, s.HomeDir(c, providers.KindSingleScreen))
	require.Empty(t, s.HomeDir(c, providers.KindAttach))
	require.Equal(t, filepath.Join(s.o.LiveHomes, "c_1.local", "home"), s.HomeDir(c, providers.KindLocal))

	dir, fresh, err := s.prepareHome(c, providers.KindLocal, false)
	require.NoError(t, err)
	require.True(t, fresh, "a new home must be restored")
	require.Equal(t, s.HomeDir(c, providers.KindLocal), dir)
	require.FileExists(t, filepath.Join(filepath.Dir(dir), restorePending))
	st, err := os.Stat(s.o.LiveHomes)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o711), st.Mode().Perm(), "others pass through, never list")

	// The restore did not finish: the next prepare starts from empty.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "half-restored"), []byte("x"), 0o644))
	dir, fresh, err = s.prepareHome(c, providers.KindLocal, false)
	require.NoError(t, err)
	require.True(t, fresh)
	require.NoFileExists(t, filepath.Join(dir, "half-restored"))

	// Restored: kept as it is from now on.
	require.NoError(t, s.homeRestored(c, providers.KindLocal))
	require.NoFileExists(t, filepath.Join(filepath.Dir(dir), restorePending))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o644))
	dir, fresh, err = s.prepareHome(c, providers.KindLocal, false)
	require.NoError(t, err)
	require.False(t, fresh, "an existing home is mounted again, nothing restored")
	require.FileExists(t, filepath.Join(dir, "kept"))
	size, err := homeSize(t.Context(), dir)
	require.NoError(t, err)
	require.Equal(t, int64(1), size)

	// Lost: made again, empty, to be restored.
	require.NoError(t, os.RemoveAll(dir))
	dir, fresh, err = s.prepareHome(c, providers.KindLocal, false)
	require.NoError(t, err)
	require.True(t, fresh)
	require.NoError(t, s.homeRestored(c, providers.KindLocal))

	// A move's target starts empty whatever it held.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stale"), []byte("x"), 0o644))
	dir, fresh, err = s.prepareHome(c, providers.KindLocal, true)
	require.NoError(t, err)
	require.True(t, fresh)
	require.NoFileExists(t, filepath.Join(dir, "stale"))

	// Destroyed: every kind's home goes.
	_, _, err = s.prepareHome(c, providers.KindDocker, false)
	require.NoError(t, err)
	require.NoError(t, s.removeHomes(c))
	require.NoDirExists(t, filepath.Dir(s.HomeDir(c, providers.KindLocal)))
	require.NoDirExists(t, filepath.Dir(s.HomeDir(c, providers.KindDocker)))
}

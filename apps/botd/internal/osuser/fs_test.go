package osuser

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

func TestPrepareDirsModesAndNoSymlinkFollow(t *testing.T) {
	testenv.RequireRoot(t) // chown needs root; under CI=true this fails instead of skipping
	dir := t.TempDir()
	me := User{UID: 0, GID: 0}
	shared := filepath.Join(dir, "shared")
	require.NoError(t, PrepareDirs([]Dir{{Path: shared, Owner: me, GID: uint32(BotsGID), Mode: SetgidDir}}))
	fi, err := os.Stat(shared)
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|os.ModeSetgid|0o775, fi.Mode())

	// A planted symlink is replaced by a real directory; its target is
	// left alone.
	target := filepath.Join(dir, "target")
	require.NoError(t, os.Mkdir(target, 0o700))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(target, link))
	require.NoError(t, PrepareDirs([]Dir{{Path: link, Owner: me, Mode: SetgidDir}}))
	fi, err = os.Lstat(link)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
	require.Equal(t, os.ModeDir|os.ModeSetgid|0o775, fi.Mode())
	// A plain file in the way is refused, not clobbered.
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	require.Error(t, PrepareDirs([]Dir{{Path: file, Owner: me, Mode: SetgidDir}}))
	fi, err = os.Stat(target)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	require.Zero(t, fi.Mode()&os.ModeSetgid)
}

package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A link planted where a directory belongs is refused, and its target keeps
// its owner and mode.
func TestEnsureDirRefusesALink(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.Mkdir(victim, 0o700))
	require.NoError(t, os.Mkdir(filepath.Join(base, "a"), 0o755))
	require.NoError(t, os.Symlink(victim, filepath.Join(base, "a", "b")))
	err := EnsureDir(base, "a/b", 0o755, os.Getuid(), os.Getgid())
	require.ErrorIs(t, err, ErrUnsafe)
	st, err := os.Stat(victim)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "the link's target was chmodded")
	// A link as a parent is refused too.
	err = EnsureDir(base, "a/b/c", 0o755, os.Getuid(), os.Getgid())
	require.ErrorIs(t, err, ErrUnsafe)
	_, err = os.Stat(filepath.Join(victim, "c"))
	require.True(t, errors.Is(err, os.ErrNotExist), "created through the link")

	require.NoError(t, EnsureDir(base, "a/new/deep", os.ModeSticky|0o777, os.Getuid(), os.Getgid()))
	st, err = os.Stat(filepath.Join(base, "a/new/deep"))
	require.NoError(t, err)
	require.Equal(t, os.ModeSticky|os.ModeDir|0o777, st.Mode())
}

// WriteFile replaces a planted link (at the name or at its temp name)
// instead of writing through it.
func TestWriteFileNeverFollowsALink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(victim, []byte("root:x:0:0"), 0o644))
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, "args")))
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, ".args.tmp")))
	require.NoError(t, WriteFile(dir, "args", []byte("flags"), 0o640, os.Getuid(), os.Getgid()))
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "root:x:0:0", string(b))
	fi, err := os.Lstat(filepath.Join(dir, "args"))
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular())
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	b, err = os.ReadFile(filepath.Join(dir, "args"))
	require.NoError(t, err)
	require.Equal(t, "flags", string(b))
	_, err = os.Lstat(filepath.Join(dir, ".args.tmp"))
	require.True(t, errors.Is(err, os.ErrNotExist))
}

// A FIFO, a link or another owner's file is refused at once: no read
// blocks.
func TestReadOwnedNeverBlocks(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "lock")
	require.NoError(t, syscall.Mkfifo(fifo, 0o666))
	done := make(chan error, 1)
	go func() { _, err := ReadOwned(fifo, 64, -1); done <- err }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrUnsafe)
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	f := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(f, []byte("123\n"), 0o644))
	require.NoError(t, os.Symlink(f, filepath.Join(dir, "l")))
	_, err := ReadOwned(filepath.Join(dir, "l"), 64, -1)
	require.ErrorIs(t, err, ErrUnsafe)
	b, err := ReadOwned(f, 64, os.Getuid())
	require.NoError(t, err)
	require.Equal(t, "123\n", string(b))
	_, err = ReadOwned(f, 64, os.Getuid()+1)
	require.ErrorIs(t, err, ErrUnsafe)
}

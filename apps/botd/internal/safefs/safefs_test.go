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

// victimDir is a directory holding a file that must survive: what a
// planted link points at.
func victimDir(t *testing.T) (dir, keep string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o700))
	keep = filepath.Join(dir, "sub", "keep")
	require.NoError(t, os.WriteFile(keep, []byte("root's"), 0o600))
	return dir, keep
}

func requireKept(t *testing.T, keep string) {
	t.Helper()
	b, err := os.ReadFile(keep)
	require.NoError(t, err, "the link's target lost its file")
	require.Equal(t, "root's", string(b))
}

// A whole tree goes: files, nested directories, a FIFO, and links, which
// are removed as links (their targets keep their files).
func TestRemoveAllNoFollowRemovesATree(t *testing.T) {
	base := t.TempDir()
	victim, keep := victimDir(t)
	top := filepath.Join(base, "a", "b")
	require.NoError(t, os.MkdirAll(filepath.Join(top, "x", "y", "z"), 0o755))
	for i, f := range []string{"f", "x/g", "x/y/h", "x/y/z/i"} {
		require.NoError(t, os.WriteFile(filepath.Join(top, f), []byte{byte(i)}, 0o600))
	}
	require.NoError(t, syscall.Mkfifo(filepath.Join(top, "x", "fifo"), 0o600))
	require.NoError(t, os.Symlink(victim, filepath.Join(top, "x", "y", "dirlink")))
	require.NoError(t, os.Symlink(keep, filepath.Join(top, "filelink")))
	require.NoError(t, os.Chmod(filepath.Join(top, "x", "y"), 0o500)) // root removes inside anyway
	require.NoError(t, RemoveAllNoFollow(base, "a/b"))
	_, err := os.Lstat(top)
	require.True(t, errors.Is(err, os.ErrNotExist), "still there: %v", err)
	require.DirExists(t, filepath.Join(base, "a"))
	requireKept(t, keep)
	// Missing is not an error; the base itself and climbing out are refused.
	require.NoError(t, RemoveAllNoFollow(base, "a/b"))
	require.NoError(t, RemoveAllNoFollow(base, "gone/b"))
	require.ErrorIs(t, RemoveAllNoFollow(base, "."), ErrUnsafe)
	require.ErrorIs(t, RemoveAllNoFollow(base, "../victim"), ErrUnsafe)
	require.ErrorIs(t, RemoveAllNoFollow(base, "/etc"), ErrUnsafe)
}

// A link at the path itself is removed as the link.
func TestRemoveAllNoFollowLinkAtTheTop(t *testing.T) {
	base := t.TempDir()
	victim, keep := victimDir(t)
	require.NoError(t, os.Mkdir(filepath.Join(base, "screens"), 0o755))
	require.NoError(t, os.Symlink(victim, filepath.Join(base, "screens", "s1")))
	require.NoError(t, RemoveAllNoFollow(base, "screens/s1"))
	_, err := os.Lstat(filepath.Join(base, "screens", "s1"))
	require.True(t, errors.Is(err, os.ErrNotExist), "the link is still there: %v", err)
	requireKept(t, keep)
}

// A link in place of a parent is refused: nothing is removed, neither the
// link nor anything through it.
func TestRemoveAllNoFollowLinkInTheMiddle(t *testing.T) {
	base := t.TempDir()
	victim, keep := victimDir(t)
	require.NoError(t, os.Symlink(victim, filepath.Join(base, "screens")))
	err := RemoveAllNoFollow(base, "screens/sub")
	require.ErrorIs(t, err, ErrUnsafe)
	requireKept(t, keep)
	_, err = os.Lstat(filepath.Join(base, "screens"))
	require.NoError(t, err)
}

// A directory swapped for a link between the walk's unlink attempt and its
// open (the hook is that moment) is unlinked as the link; the target of
// the link keeps its files. Swapped deep in the tree and at the top.
func TestRemoveAllNoFollowDirectorySwappedForALink(t *testing.T) {
	for _, swap := range []string{"a/b/c", "a/b/c/d", "a"} {
		t.Run(swap, func(t *testing.T) {
			base := t.TempDir()
			victim, keep := victimDir(t)
			aside := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(base, "a", "b", "c", "d"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(base, "a", "b", "c", "d", "f"), nil, 0o600))
			swapped := false
			beforeOpenDir = func(dirfd int, name string) {
				if swapped || name != filepath.Base(swap) {
					return
				}
				swapped = true
				p := filepath.Join(base, swap)
				require.NoError(t, os.Rename(p, filepath.Join(aside, "moved")))
				require.NoError(t, os.Symlink(victim, p))
			}
			t.Cleanup(func() { beforeOpenDir = nil })
			require.NoError(t, RemoveAllNoFollow(base, "a"))
			require.True(t, swapped, "the hook never ran")
			_, err := os.Lstat(filepath.Join(base, "a"))
			require.True(t, errors.Is(err, os.ErrNotExist), "still there: %v", err)
			requireKept(t, keep)
		})
	}
}

// OpenDirBelow refuses a link at any component, and opens a real path.
func TestOpenDirBelowRefusesLinks(t *testing.T) {
	base := t.TempDir()
	victim, _ := victimDir(t)
	require.NoError(t, os.MkdirAll(filepath.Join(base, "a", "b"), 0o755))
	require.NoError(t, os.Symlink(victim, filepath.Join(base, "a", "l")))
	for _, rel := range []string{"a/l", "a/l/sub", "../x"} {
		_, err := OpenDirBelow(base, rel)
		require.ErrorIs(t, err, ErrUnsafe, rel)
	}
	for _, rel := range []string{"a/b", ".", ""} {
		fd, err := OpenDirBelow(base, rel)
		require.NoError(t, err, rel)
		require.NoError(t, syscall.Close(fd))
	}
}

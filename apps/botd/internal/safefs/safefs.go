// Package safefs is how root touches files in directories that desktop or
// bot can change (THREAT-MODEL rule 1): every step is relative to a
// directory fd, never follows a symlink, creates with O_EXCL, and sets owner
// and mode on the fd (fchown/fchmod), so a link or FIFO planted by a less
// privileged user is refused, never followed.
package safefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is returned when a path holds something root must not follow:
// a symlink, a non-directory where a directory belongs, a FIFO or device
// where a file belongs, or a file of the wrong owner.
var ErrUnsafe = errors.New("unsafe path")

func unsafef(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsafe, fmt.Sprintf(format, a...))
}

// openDir opens an existing directory without following a final symlink.
func openDirAt(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, unsafef("%s is not a plain directory", name)
	}
	return fd, err
}

// OpenDir opens dir (its last component never a symlink) and returns the
// fd; dir's parents are trusted (root-owned, configured by the operator).
func OpenDir(dir string) (int, error) {
	fd, err := openDirAt(unix.AT_FDCWD, filepath.Clean(dir))
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	return fd, nil
}

// EnsureDir makes base/rel a directory owned by uid:gid with mode, walking
// rel one component at a time below base (trusted) without following any
// symlink. Missing parents are created root 0755; an existing parent is
// entered as it is. A symlink or non-directory anywhere in rel is refused.
func EnsureDir(base, rel string, mode os.FileMode, uid, gid int) error {
	fd, err := OpenDir(base)
	if err != nil {
		return err
	}
	parts := strings.Split(filepath.Clean(rel), "/")
	for i, p := range parts {
		if p == "" || p == "." || p == ".." {
			unix.Close(fd)
			return unsafef("bad path component %q in %s", p, rel)
		}
		last := i == len(parts)-1
		perm := uint32(0o755)
		if last {
			perm = 0o700 // tightened or loosened by fchmod below
		}
		if err := unix.Mkdirat(fd, p, perm); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return fmt.Errorf("prepare %s: %w", filepath.Join(base, rel), err)
		}
		next, err := openDirAt(fd, p)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", filepath.Join(base, rel), err)
		}
		fd = next
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", filepath.Join(base, rel), err)
	}
	m := uint32(mode.Perm())
	if mode&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	if mode&os.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if err := unix.Fchmod(fd, m); err != nil {
		return fmt.Errorf("chmod %s: %w", filepath.Join(base, rel), err)
	}
	return nil
}

// WriteFile replaces dir/name with data, owned by uid:gid with mode: a new
// file is created O_EXCL|O_NOFOLLOW next to it, chowned and chmodded on its
// fd, then renamed over name (a symlink at name is replaced, never
// followed). dir itself must not be a symlink.
func WriteFile(dir, name string, data []byte, mode os.FileMode, uid, gid int) error {
	if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
		return unsafef("bad file name %q", name)
	}
	dfd, err := OpenDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	tmp := "." + name + ".tmp"
	_ = unix.Unlinkat(dfd, tmp, 0) // a leftover (or a planted link) goes; unlink never follows
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	err = f.Chown(uid, gid)
	if err == nil {
		err = f.Chmod(mode.Perm())
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// ReadOwned reads at most max bytes of path, a file in a directory others
// can write (e.g. /tmp): opened O_NONBLOCK|O_NOFOLLOW so a FIFO or a link
// never blocks or redirects the read, and refused unless it is a regular
// file owned by uid (-1: any owner).
func ReadOwned(path string, max int64, uid int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, unsafef("%s is a symlink", path)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, unsafef("%s is not a regular file", path)
	}
	if uid >= 0 && int(st.Uid) != uid {
		return nil, unsafef("%s is owned by uid %d, not %d", path, st.Uid, uid)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// CheckSocket reports whether path is a unix socket owned by uid (and not a
// symlink): a socket someone else placed is never dialed. In a sticky
// directory such as /tmp/.X11-unix its owner alone may replace it, so the
// check holds for the dial that follows.
func CheckSocket(path string, uid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return unsafef("%s is not a socket", path)
	}
	if int(st.Uid) != uid {
		return unsafef("%s is owned by uid %d, not %d", path, st.Uid, uid)
	}
	return nil
}

// EnsureRootDir makes path a directory owned by root:root with mode (sticky
// and setgid honoured), refusing a symlink or non-directory in its place.
// Its parent must be trusted.
func EnsureRootDir(path string, mode os.FileMode) error {
	dir, name := filepath.Split(filepath.Clean(path))
	return EnsureDir(dir, name, mode, 0, 0)
}

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

// OpenDirBelow opens base/rel as a directory and returns its fd. base is
// trusted (its last component is still never a symlink); every component of
// rel is opened relative to the one before with O_NOFOLLOW|O_DIRECTORY, so
// a symlink (or non-directory) anywhere in rel is refused with ErrUnsafe,
// never followed. rel "" or "." is base itself.
func OpenDirBelow(base, rel string) (int, error) {
	fd, err := OpenDir(base)
	if err != nil {
		return -1, err
	}
	parts, err := splitRel(rel)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	for _, p := range parts {
		next, err := openDirAt(fd, p)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", filepath.Join(base, rel), err)
		}
		fd = next
	}
	return fd, nil
}

// splitRel splits a relative path into components, refusing "..", absolute
// paths and empty components ("" and "." alone mean no component).
func splitRel(rel string) ([]string, error) {
	rel = filepath.Clean(rel)
	if rel == "." {
		return nil, nil
	}
	if filepath.IsAbs(rel) {
		return nil, unsafef("%s is not a relative path", rel)
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, unsafef("bad path component %q in %s", p, rel)
		}
	}
	return parts, nil
}

// beforeOpenDir, when set (tests only), runs in RemoveAllNoFollow's walk
// just before a directory entry is opened: the moment a racing user could
// swap that directory for a link.
var beforeOpenDir func(dirfd int, name string)

// removeRetries bounds how often one entry is tried again when it changes
// under the walk (a directory swapped for a link, a file added to a
// directory being emptied).
const removeRetries = 8

// RemoveAllNoFollow removes base/rel and everything below it, like
// os.RemoveAll, without ever following a symlink: base is trusted (root's,
// its last component not a link); every component of rel's parents is
// entered with O_NOFOLLOW|O_DIRECTORY, so a link there is refused with
// ErrUnsafe and nothing is removed; below that every entry is unlinked
// relative to its directory's fd (unlinkat), a directory is entered with
// O_NOFOLLOW|O_DIRECTORY and emptied through its own fd, and a symlink is
// removed as a link. A directory swapped for a link during the walk is
// unlinked as that link. A missing path is not an error.
func RemoveAllNoFollow(base, rel string) error {
	parts, err := splitRel(rel)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return unsafef("refusing to remove the trusted base %s itself", base)
	}
	parent := filepath.Join(parts[:len(parts)-1]...)
	fd, err := OpenDirBelow(base, parent)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := removeAt(fd, parts[len(parts)-1], 0); err != nil {
		return fmt.Errorf("remove %s: %w", filepath.Join(base, rel), err)
	}
	return nil
}

// removeAt removes name in the directory dirfd: unlinked if it is anything
// but a directory (a symlink included), else opened without following,
// emptied through its fd and removed.
func removeAt(dirfd int, name string, depth int) error {
	if depth > 4096 {
		return unsafef("directory tree too deep at %s", name)
	}
	for attempt := 0; ; attempt++ {
		uerr := unix.Unlinkat(dirfd, name, 0)
		if uerr == nil || errors.Is(uerr, unix.ENOENT) {
			return nil
		}
		if !errors.Is(uerr, unix.EISDIR) && !errors.Is(uerr, unix.EPERM) {
			return uerr
		}
		if attempt >= removeRetries {
			return fmt.Errorf("%s keeps changing: %w", name, uerr)
		}
		if beforeOpenDir != nil {
			beforeOpenDir(dirfd, name)
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			if errors.Is(uerr, unix.EPERM) {
				return uerr // a file root may not unlink, not a directory
			}
			continue // no longer a directory (a link now): unlink it as it is
		}
		if err != nil {
			return err
		}
		err = emptyDir(fd, depth)
		unix.Close(fd)
		if err != nil {
			return err
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOTDIR) {
			return err
		}
		// Something was added meanwhile, or the name is no longer a
		// directory: go round again.
	}
}

// emptyDir removes every entry of the directory fd.
func emptyDir(fd int, depth int) error {
	buf := make([]byte, 8192)
	for pass := 0; ; pass++ {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return err
		}
		var names []string
		for {
			n, err := unix.Getdents(fd, buf)
			if err != nil {
				return err
			}
			if n <= 0 {
				break
			}
			_, _, names = unix.ParseDirent(buf[:n], -1, names)
		}
		if len(names) == 0 {
			return nil
		}
		if pass > removeRetries {
			return fmt.Errorf("directory keeps filling: %w", unix.ENOTEMPTY)
		}
		for _, n := range names {
			if err := removeAt(fd, n, depth+1); err != nil {
				return err
			}
		}
	}
}

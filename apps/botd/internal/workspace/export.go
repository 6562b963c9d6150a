package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/open-bot/computer/apps/botd/internal/files"
)

// exporter writes one archive.
type exporter struct {
	ctx context.Context
	tw  *tar.Writer
	buf []byte
	sum Summary
}

// export writes the archive; the caller holds the lock and has quiesced.
func (s *Service) export(ctx context.Context, w io.Writer) (Summary, error) {
	home, err := os.OpenRoot(s.o.Home)
	if err != nil {
		return Summary{}, err
	}
	defer home.Close()
	e := &exporter{ctx: ctx, tw: tar.NewWriter(w), buf: make([]byte, 1<<20)}
	if err := e.area(home, wsDir, "bot", false); err != nil {
		return e.sum, err
	}
	if err := e.profiles(home); err != nil {
		return e.sum, err
	}
	if err := e.cookies(home); err != nil {
		return e.sum, err
	}
	return e.sum, e.tw.Close()
}

// area archives the tree at dir (relative to base) under prefix; a missing
// dir is empty.
func (e *exporter) area(base *os.Root, dir, prefix string, profile bool) error {
	root, err := openArea(base, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	return e.walk(root, ".", prefix, profile)
}

// profiles archives desktop/screens/<id>/chromium for every screen.
func (e *exporter) profiles(home *os.Root) error {
	root, err := openArea(home, screensDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if errors.Is(err, errNotArea) {
		e.sum.Skipped++ // screens/ swapped for a link: no profile travels
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	ids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !validScreenID(id) {
			continue
		}
		rel := id + "/chromium"
		err := e.area(root, rel, screensDir+"/"+rel, true)
		if errors.Is(err, errNotArea) {
			e.sum.Skipped++ // a link or file where a profile should be
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// cookies archives .botd/cookies.json when it exists.
func (e *exporter) cookies(home *os.Root) error {
	root, err := openArea(home, stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Lstat(cookieName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		e.sum.Skipped++
		return nil
	}
	return e.file(root, cookieName, stateDir+"/"+cookieName)
}

// walk archives rel (inside root) and, for a directory, its contents.
func (e *exporter) walk(root *os.Root, rel, prefix string, profile bool) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	name := prefix
	if rel != "." {
		name = prefix + "/" + rel
	}
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	base := path.Base(rel)
	if rel != "." {
		if !utf8.ValidString(base) || (profile && Transient(rel, fi.IsDir())) || strings.HasPrefix(base, files.TempPrefix) || strings.HasPrefix(base, importTempPrefix) {
			e.sum.Skipped++
			return nil
		}
	}
	switch {
	case fi.IsDir():
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = name + "/"
		if err := e.tw.WriteHeader(hdr); err != nil {
			return err
		}
		e.sum.Dirs++
		d, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			if err := e.walk(root, path.Join(rel, n), prefix, profile); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := root.Readlink(rel)
		if err != nil {
			return nil
		}
		if !portableLink(rel, target) || !utf8.ValidString(target) {
			e.sum.Skipped++
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		hdr.Name = name
		e.sum.Symlinks++
		return e.tw.WriteHeader(hdr)
	case fi.Mode().IsRegular():
		return e.file(root, rel, name)
	default:
		e.sum.Skipped++ // sockets, FIFOs, devices
		return nil
	}
}

// file archives one regular file from an open descriptor.
func (e *exporter) file(root *os.Root, rel, name string) error {
	// O_NONBLOCK: should rel have become a FIFO since the Lstat, open must
	// not wait for a writer. os.Root adds O_NOFOLLOW-and-check itself.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		e.sum.Skipped++
		return nil
	}
	hdr, err := tar.FileInfoHeader(fi, "")
	if err != nil {
		return err
	}
	hdr.Name = name
	if err := e.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(onlyWriter{e.tw}, io.LimitReader(onlyReader{f}, fi.Size()), e.buf)
	if err != nil {
		return err
	}
	// A file that shrank while being read is padded with zeros so the
	// archive stays well-formed; it grew: the rest is left out.
	for n < fi.Size() {
		k := min(int64(len(e.buf)), fi.Size()-n)
		clear(e.buf[:k])
		m, err := e.tw.Write(e.buf[:k])
		n += int64(m)
		if err != nil {
			return err
		}
	}
	e.sum.Files++
	e.sum.Bytes += fi.Size()
	return nil
}

// onlyWriter and onlyReader hide ReadFrom/WriteTo so CopyBuffer uses our
// large buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/files"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/transient"
)

// exporter writes one archive.
type exporter struct {
	ctx context.Context
	tw  *tar.Writer
	cw  *capWriter
	buf []byte
	sum Summary
	// maxContent and maxEntries are what an import accepts: an export
	// never produces an archive its own import would refuse.
	maxContent int64
	maxEntries int
	entries    int
	// quiesce, when set, quiesces one screen's browser while its profile
	// is copied (Options.QuiesceScreen).
	quiesce func(ctx context.Context, id string) (resume func(), err error)
	log     zerolog.Logger
}

// refusedError stops an export whose archive would exceed a limit: the
// archive's bytes, or what an import accepts. Its text is the reason the
// client gets (X-Export-Error, or a 413 before any byte was sent).
type refusedError struct{ reason string }

func (r *refusedError) Error() string { return r.reason }

// capWriter passes at most limit bytes; a write that would go beyond
// writes nothing and fails with a refusedError.
type capWriter struct {
	w     io.Writer
	n     int64
	limit int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // an empty write would commit the response's headers
	}
	if c.n+int64(len(p)) > c.limit {
		return 0, &refusedError{fmt.Sprintf("the portable home's archive is larger than the export's limit of %d bytes", c.limit)}
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// export writes the archive; the caller holds the lock and has quiesced
// (or the exporter quiesces each browser as it copies its profile).
// maxBytes (when positive and below what an import reads) caps the
// archive's bytes: the export stops with a refusedError rather than go
// beyond it. Screen recordings (desktop/screens/<id>/recordings) travel
// only when recordings is set.
func (s *Service) export(ctx context.Context, w io.Writer, maxBytes int64, recordings bool) (Summary, error) {
	home, err := os.OpenRoot(s.o.Home)
	if err != nil {
		return Summary{}, err
	}
	defer home.Close()
	limit := shared.WorkspaceWireLimit(s.o.MaxImportBytes, s.o.MaxImportEntries)
	if maxBytes > 0 && maxBytes < limit {
		limit = maxBytes
	}
	cw := &capWriter{w: w, limit: limit}
	e := &exporter{ctx: ctx, tw: tar.NewWriter(cw), cw: cw, buf: make([]byte, 1<<20),
		maxContent: s.o.MaxImportBytes, maxEntries: s.o.MaxImportEntries, quiesce: s.o.QuiesceScreen, log: s.o.Log}
	if err := e.area(home, wsDir, "bot", false); err != nil {
		return e.sum, err
	}
	if err := e.profiles(home, "chromium"); err != nil {
		return e.sum, err
	}
	if recordings {
		if err := e.profiles(home, "recordings"); err != nil {
			return e.sum, err
		}
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

// profiles archives desktop/screens/<id>/<sub> for every screen: sub is
// chromium (the profile) or recordings.
func (e *exporter) profiles(home *os.Root, sub string) error {
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
		rel := id + "/" + sub
		var err error
		if sub == "chromium" {
			err = e.profile(root, id, rel)
		} else {
			err = e.area(root, rel, screensDir+"/"+rel, false)
		}
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

// profile archives one screen's profile, its browser quiesced (alone)
// meanwhile when the export quiesces per screen.
func (e *exporter) profile(root *os.Root, id, rel string) error {
	if e.quiesce != nil {
		resume, err := e.quiesce(e.ctx, id)
		if err != nil {
			return &quiesceError{id: id, err: err}
		}
		defer resume()
	}
	return e.area(root, rel, screensDir+"/"+rel, true)
}

// quiesceError is a browser that could not be quiesced for its profile's
// copy: the export stops rather than carry an inconsistent profile.
type quiesceError struct {
	id  string
	err error
}

func (q *quiesceError) Error() string {
	return fmt.Sprintf("quiesce the browser of screen %s: %v", q.id, q.err)
}

func (q *quiesceError) Unwrap() error { return q.err }

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
		if !utf8.ValidString(base) || (profile && transient.Transient(rel, fi.IsDir())) || strings.HasPrefix(base, files.TempPrefix) || strings.HasPrefix(base, importTempPrefix) {
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
		if err := e.header(hdr); err != nil {
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
		return e.header(hdr)
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
	if sparse(f, fi) {
		// Left out, not stored: see sparse.
		e.sum.Skipped++
		e.log.Warn().Str("file", name).Int64("size", fi.Size()).
			Msg("workspace export: a sparse file is left out of the archive")
		return nil
	}
	// A file that cannot fit is refused before a byte of it is read.
	if e.cw.n+fi.Size() > e.cw.limit {
		return &refusedError{fmt.Sprintf("the portable home's archive is larger than the export's limit of %d bytes (at %q, %d bytes)", e.cw.limit, short(name), fi.Size())}
	}
	if e.sum.Bytes+fi.Size() > e.maxContent {
		return &refusedError{fmt.Sprintf("the portable home holds more than %d bytes, more than an import accepts (at %q, %d bytes)", e.maxContent, short(name), fi.Size())}
	}
	hdr, err := tar.FileInfoHeader(fi, "")
	if err != nil {
		return err
	}
	hdr.Name = name
	if err := e.header(hdr); err != nil {
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

// header writes one entry's header, counting the entries against what an
// import accepts.
func (e *exporter) header(hdr *tar.Header) error {
	e.entries++
	if e.entries > e.maxEntries {
		return &refusedError{fmt.Sprintf("the portable home has more than %d entries, more than an import accepts", e.maxEntries)}
	}
	return e.tw.WriteHeader(hdr)
}

// sparseSlack is how much of a file may be holes and still be archived.
const sparseSlack = 1 << 20

// Linux lseek whences (not in package syscall).
const (
	seekData = 3
	seekHole = 4
)

// sparse reports whether f has more than sparseSlack bytes of holes. Such a
// file is left out of the archive (counted as skipped), never stored, and
// never expanded: its apparent size costs its owner nothing (truncate -s 1P
// uses no disk), while archived it would cost the worker that many bytes of
// zeros, and Go's archive/tar writes no sparse entries (nor would the
// import recreate the holes). Left out rather than failing the checkpoint,
// so the rest of the home is still kept. The check counts the holes with
// SEEK_DATA/SEEK_HOLE; the loop stops once they pass sparseSlack, so a
// file of many small holes costs at most sparseSlack/4096 steps. f is
// rewound.
func sparse(f *os.File, fi os.FileInfo) bool {
	size := fi.Size()
	if size <= sparseSlack {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && st.Blocks*512 >= size {
		return false // every byte has a block: no holes
	}
	defer f.Seek(0, io.SeekStart)
	var holes, off int64
	for off < size && holes <= sparseSlack {
		d, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			holes += size - off // a hole to the end
			break
		}
		if err != nil {
			// No SEEK_DATA here: judge by the blocks.
			return ok && st.Blocks*512+sparseSlack < size
		}
		holes += d - off
		h, err := f.Seek(d, seekHole)
		if err != nil || h <= d {
			return ok && st.Blocks*512+sparseSlack < size
		}
		off = h
	}
	return holes > sparseSlack
}

// onlyWriter and onlyReader hide ReadFrom/WriteTo so CopyBuffer uses our
// large buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

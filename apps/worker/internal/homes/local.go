package homes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Local keeps checkpoints on this host (CONTROL-PLANE.md, Homes):
//
//	DATA_DIR/homes/<home-key>                 the latest workspace tar
//	DATA_DIR/home-revisions/<home-key>.json   its revision
//
// A Put streams into a staged file beside the tar (".<key>.staging-*"),
// fsyncs it, records the new revision as pending in the metadata, renames
// the staged file over the tar, fsyncs the directory, and only then advances
// the metadata's revision. A kill at any point leaves either the previous
// tar with its revision, or (killed between the rename and the final
// metadata write) the new, complete tar with the pending revision that
// describes it, which the next Latest or Open adopts after checking its
// digest. Stale staged files from a killed Put are removed by NewLocal and
// never read.
type Local struct {
	homes, revs string
	locks       keyLocks
	now         func() time.Time

	// MinFree is the free space a Put leaves on the disk holding the
	// store (COMPUTER_HOME_MIN_FREE_BYTES; default DefaultMinFree): it is
	// checked before the staged file is made and as it grows, and a Put
	// that would go below it fails with ErrNoSpace, the previous
	// checkpoint kept. That disk also holds the worker's database and
	// every team's checkpoints.
	MinFree int64

	// Test hooks: wrapWriter wraps the staged file's writer (a full-disk
	// stand-in); crash, when it returns an error at a named step
	// ("pending", "renamed"), stops the Put there as a kill would.
	wrapWriter func(io.Writer) io.Writer
	crash      func(step string) error
}

// Metadata file layout.
type localMeta struct {
	Revision *Revision `json:"revision,omitempty"`
	// Pending is the revision being put: set before the staged tar is
	// renamed into place, cleared once Revision is advanced.
	Pending *Revision `json:"pending,omitempty"`
}

// NewLocal opens (creating) the store under dataDir and removes staged
// files left by killed checkpoints.
func NewLocal(dataDir string) (*Local, error) {
	if dataDir == "" {
		return nil, errors.New("home store: empty DATA_DIR")
	}
	l := &Local{
		homes:   filepath.Join(dataDir, "homes"),
		revs:    filepath.Join(dataDir, "home-revisions"),
		now:     time.Now,
		MinFree: DefaultMinFree,
	}
	for _, d := range []string{l.homes, l.revs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("home store: %w", err)
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("home store: %w", err)
		}
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, ".") && (strings.Contains(n, ".staging-") || strings.Contains(n, ".tmp-")) {
				_ = os.Remove(filepath.Join(d, n))
			}
		}
	}
	return l, nil
}

func (l *Local) tarPath(key string) string  { return filepath.Join(l.homes, key) }
func (l *Local) metaPath(key string) string { return filepath.Join(l.revs, key+".json") }

// Put implements Store.
func (l *Local) Put(ctx context.Context, key string, r io.Reader) (Revision, error) {
	if err := ValidKey(key); err != nil {
		return Revision{}, err
	}
	unlock, err := l.locks.lock(ctx, key)
	if err != nil {
		return Revision{}, err
	}
	defer unlock()

	meta, err := l.resolveLocked(key)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		// A corrupt current checkpoint does not stop a new one replacing it.
		return Revision{}, err
	}
	room := &roomWriter{dir: l.homes, minFree: l.MinFree}
	if err := room.check(0); err != nil {
		return Revision{}, diskErr("stage checkpoint", err)
	}
	f, err := os.CreateTemp(l.homes, "."+key+".staging-*")
	if err != nil {
		return Revision{}, diskErr("stage checkpoint", err)
	}
	staged := f.Name()
	done := false
	defer func() {
		if !done {
			_ = os.Remove(staged)
		}
	}()
	var w io.Writer = f
	if l.wrapWriter != nil {
		w = l.wrapWriter(f)
	}
	room.w = w
	w = room
	hr := newHashingReader(ctxReader{ctx, r})
	_, err = io.Copy(w, hr)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Revision{}, diskErr("stage checkpoint", err)
	}
	if hr.n == 0 {
		return Revision{}, ErrEmpty
	}
	rev := Revision{Number: 1, Size: hr.n, SHA256: hr.sum(), At: l.now().UTC().Truncate(time.Millisecond)}
	if meta.Revision != nil {
		rev.Number = meta.Revision.Number + 1
	}
	// Record the intent, then swap the tar, then advance.
	if err := l.writeMeta(key, localMeta{Revision: meta.Revision, Pending: &rev}); err != nil {
		return Revision{}, err
	}
	if err := l.hook("pending"); err != nil {
		return Revision{}, err
	}
	if err := os.Rename(staged, l.tarPath(key)); err != nil {
		return Revision{}, diskErr("swap checkpoint", err)
	}
	done = true
	if err := syncDir(l.homes); err != nil {
		return Revision{}, diskErr("swap checkpoint", err)
	}
	if err := l.hook("renamed"); err != nil {
		return Revision{}, err
	}
	if err := l.writeMeta(key, localMeta{Revision: &rev}); err != nil {
		return Revision{}, err
	}
	return rev, nil
}

func (l *Local) hook(step string) error {
	if l.crash == nil {
		return nil
	}
	return l.crash(step)
}

// Latest implements Store.
func (l *Local) Latest(ctx context.Context, key string) (Revision, bool, error) {
	if err := ValidKey(key); err != nil {
		return Revision{}, false, err
	}
	unlock, err := l.locks.lock(ctx, key)
	if err != nil {
		return Revision{}, false, err
	}
	defer unlock()
	meta, err := l.resolveLocked(key)
	if err != nil {
		return Revision{}, false, err
	}
	if meta.Revision == nil {
		return Revision{}, false, nil
	}
	return *meta.Revision, true, nil
}

// Open implements Store. The tar is hashed in full before the reader is
// returned; the open descriptor then stays valid even if a later Put
// renames a new tar over the path.
func (l *Local) Open(ctx context.Context, key string) (io.ReadCloser, Revision, error) {
	if err := ValidKey(key); err != nil {
		return nil, Revision{}, err
	}
	unlock, err := l.locks.lock(ctx, key)
	if err != nil {
		return nil, Revision{}, err
	}
	defer unlock()
	meta, err := l.resolveLocked(key)
	if err != nil {
		return nil, Revision{}, err
	}
	if meta.Revision == nil {
		return nil, Revision{}, ErrNotFound
	}
	rev := *meta.Revision
	f, err := os.Open(l.tarPath(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, Revision{}, fmt.Errorf("%w: home %s revision %d: the tar is missing", ErrCorrupt, key, rev.Number)
	}
	if err != nil {
		return nil, Revision{}, fmt.Errorf("home store: %w", err)
	}
	if err := verifyFile(ctx, f, rev); err != nil {
		f.Close()
		return nil, Revision{}, fmt.Errorf("home %s revision %d: %w", key, rev.Number, err)
	}
	return f, rev, nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	unlock, err := l.locks.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	// Metadata first: a kill between the two leaves an unrecorded tar, which
	// Latest reports as no checkpoint.
	for _, p := range []string{l.metaPath(key), l.tarPath(key)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("home store: %w", err)
		}
	}
	_ = syncDir(l.revs)
	return syncDir(l.homes)
}

// resolveLocked reads key's metadata and settles a pending revision left by
// a Put killed between its rename and its final metadata write: if the tar
// matches the pending revision it becomes the revision; if it still matches
// the recorded one the pending entry is dropped.
func (l *Local) resolveLocked(key string) (localMeta, error) {
	var m localMeta
	b, err := os.ReadFile(l.metaPath(key))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("home store: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: home %s: unreadable metadata: %v", ErrCorrupt, key, err)
	}
	if m.Pending == nil {
		return m, nil
	}
	f, err := os.Open(l.tarPath(key))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("home store: %w", err)
	}
	next := localMeta{Revision: m.Revision}
	if f != nil {
		if verifyFile(context.Background(), f, *m.Pending) == nil {
			next.Revision = m.Pending
		}
		f.Close()
	}
	if err := l.writeMeta(key, next); err != nil {
		return m, err
	}
	return next, nil
}

// writeMeta replaces key's metadata atomically (temp file, fsync, rename,
// fsync the directory).
func (l *Local) writeMeta(key string, m localMeta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(l.revs, "."+key+".json.tmp-*")
	if err != nil {
		return diskErr("write checkpoint metadata", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, l.metaPath(key))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return diskErr("write checkpoint metadata", err)
	}
	return diskErr("write checkpoint metadata", syncDir(l.revs))
}

// verifyFile checks f's size and SHA-256 against rev and rewinds it.
func verifyFile(ctx context.Context, f *os.File, rev Revision) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != rev.Size {
		return fmt.Errorf("%w: %d bytes stored, %d recorded", ErrCorrupt, st.Size(), rev.Size)
	}
	hr := newHashingReader(ctxReader{ctx, f})
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return err
	}
	if got := hr.sum(); got != rev.SHA256 {
		return fmt.Errorf("%w: SHA-256 %s does not match the recorded %s", ErrCorrupt, got, rev.SHA256)
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// DefaultMinFree is Local's default MinFree: 1 GiB.
const DefaultMinFree = 1 << 30

// roomWriter stops a staged checkpoint before the disk's free space goes
// below minFree: it knows how much it may write from the free space it
// last saw, and looks again (statfs) when it reaches that or every
// recheck bytes, as other writers share the disk.
type roomWriter struct {
	w       io.Writer
	dir     string
	minFree int64
	written int64
	allowed int64 // written may grow up to this
	checked int64 // written at the last statfs
}

const roomRecheck = 64 << 20

func (r *roomWriter) Write(p []byte) (int, error) {
	next := r.written + int64(len(p))
	if next > r.allowed || next-r.checked > roomRecheck {
		if err := r.check(int64(len(p))); err != nil {
			return 0, err
		}
	}
	n, err := r.w.Write(p)
	r.written += int64(n)
	return n, err
}

// check reads the disk's free space and fails with ErrNoSpace unless need
// more bytes fit above minFree.
func (r *roomWriter) check(need int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.dir, &st); err != nil {
		return err
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	r.checked = r.written
	r.allowed = r.written + free - r.minFree
	if free-need < r.minFree {
		return fmt.Errorf("%w: the disk holding %s has %d bytes free and keeps %d (COMPUTER_HOME_MIN_FREE_BYTES); %d bytes of the checkpoint were written",
			syscall.ENOSPC, r.dir, free, r.minFree, r.written)
	}
	return nil
}

// diskErr wraps err for step, naming a full disk as ErrNoSpace.
func diskErr(step string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("home store: %s: %w (the previous checkpoint is kept): %v", step, ErrNoSpace, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("home store: %s: %w (the previous checkpoint is kept)", step, err)
	}
	return fmt.Errorf("home store: %s (the previous checkpoint is kept): %w", step, err)
}

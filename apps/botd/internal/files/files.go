// Package files serves the workspace's files: GET/PUT/DELETE /files?path=
// and GET /files/list?path=. Every path is relative to the workspace
// ($BOTD_HOME/bot) and is resolved with os.Root, so neither "..", absolute
// names nor symlinks (planted by a bot at any moment) can reach outside it:
// the kernel walks each component beneath the root's directory descriptor.
//
// Written files belong to bot:bots with mode 0664 (umask 002) — or keep the
// permission bits of the file they replace — and are written atomically: a
// temporary file in the same directory, fsync, then rename over the target.
// A PUT onto a symlink replaces the link itself, never what it points to.
package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/pkg/shared"
)

// Defaults for Options' zero values.
const (
	DefaultMaxWriteBytes  = 256 << 20
	DefaultMaxListEntries = 10000
)

// FileMode is the mode of a new file (0666 under umask 002).
const FileMode os.FileMode = 0o664

// DirMode is the mode of a directory PUT creates (setgid, so the bots group
// is inherited, as in the design's table).
const DirMode = os.ModeSetgid | 0o775

// TempPrefix starts the name of every temporary file of an atomic write.
// Workspace export leaves such files out.
const TempPrefix = ".botd-tmp-"

// Options configures the service.
type Options struct {
	// Workspace is the root every path is relative to ($BOTD_HOME/bot).
	Workspace string
	// Owner owns written files and created directories (bot).
	Owner osuser.User
	// GID is the group of written files (0 = osuser.BotsGID).
	GID uint32
	// MaxWriteBytes caps a PUT body (0 = DefaultMaxWriteBytes).
	MaxWriteBytes int64
	// MaxListEntries caps one listing (0 = DefaultMaxListEntries).
	MaxListEntries int
	Log            zerolog.Logger
}

// Service implements the file routes.
type Service struct {
	o Options
}

// New returns the service with defaults filled in.
func New(o Options) *Service {
	if o.GID == 0 {
		o.GID = uint32(osuser.BotsGID)
	}
	if o.MaxWriteBytes <= 0 {
		o.MaxWriteBytes = DefaultMaxWriteBytes
	}
	if o.MaxListEntries <= 0 {
		o.MaxListEntries = DefaultMaxListEntries
	}
	return &Service{o: o}
}

// Register adds the routes to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /files", s.get)
	mux.HandleFunc("PUT /files", s.put)
	mux.HandleFunc("DELETE /files", s.delete)
	mux.HandleFunc("GET /files/list", s.list)
}

// openRoot opens the workspace fresh for each request, so a root is never
// held across a change of the directory itself.
func (s *Service) openRoot() (*os.Root, error) {
	return os.OpenRoot(s.o.Workspace)
}

// fail renders err, logging only what is not a caller's mistake.
func (s *Service) fail(w http.ResponseWriter, r *http.Request, err error) {
	err = MapError(err)
	var ae *shared.APIError
	if !errors.As(err, &ae) {
		s.o.Log.Error().Err(err).Str("method", r.Method).Str("route", r.URL.Path).Msg("file operation failed")
	}
	httpx.WriteErr(w, err)
}

func (s *Service) get(w http.ResponseWriter, r *http.Request) {
	name, err := CheckPath(r.URL.Query().Get("path"), false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	root, err := s.openRoot()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer root.Close()
	// O_NONBLOCK: a FIFO planted in the workspace must not hang the handler.
	f, err := root.OpenFile(name, os.O_RDONLY|nonblock, 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if fi.IsDir() {
		s.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path is a directory: use GET /files/list"))
		return
	}
	if !fi.Mode().IsRegular() {
		s.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path is not a regular file"))
		return
	}
	// A hard link is another name for a file that may live outside the
	// workspace (e.g. one bot linked to a root file): a file with more than
	// one link is served only when bot owns it.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 && st.Uid != s.o.Owner.UID {
		s.fail(w, r, shared.Errorf(http.StatusForbidden, shared.CodeForbidden, "path is a hard link to a file the bot does not own"))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-File-Mode", strconv.FormatUint(uint64(fi.Mode().Perm()), 8))
	http.ServeContent(w, r, "", fi.ModTime(), io.NewSectionReader(f, 0, fi.Size()))
}

// PutResult is the answer to a PUT.
type PutResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

func (s *Service) put(w http.ResponseWriter, r *http.Request) {
	name, err := CheckPath(r.URL.Query().Get("path"), false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.ContentLength > s.o.MaxWriteBytes {
		s.fail(w, r, shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "file is larger than %d bytes", s.o.MaxWriteBytes))
		return
	}
	root, err := s.openRoot()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer root.Close()
	n, err := s.write(root, name, http.MaxBytesReader(w, r.Body, s.o.MaxWriteBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "file is larger than %d bytes", s.o.MaxWriteBytes)
		}
		s.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, PutResult{Path: name, Size: n})
}

// write replaces name with body's bytes atomically.
func (s *Service) write(root *os.Root, name string, body io.Reader) (int64, error) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if err := MkdirAll(root, dir, DirMode, int(s.o.Owner.UID), int(s.o.GID)); err != nil {
		return 0, err
	}
	mode := FileMode
	if fi, err := root.Lstat(name); err == nil {
		switch {
		case fi.IsDir():
			return 0, shared.Errorf(http.StatusConflict, shared.CodeConflict, "path is a directory")
		case fi.Mode().IsRegular():
			mode = fi.Mode().Perm()
		}
	}
	tmp := path.Join(dir, TempPrefix+randHex()+"-"+truncateName(base, 100))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = root.Remove(tmp)
		}
	}()
	buf := make([]byte, 256<<10)
	n, err := io.CopyBuffer(onlyWriter{f}, body, buf)
	if err != nil {
		return 0, err
	}
	// Owner and mode go on the descriptor, so no symlink swap can redirect them.
	if err := f.Chown(int(s.o.Owner.UID), int(s.o.GID)); err != nil {
		return 0, err
	}
	if err := f.Chmod(mode); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	done = true
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return 0, err
	}
	return n, nil
}

// onlyWriter hides *os.File's ReadFrom so io.CopyBuffer uses our buffer and
// MaxBytesReader's error surfaces unchanged.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

func truncateName(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// MkdirAll creates dir and its missing parents beneath root, each owned by
// uid:gid with mode. Existing components are left as they are (a symlink
// among them is followed by os.Root, inside the root only).
func MkdirAll(root *os.Root, dir string, mode os.FileMode, uid, gid int) error {
	if dir == "." || dir == "" {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		cur = path.Join(cur, c)
		fi, err := root.Stat(cur)
		if err == nil {
			if !fi.IsDir() {
				return shared.Errorf(http.StatusConflict, shared.CodeConflict, "a parent of the path is not a directory")
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := root.Mkdir(cur, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		d, err := root.OpenFile(cur, os.O_RDONLY|directory, 0)
		if err != nil {
			return err
		}
		err = errors.Join(d.Chown(uid, gid), d.Chmod(mode))
		_ = d.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) delete(w http.ResponseWriter, r *http.Request) {
	name, err := CheckPath(r.URL.Query().Get("path"), true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if name == "." {
		s.fail(w, r, shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied, "the workspace root cannot be deleted"))
		return
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	root, err := s.openRoot()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer root.Close()
	// Lstat first: a missing path is a 404 even for RemoveAll (which
	// succeeds on nothing), and a symlink is removed itself, never followed.
	if _, err := root.Lstat(name); err != nil {
		s.fail(w, r, err)
		return
	}
	if recursive {
		err = root.RemoveAll(name)
	} else {
		err = root.Remove(name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

// Entry is one item of a listing.
type Entry struct {
	Name string `json:"name"`
	// Type is file, dir, symlink or other.
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"modTime"`
	// Target is a symlink's target, as written.
	Target string `json:"target,omitempty"`
}

// Listing is the answer to GET /files/list.
type Listing struct {
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated"`
}

func (s *Service) list(w http.ResponseWriter, r *http.Request) {
	name, err := CheckPath(r.URL.Query().Get("path"), true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	root, err := s.openRoot()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer root.Close()
	d, err := root.OpenFile(name, os.O_RDONLY|directory, 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer d.Close()
	names, err := d.Readdirnames(s.o.MaxListEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		s.fail(w, r, err)
		return
	}
	out := Listing{Path: name, Entries: []Entry{}}
	if len(names) > s.o.MaxListEntries {
		names, out.Truncated = names[:s.o.MaxListEntries], true
	}
	slices.Sort(names)
	for _, n := range names {
		p := path.Join(name, n)
		// Root.Lstat, not DirEntry.Info: the latter is path-based and would
		// follow a parent swapped for a symlink.
		fi, err := root.Lstat(p)
		if err != nil {
			continue // removed meanwhile
		}
		e := Entry{Name: n, Size: fi.Size(), Mode: fi.Mode().String(), ModTime: fi.ModTime().UTC()}
		switch {
		case fi.IsDir():
			e.Type = "dir"
		case fi.Mode().IsRegular():
			e.Type = "file"
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type = "symlink"
			e.Target, _ = root.Readlink(p)
		default:
			e.Type = "other"
		}
		out.Entries = append(out.Entries, e)
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

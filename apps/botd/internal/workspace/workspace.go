// Package workspace exports and imports the portable home as a tar stream:
// GET /workspace/export and PUT /workspace/import.
//
// The portable home (DESIGN.md) is, with archive paths relative to
// $BOTD_HOME:
//
//	bot/…                              the workspace, whole
//	desktop/screens/<id>/chromium/…    each screen's browser profile, minus
//	                                   transient files (pkg/shared/transient)
//	.botd/cookies.json                 the shared cookie jar (sign-ins)
//
// The export's counts (Summary) arrive as HTTP trailers X-Export-Files,
// X-Export-Bytes and X-Export-Skipped.
//
// Export walks each area through an os.Root and never follows a symlink: a
// link is archived as a link, and only when it is portable (relative and
// staying inside its area); others are left out and counted. Files are
// streamed from open descriptors, so a file swapped for a symlink or FIFO
// mid-walk can neither leak a file from outside nor hang the export. An area
// directory that is itself a symlink (desktop owns desktop/, so it could
// swap screens/) is never entered. Before an export or import,
// Options.Quiesce is called (browsers flush and pause their profile
// databases) and its resume func after; one transfer runs at a time (409).
// With Options.QuiesceScreen an export instead copies the workspace and the
// jar with the browsers running and quiesces each browser alone, only while
// its own profile is copied.
//
// Export is bounded. A sparse file (more than 1 MiB of holes, found with
// SEEK_DATA/SEEK_HOLE) is left out and counted as skipped: its apparent
// size costs its maker nothing (truncate -s 1P) but would be that many
// zeros in the archive, and archive/tar writes no sparse entries. The
// archive never holds more content or entries than an import accepts, nor
// more bytes than the caller's ?maxBytes: the export stops (413 before any
// byte, else no completion trailers and the reason in X-Export-Error).
//
// Import reads the stream entry by entry (never the whole archive) and
// refuses any entry that is absolute, holds "..", lies outside the three
// areas, is a symlink or hard link leading outside its area, or would be
// written through a symlink (403 FS_SANDBOX_DENIED); that holds NUL or
// invalid UTF-8, is a device, FIFO or other special file, or is a corrupt or
// truncated archive (400); or that exceeds the caps on entries and bytes — a
// tar bomb (413). The name and link checks give clear errors; the boundary
// itself is the os.Root per area through which every write goes, so even a
// symlink a bot plants while the import runs cannot carry it outside.
// Owners come from the entries' user and group names mapped onto this
// computer's accounts, restricted per area (workspace: bot or desktop,
// groups bots/bot/desktop; profiles: desktop; cookie jar: root 0600):
// numeric ids are never used and nothing in the workspace becomes root's.
// Setuid is always dropped, setgid and sticky on files. Transient profile
// files in an archive are skipped, as on export. An import that fails midway
// leaves the entries written before the failure (all inside the areas).
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/pkg/shared"
)

// Defaults for Options' zero values.
const (
	DefaultMaxImportBytes   = shared.WorkspaceMaxImportBytes
	DefaultMaxImportEntries = shared.WorkspaceMaxImportEntries
)

// Options configures the service.
type Options struct {
	// Home is $BOTD_HOME.
	Home string
	// Bot and Desktop are the computer's two users.
	Bot, Desktop osuser.User
	// Quiesce is called before an export or import so browsers leave their
	// profiles consistent; resume is called when the transfer ends. Nil means
	// nothing to quiesce.
	Quiesce func(ctx context.Context) (resume func(), err error)
	// QuiesceScreen, when set, is what an export uses instead of Quiesce:
	// the workspace and the cookie jar are copied with every browser
	// running, and each screen's browser is quiesced alone, only while its
	// own profile is copied (resume is called right after), so an export
	// never stops another bot's browser for longer than its own profile's
	// copy. Imports still use Quiesce.
	QuiesceScreen func(ctx context.Context, id string) (resume func(), err error)
	// AfterImport runs after a successful import (e.g. to reload the cookie
	// jar so the restored sign-ins take effect). Nil means nothing.
	AfterImport func(ctx context.Context)
	// MaxImportBytes caps the sum of the entries' sizes.
	MaxImportBytes int64
	// MaxImportEntries caps the number of entries.
	MaxImportEntries int
	Log              zerolog.Logger
}

// Summary counts what a transfer carried.
type Summary struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Links    int   `json:"links"`
	Bytes    int64 `json:"bytes"`
	// Skipped counts entries left out: transient profile files, special
	// files, non-portable symlinks, names that are not valid UTF-8.
	Skipped int `json:"skipped"`
}

// Service implements the export and import routes.
type Service struct {
	o Options
	// mu guards the portable home during a transfer: one export or import
	// at a time.
	mu sync.Mutex
}

// New returns the service with defaults filled in.
func New(o Options) *Service {
	if o.MaxImportBytes <= 0 {
		o.MaxImportBytes = DefaultMaxImportBytes
	}
	if o.MaxImportEntries <= 0 {
		o.MaxImportEntries = DefaultMaxImportEntries
	}
	if o.Quiesce == nil {
		o.Quiesce = func(context.Context) (func(), error) { return func() {}, nil }
	}
	return &Service{o: o}
}

// Register adds the routes to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /workspace/export", s.handleExport)
	mux.HandleFunc("PUT /workspace/import", s.handleImport)
}

// The areas' directories, relative to $BOTD_HOME.
const (
	wsDir      = "bot"
	screensDir = "desktop/screens"
	stateDir   = ".botd"
	cookieName = "cookies.json"
)

var errBusy = shared.Errorf(http.StatusConflict, shared.CodeConflict, "an export or import is already running")

// begin takes the transfer lock and quiesces the browsers (an export with
// QuiesceScreen quiesces each browser in turn instead, as it copies its
// profile).
func (s *Service) begin(ctx context.Context, export bool) (end func(), err error) {
	if !s.mu.TryLock() {
		return nil, errBusy
	}
	if export && s.o.QuiesceScreen != nil {
		return s.mu.Unlock, nil
	}
	resume, err := s.o.Quiesce(ctx)
	if err != nil {
		s.mu.Unlock()
		s.o.Log.Error().Err(err).Msg("quiesce browsers")
		return nil, shared.Errorf(http.StatusServiceUnavailable, shared.CodeUnavailable, "browsers could not be paused for a consistent copy")
	}
	return func() {
		if resume != nil {
			resume()
		}
		s.mu.Unlock()
	}, nil
}

// Export writes the portable home to w as a tar stream.
func (s *Service) Export(ctx context.Context, w io.Writer) (Summary, error) {
	end, err := s.begin(ctx, true)
	if err != nil {
		return Summary{}, err
	}
	defer end()
	return s.export(ctx, w, 0, false)
}

// Import restores the portable home from a tar stream.
func (s *Service) Import(ctx context.Context, r io.Reader) (Summary, error) {
	end, err := s.begin(ctx, false)
	if err != nil {
		return Summary{}, err
	}
	sum, err := s.importTar(ctx, r)
	// Before resuming: a browser that starts meanwhile must already sync
	// against the imported jar, not overwrite it with the old one.
	if err == nil && s.o.AfterImport != nil {
		s.o.AfterImport(ctx)
	}
	end()
	return sum, err
}

func (s *Service) handleExport(w http.ResponseWriter, r *http.Request) {
	// ?maxBytes=N: the caller stores at most N bytes; the export stops
	// (refused, with the reason) rather than send more.
	var maxBytes int64
	if v := r.URL.Query().Get("maxBytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			httpx.WriteErr(w, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "maxBytes must be a positive number of bytes"))
			return
		}
		maxBytes = n
	}
	// ?recordings=1: the screens' recordings travel too (left out by
	// default: they are large and a replay rarely needs them elsewhere).
	recordings := r.URL.Query().Get("recordings") == "1"
	end, err := s.begin(r.Context(), true)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	defer end()
	start := time.Now()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", `attachment; filename="workspace.tar"`)
	w.Header().Set("Cache-Control", "no-store")
	// The counts are known only at the end: HTTP trailers. X-Export-Error
	// says why an export stopped at a limit.
	w.Header().Set("Trailer", "X-Export-Files, X-Export-Bytes, X-Export-Skipped, X-Export-Error")
	cw := &countWriter{w: w}
	sum, err := s.export(r.Context(), cw, maxBytes, recordings)
	var refused *refusedError
	if errors.As(err, &refused) {
		s.o.Log.Warn().Str("reason", refused.reason).Msg("workspace export refused")
		if cw.n == 0 {
			w.Header().Del("Trailer")
			httpx.WriteErr(w, shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "%s", refused.reason))
			return
		}
		// Headers are gone: end the stream without the completion
		// trailers (the client never takes it for a whole archive) and
		// with the reason.
		w.Header().Set("X-Export-Error", refused.reason)
		return
	}
	if err != nil {
		// Headers are gone: abort the stream so the client sees a broken
		// transfer, never a short archive that looks whole.
		if r.Context().Err() != nil {
			s.o.Log.Warn().Msg("workspace export aborted: the client went away")
		} else {
			s.o.Log.Error().Err(err).Msg("workspace export failed")
		}
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("X-Export-Files", strconv.Itoa(sum.Files))
	w.Header().Set("X-Export-Bytes", strconv.FormatInt(sum.Bytes, 10))
	w.Header().Set("X-Export-Skipped", strconv.Itoa(sum.Skipped))
	s.o.Log.Info().Int("files", sum.Files).Int64("bytes", sum.Bytes).Int("skipped", sum.Skipped).
		Int64("elapsed_ms", time.Since(start).Milliseconds()).Msg("workspace exported")
}

func (s *Service) handleImport(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Headers, PAX records and padding on top of the content cap.
	limit := shared.WorkspaceWireLimit(s.o.MaxImportBytes, s.o.MaxImportEntries)
	body := http.MaxBytesReader(w, r.Body, limit)
	sum, err := s.Import(r.Context(), body)
	if err != nil {
		var ae *shared.APIError
		if !errors.As(err, &ae) {
			s.o.Log.Error().Err(err).Msg("workspace import failed")
		} else {
			s.o.Log.Warn().Str("code", string(ae.Code)).Msg("workspace import refused")
		}
		httpx.WriteErr(w, err)
		return
	}
	s.o.Log.Info().Int("files", sum.Files).Int64("bytes", sum.Bytes).Int("skipped", sum.Skipped).
		Int64("elapsed_ms", time.Since(start).Milliseconds()).Msg("workspace imported")
	httpx.WriteJSON(w, http.StatusOK, sum)
}

// countWriter counts what reaches the response.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// openArea opens dir (relative to base) as a root of its own. No component
// may be a symlink: desktop/ belongs to the desktop user, who could swap
// screens/ for a link to anywhere, and os.OpenRoot would follow it. The
// directory opened is checked to be the very one inspected, so a swap
// between the check and the open is caught too.
func openArea(base *os.Root, dir string) (*os.Root, error) {
	var last os.FileInfo
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		cur = path.Join(cur, c)
		fi, err := base.Lstat(cur)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a real directory (mode %s): %w", cur, fi.Mode().Type(), errNotArea)
		}
		last = fi
	}
	r, err := base.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	fi, err := r.Stat(".")
	if err != nil || !os.SameFile(fi, last) {
		r.Close()
		return nil, fmt.Errorf("%s changed while being opened: %w", dir, errNotArea)
	}
	return r, nil
}

// errNotArea marks an area directory that is a symlink or not a directory.
var errNotArea = errors.New("not a portable area")

package workspace

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"regexp"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/transient"
)

// importTempPrefix starts the temporary name of an entry being written.
const importTempPrefix = ".botd-import-"

const maxNameLen = 4096

// screenID is screen.ValidID's rule (kept here so workspace does not
// depend on the screen manager).
var screenID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validScreenID(id string) bool { return screenID.MatchString(id) }

// areaKind names the three portable areas.
type areaKind int

const (
	areaNone      areaKind = iota // a parent directory entry: nothing to write
	areaWorkspace                 // bot/…
	areaProfile                   // desktop/screens/<id>/chromium/…
	areaCookies                   // .botd/cookies.json
)

// target is where an archive name lands.
type target struct {
	kind areaKind
	id   string // screen id for areaProfile
	// sub is the screen's directory for areaProfile: "chromium" (its
	// profile) or "recordings" (its screen recordings, in an archive only
	// when the export was asked for them).
	sub string
	rel string // relative to the area's root ("." for the root itself)
}

func denied(format string, args ...any) error {
	return shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied, format, args...)
}

func badArchive(format string, args ...any) error {
	return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, format, args...)
}

// classify maps an archive name onto its area, refusing everything that is
// not inside one. Checks are on the name only; os.Root enforces the rest.
func classify(name string, isDir bool) (target, error) {
	switch {
	case len(name) > maxNameLen:
		return target{}, badArchive("an entry name is longer than %d bytes", maxNameLen)
	case strings.IndexByte(name, 0) >= 0:
		return target{}, badArchive("an entry name contains a NUL byte")
	case !utf8.ValidString(name):
		return target{}, badArchive("an entry name is not valid UTF-8")
	case strings.HasPrefix(name, "/"):
		return target{}, denied("entry %q is absolute", short(name))
	}
	var parts []string
	for _, p := range strings.Split(strings.TrimPrefix(name, "./"), "/") {
		switch p {
		case "..":
			return target{}, denied("entry %q holds \"..\"", short(name))
		case "", ".":
			continue
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return target{}, denied("entry %q names nothing", short(name))
	}
	rest := func(from int) string {
		if len(parts) <= from {
			return "."
		}
		return strings.Join(parts[from:], "/")
	}
	switch parts[0] {
	case "bot":
		return target{kind: areaWorkspace, rel: rest(1)}, nil
	case "desktop":
		switch {
		case len(parts) == 1 || (len(parts) == 2 && parts[1] == "screens") || (len(parts) == 3 && parts[1] == "screens" && validScreenID(parts[2])):
			if isDir {
				return target{kind: areaNone}, nil
			}
		case len(parts) >= 4 && parts[1] == "screens" && validScreenID(parts[2]) && (parts[3] == "chromium" || parts[3] == "recordings"):
			return target{kind: areaProfile, id: parts[2], sub: parts[3], rel: rest(4)}, nil
		}
	case ".botd":
		switch {
		case len(parts) == 1 && isDir:
			return target{kind: areaNone}, nil
		case len(parts) == 2 && parts[1] == "cookies.json" && !isDir:
			return target{kind: areaCookies, rel: "cookies.json"}, nil
		}
	}
	return target{}, denied("entry %q is outside the portable home (bot/, desktop/screens/<id>/chromium/ or recordings/, .botd/cookies.json)", short(name))
}

func short(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// area is one open destination root with its ownership rules.
type area struct {
	root *os.Root
	kind areaKind
	// known holds directories already created or checked in this import.
	known map[string]bool
}

// importer restores one archive.
type importer struct {
	s        *Service
	ctx      context.Context
	areas    map[string]*area // key: "bot", "cookies", "profile/<id>"
	home     *os.Root
	screens  *os.Root
	sum      Summary
	entries  int
	dirTimes []dirTime
	buf      []byte
}

type dirTime struct {
	a   *area
	rel string
	t   time.Time
}

func (s *Service) importTar(ctx context.Context, r io.Reader) (Summary, error) {
	im := &importer{s: s, ctx: ctx, areas: map[string]*area{}, buf: make([]byte, 1<<20)}
	defer im.close()
	if err := im.prepare(); err != nil {
		return Summary{}, areaError(err)
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return im.sum, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return im.sum, readError(err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		im.entries++
		if im.entries > s.o.MaxImportEntries {
			return im.sum, shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "archive has more than %d entries", s.o.MaxImportEntries)
		}
		if err := im.entry(hdr, tr); err != nil {
			return im.sum, err
		}
	}
	// Directory times last: writing into a directory changes its mtime.
	for i := len(im.dirTimes) - 1; i >= 0; i-- {
		d := im.dirTimes[i]
		_ = d.a.root.Chtimes(d.rel, d.t, d.t)
	}
	for _, a := range im.areas {
		if f, err := a.root.Open("."); err == nil {
			_ = unix.Syncfs(int(f.Fd()))
			f.Close()
			break
		}
	}
	return im.sum, nil
}

// readError maps a tar/body read error to the API's error.
func readError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "archive is larger than %d bytes", mbe.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badArchive("archive is truncated")
	case errors.Is(err, tar.ErrHeader), errors.Is(err, tar.ErrFieldTooLong), errors.Is(err, tar.ErrInsecurePath):
		return badArchive("not a valid tar archive")
	}
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return err
	}
	if strings.HasPrefix(err.Error(), "archive/tar") {
		return badArchive("not a valid tar archive")
	}
	return err
}

// prepare opens $BOTD_HOME and makes sure the areas' directories exist,
// refusing any that is a symlink.
func (im *importer) prepare() error {
	home, err := os.OpenRoot(im.s.o.Home)
	if err != nil {
		return err
	}
	im.home = home
	b, d := im.s.o.Bot, im.s.o.Desktop
	for _, m := range []struct {
		dir      string
		uid, gid int
		mode     os.FileMode
	}{
		{wsDir, int(b.UID), osuser.BotsGID, os.ModeSetgid | 0o775},
		{"desktop", int(d.UID), int(d.GID), 0o755},
		{screensDir, int(d.UID), int(d.GID), 0o755},
		{stateDir, 0, 0, 0o700},
	} {
		if err := mkdirOne(home, m.dir, m.uid, m.gid, m.mode); err != nil {
			return err
		}
	}
	return nil
}

func (im *importer) close() {
	for _, a := range im.areas {
		a.root.Close()
	}
	if im.screens != nil {
		im.screens.Close()
	}
	if im.home != nil {
		im.home.Close()
	}
}

// areaError reports a tampered area directory as a sandbox refusal, not a 500.
func areaError(err error) error {
	if errors.Is(err, errNotArea) {
		return denied("a portable area's directory is a symlink or not a directory")
	}
	return err
}

// area opens (once) the root for t.
func (im *importer) area(t target) (*area, error) {
	key := map[areaKind]string{areaWorkspace: "bot", areaCookies: "cookies", areaProfile: "profile/" + t.id + "/" + t.sub}[t.kind]
	if a, ok := im.areas[key]; ok {
		return a, nil
	}
	var (
		root *os.Root
		err  error
	)
	switch t.kind {
	case areaWorkspace:
		root, err = openArea(im.home, wsDir)
	case areaCookies:
		root, err = openArea(im.home, stateDir)
	case areaProfile:
		if im.screens == nil {
			if im.screens, err = openArea(im.home, screensDir); err != nil {
				return nil, areaError(err)
			}
		}
		d := im.s.o.Desktop
		for _, p := range []string{t.id, t.id + "/" + t.sub} {
			if err := mkdirOne(im.screens, p, int(d.UID), int(d.GID), 0o700); err != nil {
				return nil, err
			}
		}
		root, err = openArea(im.screens, t.id+"/"+t.sub)
	}
	if err != nil {
		return nil, areaError(err)
	}
	a := &area{root: root, kind: t.kind, known: map[string]bool{".": true}}
	im.areas[key] = a
	return a, nil
}

// mkdirOne makes dir inside root when missing (owned, with mode); an
// existing symlink there is refused.
func mkdirOne(root *os.Root, dir string, uid, gid int, mode os.FileMode) error {
	fi, err := root.Lstat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return denied("an entry would be written through a symlink")
	case err == nil:
		return shared.Errorf(http.StatusConflict, shared.CodeConflict, "a file is in the way of a directory of the archive")
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := root.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	d, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return errors.Join(d.Chown(uid, gid), d.Chmod(mode))
}

// owner maps an entry's user and group names onto this computer, within
// what the area allows. Numeric ids in the archive are never used.
func (im *importer) owner(kind areaKind, hdr *tar.Header) (uid, gid int) {
	b, d := im.s.o.Bot, im.s.o.Desktop
	switch kind {
	case areaWorkspace:
		uid = int(b.UID)
		if hdr.Uname == d.Name {
			uid = int(d.UID)
		}
		gid = osuser.BotsGID
		switch hdr.Gname {
		case b.Name:
			gid = int(b.GID)
		case d.Name:
			gid = int(d.GID)
		}
	case areaProfile:
		uid, gid = int(d.UID), int(d.GID)
		if hdr.Gname == "bots" {
			gid = osuser.BotsGID
		}
	}
	return uid, gid // areaCookies: root
}

// mode keeps permission bits, and setgid/sticky on directories only.
func mode(hdr *tar.Header, dir bool) os.FileMode {
	m := os.FileMode(hdr.Mode & 0o777)
	if dir {
		if hdr.Mode&0o2000 != 0 {
			m |= os.ModeSetgid
		}
		if hdr.Mode&0o1000 != 0 {
			m |= os.ModeSticky
		}
	}
	return m
}

// parents makes rel's parent directories, refusing to go through symlinks.
func (im *importer) parents(a *area, rel string) error {
	dir := path.Dir(rel)
	if a.known[dir] {
		return nil
	}
	uid, gid, m := im.defaults(a.kind)
	cur := "."
	for _, p := range strings.Split(dir, "/") {
		cur = path.Join(cur, p)
		if a.known[cur] {
			continue
		}
		if err := mkdirOne(a.root, cur, uid, gid, m); err != nil {
			return err
		}
		a.known[cur] = true
	}
	return nil
}

// defaults are the owner and mode of a directory the archive implies but
// does not list.
func (im *importer) defaults(kind areaKind) (uid, gid int, m os.FileMode) {
	switch kind {
	case areaWorkspace:
		return int(im.s.o.Bot.UID), osuser.BotsGID, os.ModeSetgid | 0o775
	case areaProfile:
		return int(im.s.o.Desktop.UID), int(im.s.o.Desktop.GID), 0o700
	}
	return 0, 0, 0o700
}

func (im *importer) entry(hdr *tar.Header, tr *tar.Reader) error {
	isDir := hdr.Typeflag == tar.TypeDir
	switch hdr.Typeflag {
	case tar.TypeReg, '\x00', tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return badArchive("entry %q is a device or FIFO: refused", short(hdr.Name))
	default:
		return badArchive("entry %q has unsupported type %q", short(hdr.Name), string(hdr.Typeflag))
	}
	t, err := classify(hdr.Name, isDir)
	if err != nil {
		return err
	}
	if t.kind == areaNone {
		return nil
	}
	if t.kind == areaProfile && t.sub == "chromium" && transient.Transient(t.rel, isDir) {
		im.sum.Skipped++
		return nil
	}
	if t.kind == areaWorkspace && strings.HasPrefix(path.Base(t.rel), importTempPrefix) {
		im.sum.Skipped++
		return nil
	}
	if hdr.Size < 0 || (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == '\x00') && hdr.Size > im.s.o.MaxImportBytes-im.sum.Bytes {
		return shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "archive content is larger than %d bytes", im.s.o.MaxImportBytes)
	}
	a, err := im.area(t)
	if err != nil {
		return err
	}
	if t.rel == "." && !isDir {
		return denied("entry %q would replace an area's root", short(hdr.Name))
	}
	if t.rel != "." {
		if err := im.parents(a, t.rel); err != nil {
			return err
		}
	}
	uid, gid := im.owner(t.kind, hdr)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return im.dir(a, t.rel, hdr, uid, gid)
	case tar.TypeSymlink:
		if !portableLink(t.rel, hdr.Linkname) {
			return denied("symlink %q leads outside its area", short(hdr.Name))
		}
		return im.symlink(a, t.rel, hdr.Linkname, uid, gid)
	case tar.TypeLink:
		old, err := classify(hdr.Linkname, false)
		if err != nil || old.kind != t.kind || old.id != t.id || old.rel == "." {
			return denied("hard link %q leads outside its area", short(hdr.Name))
		}
		return im.hardlink(a, old.rel, t.rel)
	default:
		if t.kind == areaCookies {
			hdr.Mode = 0o600
		}
		return im.file(a, t.rel, hdr, tr, uid, gid)
	}
}

func tempName(rel string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return path.Join(path.Dir(rel), importTempPrefix+hex.EncodeToString(b[:]))
}

// replace renames tmp over rel; a directory in the way is removed first
// (the archive wins).
func replace(root *os.Root, tmp, rel string) error {
	err := root.Rename(tmp, rel)
	if err != nil && (errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTDIR)) {
		if rerr := root.RemoveAll(rel); rerr == nil {
			err = root.Rename(tmp, rel)
		}
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

func (im *importer) dir(a *area, rel string, hdr *tar.Header, uid, gid int) error {
	fi, err := a.root.Lstat(rel)
	switch {
	case err == nil && !fi.IsDir():
		if err := a.root.RemoveAll(rel); err != nil {
			return err
		}
		fallthrough
	case errors.Is(err, fs.ErrNotExist):
		if err := a.root.Mkdir(rel, 0o700); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	d, err := a.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := errors.Join(d.Chown(uid, gid), d.Chmod(mode(hdr, true))); err != nil {
		return err
	}
	a.known[rel] = true
	im.dirTimes = append(im.dirTimes, dirTime{a: a, rel: rel, t: hdr.ModTime})
	im.sum.Dirs++
	return nil
}

func (im *importer) symlink(a *area, rel, target string, uid, gid int) error {
	tmp := tempName(rel)
	if err := a.root.Symlink(target, tmp); err != nil {
		return err
	}
	if err := a.root.Lchown(tmp, uid, gid); err != nil {
		_ = a.root.Remove(tmp)
		return err
	}
	if err := replace(a.root, tmp, rel); err != nil {
		return err
	}
	im.sum.Symlinks++
	return nil
}

func (im *importer) hardlink(a *area, old, rel string) error {
	tmp := tempName(rel)
	if err := a.root.Link(old, tmp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return badArchive("hard link to %q, which the archive has not restored", short(old))
		}
		return err
	}
	if err := replace(a.root, tmp, rel); err != nil {
		return err
	}
	im.sum.Links++
	return nil
}

func (im *importer) file(a *area, rel string, hdr *tar.Header, tr *tar.Reader, uid, gid int) error {
	tmp := tempName(rel)
	f, err := a.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = a.root.Remove(tmp)
		}
	}()
	if hdr.Size > 1<<20 {
		var st unix.Statfs_t
		if unix.Fstatfs(int(f.Fd()), &st) == nil && uint64(hdr.Size) > st.Bavail*uint64(st.Bsize) {
			return shared.Errorf(http.StatusInsufficientStorage, shared.CodeTooLarge, "not enough disk space for entry %q", short(hdr.Name))
		}
	}
	n, err := io.CopyBuffer(onlyWriter{f}, onlyReader{tr}, im.buf)
	if err != nil {
		return readError(err)
	}
	if n != hdr.Size {
		return badArchive("archive is truncated")
	}
	if err := errors.Join(f.Chown(uid, gid), f.Chmod(mode(hdr, false))); err != nil {
		return err
	}
	mt := hdr.ModTime
	_ = unix.Futimes(int(f.Fd()), []unix.Timeval{unix.NsecToTimeval(mt.UnixNano()), unix.NsecToTimeval(mt.UnixNano())})
	if err := f.Close(); err != nil {
		return err
	}
	ok = true
	if err := replace(a.root, tmp, rel); err != nil {
		return err
	}
	im.sum.Files++
	im.sum.Bytes += n
	return nil
}

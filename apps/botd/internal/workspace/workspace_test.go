package workspace_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/api"
	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/apps/botd/internal/workspace"
	"github.com/open-bot/computer/pkg/shared"
)

const token = "test-token-0123456789"

func TestMain(m *testing.M) {
	unix.Umask(0o002)
	os.Exit(m.Run())
}

type users struct{ bot, desktop osuser.User }

func lookupUsers(t testing.TB) users {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	bot, err := osuser.Lookup("bot")
	require.NoError(t, err)
	desktop, err := osuser.Lookup("desktop")
	require.NoError(t, err)
	return users{bot, desktop}
}

// computer is one BOTD_HOME with botd's export/import served over HTTP.
type computer struct {
	base, home, outside string
	u                   users
	svc                 *workspace.Service
	url                 string
	client              *http.Client
	quiesced, resumed   atomic.Int32
	imported            atomic.Int32
}

func newComputer(t testing.TB, u users, o workspace.Options) *computer {
	t.Helper()
	base := t.TempDir()
	tmp := filepath.Clean(os.TempDir())
	for d := base; strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	c := &computer{base: base, home: filepath.Join(base, "home"), outside: filepath.Join(base, "outside"), u: u}
	require.NoError(t, osuser.PrepareDirs(osuser.Layout(c.home, u.desktop, u.bot)))
	require.NoError(t, os.MkdirAll(c.outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.outside, "sentinel"), []byte("untouched"), 0o644))
	o.Home, o.Bot, o.Desktop, o.Log = c.home, u.bot, u.desktop, zerolog.Nop()
	if o.Quiesce == nil {
		o.Quiesce = func(context.Context) (func(), error) {
			c.quiesced.Add(1)
			return func() { c.resumed.Add(1) }, nil
		}
	}
	o.AfterImport = func(context.Context) { c.imported.Add(1) }
	c.svc = workspace.New(o)
	srv := api.New(api.Options{Token: token, Log: zerolog.Nop(), Hub: health.NewHub()})
	c.svc.Register(srv.Mux())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	c.url, c.client = ts.URL, ts.Client()
	return c
}

func (c *computer) path(rel string) string { return filepath.Join(c.home, rel) }

// put writes a file as root, then sets owner and mode.
func (c *computer) put(t testing.TB, rel, body string, uid, gid uint32, mode os.FileMode) {
	t.Helper()
	p := c.path(rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	require.NoError(t, os.Chown(p, int(uid), int(gid)))
	require.NoError(t, os.Chmod(p, mode))
}

func (c *computer) link(t testing.TB, rel, target string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(c.path(rel)), 0o755))
	require.NoError(t, os.Symlink(target, c.path(rel)))
}

// populate fills a realistic portable home plus things that must stay home.
func (c *computer) populate(t testing.TB) {
	b, d := c.u.bot, c.u.desktop
	c.put(t, "bot/shared/notes.txt", "notes", b.UID, uint32(osuser.BotsGID), 0o664)
	c.put(t, "bot/bots/alice/run.sh", "#!/bin/sh\necho hi\n", b.UID, uint32(osuser.BotsGID), 0o775)
	// Project files named like browser transients stay.
	c.put(t, "bot/bots/alice/Cache/keep.txt", "project cache", b.UID, uint32(osuser.BotsGID), 0o664)
	c.put(t, "bot/bots/alice/LOCK", "project LOCK", b.UID, uint32(osuser.BotsGID), 0o664)
	c.put(t, "bot/bots/alice/SingletonLock", "project singleton", b.UID, uint32(osuser.BotsGID), 0o664)
	c.put(t, "bot/shared/downloads/report.pdf", "%PDF", d.UID, uint32(osuser.BotsGID), 0o664)
	c.put(t, "bot/.codex/config.toml", "model = \"x\"", b.UID, b.GID, 0o600)
	c.link(t, "bot/shared/latest", "notes.txt")
	c.link(t, "bot/abs", "/etc/passwd")              // not portable: left out
	c.link(t, "bot/climb", "../../outside/sentinel") // not portable: left out
	require.NoError(t, unix.Mkfifo(c.path("bot/shared/fifo"), 0o664))

	p := "desktop/screens/alice/chromium/"
	c.put(t, p+"Local State", "{}", d.UID, d.GID, 0o600)
	c.put(t, p+"Default/Cookies", "sqlite cookies", d.UID, d.GID, 0o600)
	c.put(t, p+"Default/History-journal", "journal", d.UID, d.GID, 0o600)
	c.put(t, p+"Default/Local Storage/leveldb/000003.log", "ldb", d.UID, d.GID, 0o600)
	c.put(t, p+"Default/Local Storage/leveldb/LOCK", "", d.UID, d.GID, 0o600)
	c.put(t, p+"Default/Cache/Cache_Data/data_0", "cache", d.UID, d.GID, 0o600)
	c.put(t, p+"Default/Code Cache/js/index", "cc", d.UID, d.GID, 0o600)
	c.put(t, p+"GrShaderCache/data_1", "gr", d.UID, d.GID, 0o600)
	c.put(t, p+"Crashpad/settings.dat", "cp", d.UID, d.GID, 0o600)
	c.put(t, p+"lockfile", "", d.UID, d.GID, 0o600)
	c.link(t, p+"SingletonLock", "vm-1234")
	c.link(t, p+"SingletonSocket", "/tmp/.org.chromium.Chromium.x/SingletonSocket")
	c.put(t, "desktop/.Xauthority-0", "xauth", d.UID, d.GID, 0o600) // not portable
	c.put(t, ".botd/cookies.json", `{"cookies":[{"name":"sid"}]}`, 0, 0, 0o600)
	c.put(t, ".botd/other-state", "private", 0, 0, 0o600) // not portable
	// What root made above (parent dirs, links) belongs to the area's user,
	// as on a real computer.
	owners := map[string][2]int{"bot": {int(b.UID), osuser.BotsGID}, "desktop/screens": {int(d.UID), int(d.GID)}}
	for area, o := range owners {
		require.NoError(t, filepath.Walk(c.path(area), func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Sys().(*syscall.Stat_t).Uid == 0 {
				err = os.Lchown(p, o[0], o[1])
			}
			return err
		}))
	}
}

// wantNames is what populate's export must hold (dirs end in /).
var wantNames = []string{
	".botd/cookies.json",
	"bot/", "bot/.codex/", "bot/.codex/config.toml", "bot/bots/", "bot/bots/alice/",
	"bot/bots/alice/Cache/", "bot/bots/alice/Cache/keep.txt", "bot/bots/alice/LOCK",
	"bot/bots/alice/SingletonLock", "bot/bots/alice/run.sh",
	"bot/shared/", "bot/shared/downloads/", "bot/shared/downloads/report.pdf",
	"bot/shared/latest", "bot/shared/notes.txt",
	"desktop/screens/alice/chromium/", "desktop/screens/alice/chromium/Default/",
	"desktop/screens/alice/chromium/Default/Cookies", "desktop/screens/alice/chromium/Default/History-journal",
	"desktop/screens/alice/chromium/Default/Local Storage/", "desktop/screens/alice/chromium/Default/Local Storage/leveldb/",
	"desktop/screens/alice/chromium/Default/Local Storage/leveldb/000003.log",
	"desktop/screens/alice/chromium/Local State",
}

func (c *computer) export(t testing.TB, auth bool) (int, []byte) {
	t.Helper()
	st, b, _ := c.exportTrailer(t, auth)
	return st, b
}

func (c *computer) exportTrailer(t testing.TB, auth bool) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", c.url+"/workspace/export", nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b, resp.Trailer
}

func (c *computer) importTar(t testing.TB, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("PUT", c.url+"/workspace/import", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

type entry struct {
	hdr  *tar.Header
	body string
}

func readTar(t testing.TB, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		out[h.Name] = entry{h, string(body)}
	}
}

func names(m map[string]entry) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func stat(t testing.TB, p string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err, p)
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

func TestExportImportRoundTrip(t *testing.T) {
	u := lookupUsers(t)
	src := newComputer(t, u, workspace.Options{})
	src.populate(t)

	st, _ := src.export(t, false)
	assert.Equal(t, 401, st)
	assert.EqualValues(t, 0, src.quiesced.Load())

	st, arch, trailer := src.exportTrailer(t, true)
	require.Equal(t, 200, st, string(arch))
	assert.Equal(t, "12", trailer.Get("X-Export-Files"))
	// abs, climb, fifo; Cache, Code Cache, GrShaderCache, Crashpad, LOCK,
	// lockfile, SingletonLock, SingletonSocket.
	assert.Equal(t, "11", trailer.Get("X-Export-Skipped"))
	assert.EqualValues(t, 1, src.quiesced.Load(), "browsers quiesced before export")
	assert.EqualValues(t, 1, src.resumed.Load(), "and resumed after")
	got := readTar(t, arch)
	assert.Equal(t, wantNames, names(got))
	assert.Equal(t, "notes.txt", got["bot/shared/latest"].hdr.Linkname)
	assert.Equal(t, "bot", got["bot/bots/alice/run.sh"].hdr.Uname)
	assert.Equal(t, "bots", got["bot/bots/alice/run.sh"].hdr.Gname)
	assert.EqualValues(t, 0o775, got["bot/bots/alice/run.sh"].hdr.Mode&0o7777)

	// A fresh computer imports it.
	dst := newComputer(t, u, workspace.Options{})
	st, b := dst.importTar(t, arch)
	require.Equal(t, 200, st, string(b))
	var sum workspace.Summary
	require.NoError(t, json.Unmarshal(b, &sum))
	assert.Equal(t, 12, sum.Files)
	assert.Equal(t, 1, sum.Symlinks)
	assert.EqualValues(t, 1, dst.imported.Load(), "AfterImport ran (cookie jar reload)")
	assert.EqualValues(t, 1, dst.quiesced.Load())

	for name, e := range got {
		rel := strings.TrimSuffix(name, "/")
		uid, gid, mode := stat(t, dst.path(rel))
		suid, sgid, smode := stat(t, src.path(rel))
		assert.Equal(t, suid, uid, "owner of %s", name)
		assert.Equal(t, sgid, gid, "group of %s", name)
		if e.hdr.Typeflag != tar.TypeSymlink {
			assert.Equal(t, smode&(os.ModePerm|os.ModeSetgid|os.ModeType), mode&(os.ModePerm|os.ModeSetgid|os.ModeType), "mode of %s", name)
		}
		if e.hdr.Typeflag == tar.TypeReg {
			b, err := os.ReadFile(dst.path(rel))
			require.NoError(t, err)
			assert.Equal(t, e.body, string(b), name)
			fi, _ := os.Stat(dst.path(rel))
			assert.Equal(t, e.hdr.ModTime.Unix(), fi.ModTime().Unix(), "mtime of %s", name)
		}
	}
	uid, gid, mode := stat(t, dst.path(".botd/cookies.json"))
	assert.Equal(t, uint32(0), uid)
	assert.Equal(t, uint32(0), gid)
	assert.Equal(t, os.FileMode(0o600), mode.Perm())
	target, err := os.Readlink(dst.path("bot/shared/latest"))
	require.NoError(t, err)
	assert.Equal(t, "notes.txt", target)
	for _, gone := range []string{"desktop/.Xauthority-0", ".botd/other-state", "bot/abs", "bot/climb", "desktop/screens/alice/chromium/SingletonLock"} {
		_, err := os.Lstat(dst.path(gone))
		assert.True(t, os.IsNotExist(err), "%s must not travel", gone)
	}

	// Exporting the imported computer gives the same archive contents.
	st, arch2 := dst.export(t, true)
	require.Equal(t, 200, st)
	got2 := readTar(t, arch2)
	assert.Equal(t, names(got), names(got2))
	for k, e := range got {
		assert.Equal(t, e.body, got2[k].body, k)
	}
}

// tb builds archives, including malicious ones.
type tb struct {
	buf bytes.Buffer
	tw  *tar.Writer
}

func newTB() *tb { t := &tb{}; t.tw = tar.NewWriter(&t.buf); return t }

func (b *tb) add(t testing.TB, h *tar.Header, body string) *tb {
	t.Helper()
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(body))
	}
	if h.Mode == 0 {
		h.Mode = 0o644
	}
	require.NoError(t, b.tw.WriteHeader(h))
	if body != "" {
		_, err := b.tw.Write([]byte(body))
		require.NoError(t, err)
	}
	return b
}

func (b *tb) file(t testing.TB, name, body string) *tb {
	return b.add(t, &tar.Header{Name: name, Typeflag: tar.TypeReg}, body)
}

func (b *tb) bytes(t testing.TB) []byte {
	require.NoError(t, b.tw.Close())
	return b.buf.Bytes()
}

// rawHeader is a hand-made ustar header, for names archive/tar refuses to write.
func rawHeader(name string, typ byte, size int64) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], "0000644\x00")
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	copy(h[136:148], "00000000000\x00")
	h[156] = typ
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

func TestImportRefusals(t *testing.T) {
	u := lookupUsers(t)
	c := newComputer(t, u, workspace.Options{MaxImportEntries: 50, MaxImportBytes: 1 << 20})
	// A symlink a bot planted, pointing outside.
	c.link(t, "bot/planted", c.outside)

	many := newTB()
	for i := 0; i < 51; i++ {
		many.file(t, fmt.Sprintf("bot/bomb/%d", i), "x")
	}
	huge := append(rawHeader("bot/huge", '0', 10<<30), make([]byte, 1024)...)
	invalidUTF8 := append(rawHeader("bot/\xff\xfe", '0', 0), make([]byte, 1024)...)
	truncated := newTB().file(t, "bot/t", strings.Repeat("x", 4096)).bytes(t)[:1024]

	cases := []struct {
		name   string
		arch   []byte
		status int
		code   shared.Code
	}{
		{"dotdot", newTB().file(t, "../evil", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"inner dotdot", newTB().file(t, "bot/../../outside/evil", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"absolute", newTB().file(t, "/tmp/evil-abs", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"outside areas", newTB().file(t, "desktop/.Xauthority-0", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"botd state", newTB().file(t, ".botd/token", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"top level", newTB().file(t, "evil", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"absolute symlink", newTB().add(t, &tar.Header{Name: "bot/l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, "").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"climbing symlink", newTB().add(t, &tar.Header{Name: "bot/a/l", Typeflag: tar.TypeSymlink, Linkname: "../../../outside"}, "").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"symlink then write through it", newTB().
			add(t, &tar.Header{Name: "bot/ok", Typeflag: tar.TypeSymlink, Linkname: "shared"}, "").
			file(t, "bot/ok/x", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"write through planted symlink", newTB().file(t, "bot/planted/evil", "x").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"hard link outside", newTB().add(t, &tar.Header{Name: "bot/h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}, "").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"hard link across areas", newTB().add(t, &tar.Header{Name: "bot/h", Typeflag: tar.TypeLink, Linkname: ".botd/cookies.json"}, "").bytes(t), 403, shared.CodeFSSandboxDenied},
		{"char device", newTB().add(t, &tar.Header{Name: "bot/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, "").bytes(t), 400, shared.CodeBadRequest},
		{"block device", newTB().add(t, &tar.Header{Name: "bot/sda", Typeflag: tar.TypeBlock, Devmajor: 8}, "").bytes(t), 400, shared.CodeBadRequest},
		{"fifo", newTB().add(t, &tar.Header{Name: "bot/fifo", Typeflag: tar.TypeFifo}, "").bytes(t), 400, shared.CodeBadRequest},
		{"invalid UTF-8 name", invalidUTF8, 400, shared.CodeBadRequest},
		{"10,000-char name", newTB().file(t, "bot/"+strings.Repeat("a/", 5000)+"x", "x").bytes(t), 400, shared.CodeBadRequest},
		{"too many entries", many.bytes(t), 413, shared.CodeTooLarge},
		{"declared 10 GiB", huge, 413, shared.CodeTooLarge},
		{"content over the cap", newTB().file(t, "bot/big", strings.Repeat("x", 2<<20)).bytes(t), 413, shared.CodeTooLarge},
		{"hard link to nothing restored", newTB().add(t, &tar.Header{Name: "bot/h2", Typeflag: tar.TypeLink, Linkname: "bot/none"}, "").bytes(t), 400, shared.CodeBadRequest},
		{"truncated", truncated, 400, shared.CodeBadRequest},
		{"not a tar", []byte(strings.Repeat("garbage!", 200)), 400, shared.CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, b := c.importTar(t, tc.arch)
			assert.Equal(t, tc.status, st, string(b))
			var env shared.ErrorEnvelope
			require.NoError(t, json.Unmarshal(b, &env), string(b))
			assert.Equal(t, tc.code, env.Error.Code, env.Error.Message)
		})
	}
	// Nothing outside was touched.
	ents, err := os.ReadDir(c.outside)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	b, _ := os.ReadFile(filepath.Join(c.outside, "sentinel"))
	assert.Equal(t, "untouched", string(b))
	for _, p := range []string{"/tmp/evil-abs", filepath.Join(c.base, "evil"), filepath.Join(c.home, "evil"), c.path("desktop/.Xauthority-0"), c.path(".botd/token")} {
		_, err := os.Lstat(p)
		assert.True(t, os.IsNotExist(err), p)
	}
	ents, _ = os.ReadDir(c.home)
	var top []string
	for _, e := range ents {
		top = append(top, e.Name())
	}
	assert.Equal(t, []string{".botd", "bot", "desktop"}, top)
	// botd is unaffected: a good import and an export still work.
	st, body := c.importTar(t, newTB().file(t, "bot/shared/fine.txt", "fine").bytes(t))
	assert.Equal(t, 200, st, string(body))
	st, _ = c.export(t, true)
	assert.Equal(t, 200, st)
}

func TestImportSanitizesOwnersAndModes(t *testing.T) {
	u := lookupUsers(t)
	c := newComputer(t, u, workspace.Options{})
	arch := newTB().
		add(t, &tar.Header{Name: "bot/suid", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 0, Gid: 0, Uname: "root", Gname: "root"}, "#!/bin/sh").
		add(t, &tar.Header{Name: "bot/d/", Typeflag: tar.TypeDir, Mode: 0o2775, Uid: 4242, Uname: "nobody-here"}, "").
		add(t, &tar.Header{Name: "bot/d/by-desktop", Typeflag: tar.TypeReg, Mode: 0o2664, Uname: "desktop", Gname: "bots"}, "dl").
		add(t, &tar.Header{Name: "desktop/screens/bob/chromium/Default/Prefs", Typeflag: tar.TypeReg, Mode: 0o600, Uname: "bot", Gname: "root"}, "{}").
		add(t, &tar.Header{Name: "desktop/screens/bob/chromium/SingletonLock", Typeflag: tar.TypeSymlink, Linkname: "host-1"}, "").
		add(t, &tar.Header{Name: "desktop/screens/bob/chromium/Default/Cache/x", Typeflag: tar.TypeReg}, "c").
		add(t, &tar.Header{Name: ".botd/cookies.json", Typeflag: tar.TypeReg, Mode: 0o666, Uname: "bot"}, "{}").
		add(t, &tar.Header{Name: "bot/d/hard", Typeflag: tar.TypeLink, Linkname: "bot/d/by-desktop"}, "").
		bytes(t)
	st, b := c.importTar(t, arch)
	require.Equal(t, 200, st, string(b))

	uid, gid, mode := stat(t, c.path("bot/suid"))
	assert.Equal(t, u.bot.UID, uid, "root owner in the workspace becomes bot")
	assert.Equal(t, uint32(osuser.BotsGID), gid)
	assert.Equal(t, os.FileMode(0o755), mode, "setuid dropped")
	uid, _, mode = stat(t, c.path("bot/d"))
	assert.Equal(t, u.bot.UID, uid, "unknown user becomes bot")
	assert.Equal(t, os.ModeDir|os.ModeSetgid|0o775, mode, "setgid kept on directories")
	uid, gid, mode = stat(t, c.path("bot/d/by-desktop"))
	assert.Equal(t, u.desktop.UID, uid)
	assert.Equal(t, uint32(osuser.BotsGID), gid)
	assert.Equal(t, os.FileMode(0o664), mode, "setgid dropped on files")
	hard, err := os.ReadFile(c.path("bot/d/hard"))
	require.NoError(t, err)
	assert.Equal(t, "dl", string(hard), "a hard link inside the area is restored")
	uid, _, _ = stat(t, c.path("desktop/screens/bob/chromium/Default/Prefs"))
	assert.Equal(t, u.desktop.UID, uid, "profiles belong to desktop")
	uid, _, _ = stat(t, c.path("desktop/screens/bob/chromium"))
	assert.Equal(t, u.desktop.UID, uid)
	for _, gone := range []string{"desktop/screens/bob/chromium/SingletonLock", "desktop/screens/bob/chromium/Default/Cache"} {
		_, err := os.Lstat(c.path(gone))
		assert.True(t, os.IsNotExist(err), gone)
	}
	uid, gid, mode = stat(t, c.path(".botd/cookies.json"))
	assert.Equal(t, uint32(0), uid)
	assert.Equal(t, uint32(0), gid)
	assert.Equal(t, os.FileMode(0o600), mode)
}

func TestOneTransferAtATime(t *testing.T) {
	u := lookupUsers(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	c := newComputer(t, u, workspace.Options{Quiesce: func(ctx context.Context) (func(), error) {
		entered <- struct{}{}
		<-release
		return func() {}, nil
	}})
	done := make(chan int)
	go func() { st, _ := c.export(t, true); done <- st }()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("export never quiesced")
	}
	st, b := c.importTar(t, newTB().file(t, "bot/x", "x").bytes(t))
	assert.Equal(t, 409, st, string(b))
	close(release)
	assert.Equal(t, 200, <-done)
}

func TestQuiesceFailureIsClear(t *testing.T) {
	u := lookupUsers(t)
	c := newComputer(t, u, workspace.Options{Quiesce: func(ctx context.Context) (func(), error) {
		return nil, fmt.Errorf("browser stuck")
	}})
	st, b := c.export(t, true)
	assert.Equal(t, 503, st, string(b))
	assert.NotContains(t, string(b), "browser stuck", "internals stay in the log")
}

// The desktop user owns desktop/: a link planted in place of screens/ or of
// a profile must neither receive an import nor feed an export.
func TestTamperedProfileDirs(t *testing.T) {
	u := lookupUsers(t)
	c := newComputer(t, u, workspace.Options{})
	secret := filepath.Join(c.outside, "x", "chromium")
	require.NoError(t, os.MkdirAll(secret, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(secret, "Login Data"), []byte("outside secret"), 0o600))

	// A profile dir that is a link to outside.
	require.NoError(t, os.MkdirAll(c.path("desktop/screens/eve"), 0o755))
	require.NoError(t, os.Symlink(secret, c.path("desktop/screens/eve/chromium")))
	st, b := c.importTar(t, newTB().file(t, "desktop/screens/eve/chromium/evil", "x").bytes(t))
	assert.Equal(t, 403, st, string(b))
	st, arch := c.export(t, true)
	require.Equal(t, 200, st)
	assert.NotContains(t, string(arch), "outside secret")

	// screens/ itself swapped for a link.
	require.NoError(t, os.RemoveAll(c.path("desktop/screens")))
	require.NoError(t, os.Symlink(c.outside, c.path("desktop/screens")))
	st, b = c.importTar(t, newTB().file(t, "desktop/screens/x/chromium/evil", "x").bytes(t))
	assert.Equal(t, 403, st, string(b))
	st, arch = c.export(t, true)
	require.Equal(t, 200, st)
	assert.NotContains(t, string(arch), "outside secret")
	assert.NotContains(t, names(readTar(t, arch)), "desktop/screens/x/chromium/Login Data")

	ents, err := os.ReadDir(secret)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "nothing written outside")
}

// With QuiesceScreen an export quiesces no browser for the whole transfer:
// each screen's browser alone, only around its own profile's copy, one
// after the other; a failure to quiesce one stops the export.
func TestExportQuiescesEachScreenAlone(t *testing.T) {
	u := lookupUsers(t)
	var mu sync.Mutex
	var events []string
	c := newComputer(t, u, workspace.Options{QuiesceScreen: func(ctx context.Context, id string) (func(), error) {
		mu.Lock()
		events = append(events, "quiesce "+id)
		mu.Unlock()
		return func() {
			mu.Lock()
			events = append(events, "resume "+id)
			mu.Unlock()
		}, nil
	}})
	c.populate(t)
	p := "desktop/screens/bob/chromium/"
	c.put(t, p+"Local State", "{}", u.desktop.UID, u.desktop.GID, 0o600)
	st, arch := c.export(t, true)
	require.Equal(t, 200, st, string(arch))
	assert.EqualValues(t, 0, c.quiesced.Load(), "no browser is quiesced for the whole export")
	assert.Equal(t, []string{"quiesce alice", "resume alice", "quiesce bob", "resume bob"}, events)
	got := readTar(t, arch)
	assert.Contains(t, got, p+"Local State")

	// A browser that cannot be quiesced: no whole archive.
	c2 := newComputer(t, u, workspace.Options{QuiesceScreen: func(ctx context.Context, id string) (func(), error) {
		return nil, fmt.Errorf("browser stuck")
	}})
	c2.populate(t)
	req, _ := http.NewRequest("GET", c2.url+"/workspace/export", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c2.client.Do(req)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Error(t, err, "an export whose browser could not be quiesced is a broken transfer, never a whole archive")
	assert.Empty(t, resp.Trailer.Get("X-Export-Files"))
}

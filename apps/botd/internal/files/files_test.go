package files_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/api"
	"github.com/open-bot/computer/apps/botd/internal/files"
	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

const token = "test-token-0123456789"

func TestMain(m *testing.M) {
	unix.Umask(0o002) // as botd does at start
	os.Exit(m.Run())
}

// fixture is a real BOTD_HOME in a temp dir with the real users, plus a
// sibling directory "outside" holding a secret that must never leak.
type fixture struct {
	base, home, ws, outside string
	bot                     osuser.User
	url                     string
	client                  *http.Client
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	bot, err := osuser.Lookup("bot")
	require.NoError(t, err)
	desktop, err := osuser.Lookup("desktop")
	require.NoError(t, err)
	base := t.TempDir()
	openUp(t, base)
	fx := &fixture{base: base, home: filepath.Join(base, "home"), outside: filepath.Join(base, "outside"), bot: bot}
	fx.ws = filepath.Join(fx.home, "bot")
	require.NoError(t, osuser.PrepareDirs(osuser.Layout(fx.home, desktop, bot)))
	require.NoError(t, os.MkdirAll(fx.outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(fx.outside, "secret"), []byte("TOP-SECRET"), 0o644))
	// Symlinks a bot could plant: absolute, climbing, and a harmless inner one.
	require.NoError(t, os.Symlink(fx.outside, filepath.Join(fx.ws, "abs-out")))
	require.NoError(t, os.Symlink("../../outside", filepath.Join(fx.ws, "rel-out")))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(fx.ws, "passwd")))
	require.NoError(t, os.WriteFile(filepath.Join(fx.ws, "shared", "hello.txt"), []byte("hello"), 0o664))
	require.NoError(t, os.Symlink("shared/hello.txt", filepath.Join(fx.ws, "inner")))

	srv := api.New(api.Options{Token: token, Log: zerolog.Nop(), Hub: health.NewHub()})
	files.New(files.Options{Workspace: fx.ws, Owner: bot, MaxWriteBytes: 1 << 20, Log: zerolog.Nop()}).Register(srv.Mux())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	fx.url, fx.client = ts.URL, ts.Client()
	return fx
}

// openUp lets bot and desktop traverse the temp dir and its parents.
func openUp(t testing.TB, dir string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := dir; strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
}

func (fx *fixture) do(t testing.TB, method, route, p string, body []byte, auth bool) (int, []byte) {
	t.Helper()
	u := fx.url + route + "?path=" + url.QueryEscape(p)
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	require.NoError(t, err)
	if auth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := fx.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func errCode(t testing.TB, b []byte) shared.Code {
	t.Helper()
	var env shared.ErrorEnvelope
	require.NoError(t, json.Unmarshal(b, &env), string(b))
	return env.Error.Code
}

func TestPutGetListDelete(t *testing.T) {
	fx := newFixture(t)
	st, b := fx.do(t, "PUT", "/files", "bots/alice/notes/todo.txt", []byte("buy milk\n"), true)
	require.Equal(t, 200, st, string(b))

	p := filepath.Join(fx.ws, "bots/alice/notes/todo.txt")
	fi, err := os.Stat(p)
	require.NoError(t, err)
	sys := fi.Sys().(*syscall.Stat_t)
	assert.Equal(t, fx.bot.UID, sys.Uid, "owner is bot")
	assert.Equal(t, uint32(osuser.BotsGID), sys.Gid, "group is bots")
	assert.Equal(t, os.FileMode(0o664), fi.Mode().Perm(), "mode per umask 002")
	di, err := os.Stat(filepath.Join(fx.ws, "bots/alice/notes"))
	require.NoError(t, err)
	assert.Equal(t, files.DirMode, di.Mode()&(os.ModePerm|os.ModeSetgid))
	assert.Equal(t, uint32(osuser.BotsGID), di.Sys().(*syscall.Stat_t).Gid)

	st, b = fx.do(t, "GET", "/files", "bots/alice/notes/todo.txt", nil, true)
	require.Equal(t, 200, st)
	assert.Equal(t, "buy milk\n", string(b))

	// Overwrite keeps an existing file's mode (an executable stays one).
	require.NoError(t, os.Chmod(p, 0o775))
	st, _ = fx.do(t, "PUT", "/files", "bots/alice/notes/todo.txt", []byte("v2"), true)
	require.Equal(t, 200, st)
	fi, _ = os.Stat(p)
	assert.Equal(t, os.FileMode(0o775), fi.Mode().Perm())

	st, b = fx.do(t, "GET", "/files/list", "bots/alice/notes", nil, true)
	require.Equal(t, 200, st)
	var l files.Listing
	require.NoError(t, json.Unmarshal(b, &l))
	require.Len(t, l.Entries, 1, "no temp file left behind")
	assert.Equal(t, "todo.txt", l.Entries[0].Name)
	assert.Equal(t, "file", l.Entries[0].Type)
	assert.EqualValues(t, 2, l.Entries[0].Size)

	st, b = fx.do(t, "GET", "/files/list", "", nil, true)
	require.Equal(t, 200, st)
	require.NoError(t, json.Unmarshal(b, &l))
	types := map[string]string{}
	for _, e := range l.Entries {
		types[e.Name] = e.Type
	}
	assert.Equal(t, "symlink", types["abs-out"])
	assert.Equal(t, "dir", types["bots"])

	st, b = fx.do(t, "DELETE", "/files", "bots/alice/notes", nil, true)
	assert.Equal(t, 409, st, string(b))
	st, _ = fx.do(t, "DELETE", "/files", "bots/alice/notes/todo.txt", nil, true)
	assert.Equal(t, 200, st)
	st, _ = fx.do(t, "GET", "/files", "bots/alice/notes/todo.txt", nil, true)
	assert.Equal(t, 404, st)
	st, _ = fx.do(t, "PUT", "/files", "bots/alice/x/y", []byte("z"), true)
	require.Equal(t, 200, st)
	req, _ := http.NewRequest("DELETE", fx.url+"/files?path=bots/alice&recursive=true", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := fx.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	_, err = os.Stat(filepath.Join(fx.ws, "bots/alice"))
	assert.True(t, os.IsNotExist(err))

	// A recursive delete removes links inside, never what they point to.
	st, _ = fx.do(t, "PUT", "/files", "bots/bob/keep", []byte("k"), true)
	require.Equal(t, 200, st)
	require.NoError(t, os.Symlink(fx.outside, filepath.Join(fx.ws, "bots/bob/out")))
	req, _ = http.NewRequest("DELETE", fx.url+"/files?path=bots/bob&recursive=true", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = fx.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	secret, err := os.ReadFile(filepath.Join(fx.outside, "secret"))
	require.NoError(t, err)
	assert.Equal(t, "TOP-SECRET", string(secret))

	// An inner symlink is followed (it stays inside).
	st, b = fx.do(t, "GET", "/files", "inner", nil, true)
	assert.Equal(t, 200, st)
	assert.Equal(t, "hello", string(b))
}

func TestAuthRequired(t *testing.T) {
	fx := newFixture(t)
	for _, route := range []string{"/files", "/files/list"} {
		st, b := fx.do(t, "GET", route, "shared/hello.txt", nil, false)
		assert.Equal(t, 401, st)
		assert.Equal(t, shared.CodeUnauthorized, errCode(t, b))
	}
	st, _ := fx.do(t, "PUT", "/files", "x", []byte("x"), false)
	assert.Equal(t, 401, st)
	_, err := os.Stat(filepath.Join(fx.ws, "x"))
	assert.True(t, os.IsNotExist(err))
}

func TestBadPaths(t *testing.T) {
	fx := newFixture(t)
	long := strings.Repeat("a/", 5000) // 10,000 characters
	cases := []struct {
		name, path string
		status     int
		code       shared.Code
	}{
		{"absolute", "/etc/passwd", 403, shared.CodeFSSandboxDenied},
		{"dotdot", "../outside/secret", 403, shared.CodeFSSandboxDenied},
		{"inner dotdot", "shared/../../outside/secret", 403, shared.CodeFSSandboxDenied},
		{"absolute symlink", "abs-out/secret", 403, shared.CodeFSSandboxDenied},
		{"climbing symlink", "rel-out/secret", 403, shared.CodeFSSandboxDenied},
		{"NUL byte", "shared/a\x00b", 400, shared.CodeBadRequest},
		{"invalid UTF-8", "shared/\xff\xfe", 400, shared.CodeBadRequest},
		{"10,000 characters", long, 400, shared.CodeBadRequest},
		{"long component", strings.Repeat("x", 300), 400, shared.CodeBadRequest},
		{"empty", "", 400, shared.CodeBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, m := range []string{"GET", "PUT", "DELETE"} {
				st, b := fx.do(t, m, "/files", c.path, []byte("pwned"), true)
				if c.path == "" && m == "DELETE" {
					assert.Equal(t, 403, st, "DELETE of the root")
					continue
				}
				assert.Equal(t, c.status, st, "%s %s", m, b)
				assert.Equal(t, c.code, errCode(t, b))
			}
			if c.path != "" {
				st, b := fx.do(t, "GET", "/files/list", c.path, nil, true)
				assert.Equal(t, c.status, st, string(b))
			}
		})
	}
	// A final-component symlink to outside: reading it is refused; PUT
	// replaces the link and DELETE removes the link, never the target.
	st, b := fx.do(t, "GET", "/files", "passwd", nil, true)
	assert.Equal(t, 403, st, string(b))
	assert.Equal(t, shared.CodeFSSandboxDenied, errCode(t, b))
	st, b = fx.do(t, "GET", "/files/list", "abs-out", nil, true)
	assert.Equal(t, 403, st, string(b))
	passwd, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	st, _ = fx.do(t, "DELETE", "/files", "passwd", nil, true)
	assert.Equal(t, 200, st)
	after, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	assert.Equal(t, passwd, after, "the link went, not its target")

	secret, err := os.ReadFile(filepath.Join(fx.outside, "secret"))
	require.NoError(t, err)
	assert.Equal(t, "TOP-SECRET", string(secret))
	ents, _ := os.ReadDir(fx.outside)
	assert.Len(t, ents, 1, "nothing written outside")
	// botd is unaffected.
	st, _ = fx.do(t, "GET", "/files", "shared/hello.txt", nil, true)
	assert.Equal(t, 200, st)
}

func TestPutTooLarge(t *testing.T) {
	fx := newFixture(t)
	big := bytes.Repeat([]byte("x"), 2<<20)
	st, b := fx.do(t, "PUT", "/files", "shared/big.bin", big, true)
	assert.Equal(t, 413, st)
	assert.Equal(t, shared.CodeTooLarge, errCode(t, b))
	// Without Content-Length (chunked), the limit applies while streaming.
	req, _ := http.NewRequest("PUT", fx.url+"/files?path=shared/big.bin", io.MultiReader(bytes.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := fx.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 413, resp.StatusCode)
	ents, err := os.ReadDir(filepath.Join(fx.ws, "shared"))
	require.NoError(t, err)
	for _, e := range ents {
		assert.NotContains(t, e.Name(), "big", "no partial or temp file left")
		assert.False(t, strings.HasPrefix(e.Name(), files.TempPrefix))
	}
}

func TestPutOntoSymlinkReplacesLink(t *testing.T) {
	fx := newFixture(t)
	st, b := fx.do(t, "PUT", "/files", "inner", []byte("new"), true)
	require.Equal(t, 200, st, string(b))
	fi, err := os.Lstat(filepath.Join(fx.ws, "inner"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	old, _ := os.ReadFile(filepath.Join(fx.ws, "shared/hello.txt"))
	assert.Equal(t, "hello", string(old))
}

func TestFIFODoesNotHang(t *testing.T) {
	fx := newFixture(t)
	require.NoError(t, unix.Mkfifo(filepath.Join(fx.ws, "fifo"), 0o664))
	st, b := fx.do(t, "GET", "/files", "fifo", nil, true)
	assert.Equal(t, 400, st, string(b))
}

// A hard link in the workspace to a file bot does not own (root's secret
// outside it) is refused; bot's own linked files still read.
func TestReadRefusesHardLinkToAFileBotDoesNotOwn(t *testing.T) {
	fx := newFixture(t)
	secret := filepath.Join(fx.outside, "secret")
	require.NoError(t, os.Link(secret, filepath.Join(fx.ws, "shared", "linked")))
	status, body := fx.do(t, "GET", "/files", "shared/linked", nil, true)
	require.Equal(t, http.StatusForbidden, status, string(body))
	require.NotContains(t, string(body), "TOP-SECRET")

	own := filepath.Join(fx.ws, "shared", "own.txt")
	require.NoError(t, os.WriteFile(own, []byte("mine"), 0o644))
	require.NoError(t, os.Chown(own, int(fx.bot.UID), int(fx.bot.GID)))
	require.NoError(t, os.Link(own, filepath.Join(fx.ws, "shared", "own-link.txt")))
	status, body = fx.do(t, "GET", "/files", "shared/own-link.txt", nil, true)
	require.Equal(t, http.StatusOK, status, string(body))
	require.Equal(t, "mine", string(body))
}

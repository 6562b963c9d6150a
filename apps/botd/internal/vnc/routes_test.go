package vnc

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/api"
	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/screen"
)

func TestSelfAuthIsExact(t *testing.T) {
	s := &Server{}
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"GET", "/screens/a/vnc", true},
		{"GET", "/screens/a-1_b/view", true},
		{"GET", "/screens/a/viewer-state", true},
		{"POST", "/screens/a/viewer-lease", true},
		{"DELETE", "/screens/a/viewer-lease", true},
		{"GET", "/viewer/app.js", true},
		{"GET", "/viewer/novnc/core/rfb.js", true},
		{"POST", "/screens/a/viewer-token", false}, // minting needs the bearer
		{"POST", "/screens/a/vnc", false},
		{"PUT", "/screens/a/viewer-lease", false},
		{"GET", "/screens/a/viewer-lease", false},
		{"POST", "/screens/a/lease", false},
		{"POST", "/screens/a/act", false},
		{"GET", "/screens/a/vnc/x", false},
		{"GET", "/screens//vnc", false},
		{"GET", "/screens/a.b/vnc", false},
		{"GET", "/screens", false},
		{"GET", "/screensx/a/vnc", false},
		{"POST", "/viewer/app.js", false},
		{"GET", "/health", false},
		{"GET", "/x/screens/a/vnc", false},
	} {
		r := httptest.NewRequest(tc.method, "http://botd"+tc.path, nil)
		require.Equal(t, tc.want, s.SelfAuth(r), "%s %s", tc.method, tc.path)
	}
}

// unitServer is the API with the viewer routes over a manager that never
// starts anything (no screen is ensured here).
func unitServer(t *testing.T, novnc string) (*Server, *httptest.Server) {
	t.Helper()
	m := screen.New(screen.Options{Home: t.TempDir()})
	hub := health.NewHub()
	t.Cleanup(hub.Close)
	srv := api.New(api.Options{Token: testToken, Log: zerolog.Nop(), Hub: hub, Health: health.NewModel(hub, timeZero)})
	v := New(Options{Screens: m, Token: testToken, Authorized: srv.Authorized, ListenHost: "127.0.0.1", NoVNCDir: novnc, Log: zerolog.Nop()})
	v.Routes(srv.Mux())
	srv.AllowSelfAuth(v.SelfAuth)
	srv.OnTokenRotate(v.Rekey) // as run.go wires it
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(v.Close)
	return v, ts
}

func get(t *testing.T, url string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

func TestViewerPageAndStatic(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "core", "util"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "app"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "core", "rfb.js"), []byte("export default 1;"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "app", "ui.js"), []byte("ui"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret.js"), []byte("no"), 0o644))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "core", "util", "passwd.js")))
	v, ts := unitServer(t, dir)

	code, body, _ := get(t, ts.URL+"/viewer/novnc/core/rfb.js", nil)
	require.Equal(t, 200, code)
	require.Equal(t, "export default 1;", body)
	code, body, _ = get(t, ts.URL+"/viewer/app.js", nil)
	require.Equal(t, 200, code)
	require.Contains(t, body, "import RFB from './novnc/core/rfb.js'")
	for _, p := range []string{"/viewer/novnc/app/ui.js", "/viewer/novnc/secret.js", "/viewer/novnc/core/util/passwd.js",
		"/viewer/novnc/core/%2e%2e/secret.js", "/viewer/novnc/core/rfb.json", "/viewer/novnc/vnc.html", "/viewer/other.js"} {
		code, body, _ := get(t, ts.URL+p, nil)
		require.NotEqual(t, 200, code, "%s: %s", p, body)
		require.NotContains(t, body, "root:")
	}

	// The page needs a link for its screen; it escapes the id and never
	// embeds the link.
	tok, _ := v.Signer().Mint("pg", ModeControl, "alice", 60e9)
	code, body, hdr := get(t, ts.URL+"/screens/pg/view?token="+tok, nil)
	require.Equal(t, 200, code)
	require.Contains(t, body, `data-mode="control"`)
	require.Contains(t, body, `id="take"`)
	require.NotContains(t, body, tok)
	require.Equal(t, "no-referrer", hdr.Get("Referrer-Policy"))
	require.Contains(t, hdr.Get("Content-Security-Policy"), "script-src 'self'")
	view, _ := v.Signer().Mint("pg", ModeView, "", 60e9)
	_, body, _ = get(t, ts.URL+"/screens/pg/view?token="+view, nil)
	require.NotContains(t, body, `id="take"`)
	code, _, _ = get(t, ts.URL+"/screens/other/view?token="+tok, nil)
	require.Equal(t, 401, code)
	code, _, _ = get(t, ts.URL+"/screens/pg/view", map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, 401, code, "the page needs a link, not the bearer")

	// State: a stopped screen says so.
	code, body, _ = get(t, ts.URL+"/screens/pg/viewer-state", map[string]string{"X-Viewer-Token": view})
	require.Equal(t, 200, code)
	require.Contains(t, body, `"running":false`)
	require.True(t, strings.Contains(body, `"mode":"view"`))
	// Releasing without control is a 404, with a view link a 401.
	req, _ := http.NewRequest("DELETE", ts.URL+"/screens/pg/viewer-lease", nil)
	req.Header.Set("X-Viewer-Token", tok)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 404, res.StatusCode)
	req.Header.Set("X-Viewer-Token", view)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 401, res.StatusCode)
}

var timeZero = time.Time{}

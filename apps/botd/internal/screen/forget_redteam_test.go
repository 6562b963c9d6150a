package screen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// Red team (issue 25, attack 3): the desktop user owns $BOTD_HOME/desktop
// and everything below it, so it can put a symlink to a root-only
// directory where a screen's files were. DELETE /screens/{id} (forget),
// which botd serves as root, must remove the link, never what it points
// at. Each row: desktop (a real process as the desktop user) plants the
// link, botd's real screen manager forgets the screen through its route,
// and the root-only file is still there.
func TestRedTeamForgetNeverFollowsDesktopLinks(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	d, err := osuser.Lookup("desktop")
	require.NoError(t, err)
	b, err := osuser.Lookup("bot")
	require.NoError(t, err)

	for _, row := range []struct {
		name string
		// plant is desktop's shell command, run in $BOTD_HOME/desktop with
		// $V the root-only directory.
		plant string
		// code is forget's answer: a link in place of "screens" is refused
		// (nothing of the screen is reachable without following it); a
		// link at or below the screen's directory is removed as a link.
		code int
	}{
		{"screens replaced by a link", `mv screens screens.old && ln -s "$V" screens`, http.StatusConflict},
		{"the screen's profile dir replaced by a link", `rm -rf screens/rt-f && ln -s "$V/rt-f" screens/rt-f`, http.StatusOK},
		{"the chromium profile replaced by a link", `rm -rf screens/rt-f/chromium && ln -s "$V/rt-f" screens/rt-f/chromium`, http.StatusOK},
	} {
		t.Run(row.name, func(t *testing.T) {
			home, err := os.MkdirTemp("", "forget-rt-")
			require.NoError(t, err)
			t.Cleanup(func() { _ = os.RemoveAll(home) })
			require.NoError(t, osuser.PrepareDirs(osuser.Layout(home, d, b)))
			// The screen has a profile on disk, as after a run.
			require.NoError(t, os.MkdirAll(filepath.Join(home, "desktop", "screens", "rt-f", "chromium", "Default"), 0o700))
			require.NoError(t, filepath.Walk(filepath.Join(home, "desktop", "screens", "rt-f"), func(p string, _ os.FileInfo, err error) error {
				if err != nil {
					return err
				}
				return os.Lchown(p, int(d.UID), int(d.GID))
			}))
			// Root's directory: only root may enter it.
			victim, err := os.MkdirTemp("", "forget-victim-")
			require.NoError(t, err)
			t.Cleanup(func() { _ = os.RemoveAll(victim) })
			require.NoError(t, os.Chmod(victim, 0o700))
			keep := filepath.Join(victim, "rt-f", "root-only")
			require.NoError(t, os.MkdirAll(filepath.Dir(keep), 0o700))
			require.NoError(t, os.WriteFile(keep, []byte("root's"), 0o600))

			m := New(Options{Home: home, Desktop: d, MaxScreens: 1, Log: zerolog.Nop()})
			t.Cleanup(func() { m.Close(context.Background()) })
			require.NotNil(t, m.Get("rt-f"), "the screen with a profile on disk is known")
			mux := http.NewServeMux()
			m.Routes(mux)

			code, out := runAs(t, d, []string{"V=" + victim}, "sh", "-c", "cd "+filepath.Join(home, "desktop")+" && "+row.plant)
			require.Equal(t, 0, code, out)

			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(http.MethodDelete, "/screens/rt-f", nil))
			t.Logf("DELETE /screens/rt-f: %d %s", w.Code, w.Body.String())

			got, err := os.ReadFile(keep)
			require.NoError(t, err, "forget deleted root's file through desktop's link")
			require.Equal(t, "root's", string(got))
			require.Equal(t, row.code, w.Code, w.Body.String())
			if row.code == http.StatusOK {
				_, err := os.Lstat(filepath.Join(home, "desktop", "screens", "rt-f"))
				require.True(t, os.IsNotExist(err), "the screen's directory (or link) is still there: %v", err)
			}
		})
	}
}

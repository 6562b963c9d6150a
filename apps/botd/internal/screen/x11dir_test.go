package screen

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// A fresh /tmp (a container's) used to get a 0775 X socket dir that Xvfb,
// as desktop, could not create its socket in: no screen started in Docker.
func TestX11SocketDir(t *testing.T) {
	testenv.RequireRoot(t) // the directory must be root's
	tmp := t.TempDir()
	fresh := filepath.Join(tmp, "fresh")
	require.NoError(t, safefs.EnsureRootDir(fresh, os.ModeSticky|0o777))
	st, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|os.ModeSticky|0o777, st.Mode(), "created through the umask")

	narrow := filepath.Join(tmp, "narrow")
	require.NoError(t, os.Mkdir(narrow, 0o775))
	require.NoError(t, safefs.EnsureRootDir(narrow, os.ModeSticky|0o777))
	st, err = os.Stat(narrow)
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|os.ModeSticky|0o777, st.Mode(), "an existing 0775 dir is repaired")

	// A link: refused, never chmod-ed through.
	target := filepath.Join(tmp, "target")
	require.NoError(t, os.Mkdir(target, 0o700))
	link := filepath.Join(tmp, "link")
	require.NoError(t, os.Symlink(target, link))
	require.Error(t, safefs.EnsureRootDir(link, os.ModeSticky|0o777))
	st, err = os.Stat(target)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	other := filepath.Join(tmp, "other")
	require.NoError(t, os.Mkdir(other, 0o775))
	require.NoError(t, os.Chown(other, 65534, 65534))
	// Someone else's: taken back as root's 1777 (sockets in it are checked
	// for desktop's ownership when dialled), on the fd, never through a path.
	require.NoError(t, safefs.EnsureRootDir(other, os.ModeSticky|0o777))
	st, err = os.Stat(other)
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|os.ModeSticky|0o777, st.Mode())
	require.Equal(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid)
}

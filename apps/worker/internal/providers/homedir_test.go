package providers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdoptHome: a replacement's users take over a worker-owned home: what
// the previous computer's ids own is handed to the new ones (a link is
// changed itself, never followed), other owners are left alone, the parent
// becomes root's, 0710, the new group's, and owners.json names the new ids.
func TestAdoptHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	l := &Local{o: LocalOptions{IDBase: DefaultLocalIDBase}}
	oldU, newU := l.usersFor(5), l.usersFor(7)
	parent := filepath.Join(t.TempDir(), "c_1.local")
	home := filepath.Join(parent, "home")
	require.NoError(t, os.MkdirAll(filepath.Join(home, "bot", "bots"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(home, "desktop"), 0o755))
	outside := filepath.Join(t.TempDir(), "outside")
	require.NoError(t, os.WriteFile(outside, nil, 0o644))
	files := map[string][2]int{ // path: uid, gid
		filepath.Join(home, "bot"):                {oldU.BotUID, oldU.GID},
		filepath.Join(home, "bot", "bots"):        {oldU.BotUID, oldU.BotUID},
		filepath.Join(home, "desktop"):            {oldU.DesktopUID, oldU.DesktopUID},
		filepath.Join(home, "desktop", "profile"): {oldU.DesktopUID, oldU.GID},
	}
	require.NoError(t, os.WriteFile(filepath.Join(home, "desktop", "profile"), nil, 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(home, "bot", "link")))
	require.NoError(t, os.Lchown(filepath.Join(home, "bot", "link"), oldU.BotUID, oldU.BotUID))
	for p, o := range files {
		require.NoError(t, os.Lchown(p, o[0], o[1]))
	}
	b, _ := json.Marshal(homeOwners{DesktopUID: oldU.DesktopUID, BotUID: oldU.BotUID, GID: oldU.GID})
	require.NoError(t, os.WriteFile(filepath.Join(parent, "owners.json"), b, 0o600))

	require.NoError(t, adoptHome(home, newU))
	owner := func(p string) [2]int {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		return [2]int{int(st.Uid), int(st.Gid)}
	}
	require.Equal(t, [2]int{newU.BotUID, newU.GID}, owner(filepath.Join(home, "bot")))
	require.Equal(t, [2]int{newU.BotUID, newU.BotUID}, owner(filepath.Join(home, "bot", "bots")))
	require.Equal(t, [2]int{newU.DesktopUID, newU.DesktopUID}, owner(filepath.Join(home, "desktop")))
	require.Equal(t, [2]int{newU.DesktopUID, newU.GID}, owner(filepath.Join(home, "desktop", "profile")))
	require.Equal(t, [2]int{newU.BotUID, newU.BotUID}, owner(filepath.Join(home, "bot", "link")))
	require.Equal(t, [2]int{0, 0}, owner(outside), "the link was not followed")
	require.Equal(t, [2]int{0, 0}, owner(home), "root's home directory stays root's")
	require.Equal(t, [2]int{0, newU.GID}, owner(parent))
	st, err := os.Stat(parent)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o710), st.Mode().Perm())
	var got homeOwners
	b, err = os.ReadFile(filepath.Join(parent, "owners.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, homeOwners{DesktopUID: newU.DesktopUID, BotUID: newU.BotUID, GID: newU.GID}, got)
}

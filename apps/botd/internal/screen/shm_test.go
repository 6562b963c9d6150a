package screen

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// shmIDs are the ids of the segments /proc/sysvipc/shm lists.
func shmIDs(t *testing.T) map[int]bool {
	t.Helper()
	b, err := os.ReadFile(sysvShmTable)
	require.NoError(t, err)
	ids := map[int]bool{}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if fs := strings.Fields(l); len(fs) > 1 {
			id, err := strconv.Atoi(fs[1])
			require.NoError(t, err)
			ids[id] = true
		}
	}
	return ids
}

// TestReapOrphanShm: a segment whose creator exited without removing it
// and that nothing attached is removed; one whose creator lives is kept.
func TestReapOrphanShm(t *testing.T) {
	testenv.RequireTools(t, "python3")
	// A program that makes a segment and exits without removing it, as a
	// killed X client does.
	out, err := exec.Command("python3", "-c", `import ctypes; print(ctypes.CDLL(None, use_errno=True).shmget(0, 5120, 0o1600))`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err, "%s", out)
	require.GreaterOrEqual(t, orphan, 0, "shmget failed in the child")
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(orphan, unix.IPC_RMID, nil) })
	// One of a live process (this one).
	kept, err := unix.SysvShmGet(unix.IPC_PRIVATE, 5120, unix.IPC_CREAT|0o600)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(kept, unix.IPC_RMID, nil) })
	require.True(t, shmIDs(t)[orphan], "the orphan is listed")

	require.Zero(t, reapOrphanShm(os.Getuid()+1), "another user's segments are not touched")
	require.True(t, shmIDs(t)[orphan])

	require.GreaterOrEqual(t, reapOrphanShm(os.Getuid()), 1)
	ids := shmIDs(t)
	require.False(t, ids[orphan], "the orphan is removed")
	require.True(t, ids[kept], "a live creator's segment is kept")
}

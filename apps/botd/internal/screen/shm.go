package screen

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysvShmTable is the kernel's list of System V shared memory segments.
const sysvShmTable = "/proc/sysvipc/shm"

// reapOrphanShm removes the System V shared memory segments owned by uid
// that nothing has attached and whose creator and last user have both
// exited, and returns how many it removed.
//
// X clients (x11vnc's polling, toolkits' images) share pixels with the X
// server through such segments and remove them when they exit cleanly; a
// program killed with SIGKILL (botd's own end takes its children with it)
// leaves its segments behind for good. They count against the host's limit
// of 4,096 segments (kernel.shmmni), and once it is reached x11vnc exits at
// once and no screen starts: a machine that had run the tests some forty
// times held 4,095 such segments of 5,120 bytes, all unattached. Nobody
// can use a segment whose creator is gone and that no one has attached
// (its id was never handed on), so removing it takes nothing from anyone;
// a live pid (or one reused since) keeps it.
func reapOrphanShm(uid int) int {
	f, err := os.Open(sysvShmTable)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	n := 0
	for sc.Scan() {
		// key shmid perms size cpid lpid nattch uid gid cuid cgid ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		id, err1 := strconv.Atoi(fs[1])
		cpid, err2 := strconv.Atoi(fs[4])
		lpid, err3 := strconv.Atoi(fs[5])
		nattch, err4 := strconv.Atoi(fs[6])
		owner, err5 := strconv.Atoi(fs[7])
		if errors.Join(err1, err2, err3, err4, err5) != nil || owner != uid || nattch != 0 || alive(cpid) || alive(lpid) {
			continue
		}
		if _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); err == nil {
			n++
		}
	}
	return n
}

// alive reports whether pid names a process (0: none recorded).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The helper process of TestWaitExitOtherThreads: its first thread exits
// during init (the runtime runs init on the process's first thread) while
// a goroutine on another thread writes a file 1.5 s later and then ends
// the process, as Chromium's threads write its profile after its first
// thread is gone.
func init() {
	out := os.Getenv("OPENBOT_WAITEXIT_HELPER")
	if out == "" {
		return
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		_ = os.WriteFile(out, []byte("written"), 0o600)
		syscall.Exit(0)
	}()
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// TestWaitExitOtherThreads: waitExit, through a pidfd and without one,
// does not take a zombie first thread for the process's end while another
// thread of it still runs: it returns once the last thread is gone, after
// that thread's write.
func TestWaitExitOtherThreads(t *testing.T) {
	for _, withPidfd := range []bool{false, true} {
		marker := filepath.Join(t.TempDir(), "written")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "OPENBOT_WAITEXIT_HELPER="+marker)
		require.NoError(t, cmd.Start())
		pid := cmd.Process.Pid
		pidfd := -1
		if withPidfd {
			fd, err := unix.PidfdOpen(pid, 0)
			require.NoError(t, err)
			pidfd = fd
		}
		// Its first thread is a zombie, another thread runs.
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				break
			}
			require.True(t, time.Now().Before(deadline), "the helper's first thread did not exit")
			time.Sleep(10 * time.Millisecond)
		}
		_, err := os.Stat(marker)
		require.True(t, os.IsNotExist(err), "the helper wrote before its first thread exited")
		require.True(t, waitExit(context.Background(), pid, pidfd, 20*time.Second), "the helper ended (pidfd %v)", withPidfd)
		_, err = os.Stat(marker)
		require.NoError(t, err, "waitExit (pidfd %v) returned before the helper's last thread wrote and exited", withPidfd)
		_ = cmd.Wait()
		if pidfd >= 0 {
			_ = unix.Close(pidfd)
		}
	}
}

package desktop

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// profileWrites is every path under dir with its modification time and
// size, to compare before and after.
func profileWrites(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			out[p] = fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), fi.Size())
		}
		return nil
	})
	return out
}

// browserProcs is every process whose command line names profile dir, the
// main process's threads included: a thread group whose first thread has
// exited still counts while another thread of it runs.
func browserProcs(dir string) []string {
	var out []string
	ms, _ := filepath.Glob("/proc/[0-9]*")
	for _, m := range ms {
		cl, _ := os.ReadFile(m + "/cmdline")
		ts, _ := os.ReadDir(m + "/task")
		if bytes.Contains(cl, []byte("--user-data-dir="+dir)) || (len(cl) == 0 && len(ts) > 1 && strings.Contains(readExe(m), "chromium")) {
			out = append(out, filepath.Base(m))
		}
	}
	return out
}

func readExe(procDir string) string {
	l, _ := os.Readlink(procDir + "/exe")
	return l
}

// TestBrowserCloseWaitsForExit: browserScript's close returns only once
// the browser is gone, with nothing of it still writing to the profile.
// Chromium's first thread exits (its command line reads empty) while its
// other threads still write the profile for a second or more: waiting on
// command lines alone, close returned while Preferences and the session
// were still being written (an export then lost a file it had listed).
// Here, on this host's Xvfb and Chromium, no file of the profile changes
// in the 3 s after close returns, and no process of it is left.
func TestBrowserCloseWaitsForExit(t *testing.T) {
	var bin string
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			bin = p
			break
		}
	}
	xvfb, err := exec.LookPath("Xvfb")
	if bin == "" || err != nil {
		skipOrFail(t, "Chromium and Xvfb are needed (%q, %v)", bin, err)
	}
	tmp := t.TempDir()
	display := fmt.Sprintf(":%d", 2600+os.Getpid()%100) // a band no other test uses
	x := exec.Command(xvfb, display, "-screen", "0", "800x600x24", "-nolisten", "tcp")
	require.NoError(t, x.Start())
	t.Cleanup(func() { _ = x.Process.Kill(); _ = x.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/tmp/.X11-unix/X" + strings.TrimPrefix(display, ":")); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "Xvfb %s did not start", display)
		time.Sleep(50 * time.Millisecond)
	}

	dir := filepath.Join(tmp, "profile")
	b := exec.Command(bin, "--no-sandbox", "--no-first-run", "--password-store=basic", "--user-data-dir="+dir, "about:blank")
	b.Env = append(os.Environ(), "DISPLAY="+display, "HOME="+tmp)
	b.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, b.Start())
	waited := make(chan struct{})
	go func() { _ = b.Wait(); close(waited) }()
	t.Cleanup(func() { _ = syscall.Kill(-b.Process.Pid, syscall.SIGKILL); <-waited })
	// Running, its profile written.
	deadline = time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "Default", "Preferences")); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "Chromium did not write its profile")
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)

	cmd := exec.Command("sh", "-c", browserScript, "sh", "close", dir, "s")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("close took %v", time.Since(t0).Round(time.Millisecond))
	require.Equal(t, display, strings.TrimSpace(string(out)), "close prints the display the browser ran on")
	before := profileWrites(t, dir)
	left := browserProcs(dir)
	time.Sleep(3 * time.Second)
	after := profileWrites(t, dir)
	var changed []string
	for p, v := range after {
		if before[p] != v {
			changed = append(changed, strings.TrimPrefix(p, dir))
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			changed = append(changed, strings.TrimPrefix(p, dir)+" (removed)")
		}
	}
	require.Empty(t, left, "processes of the profile left when close returned")
	require.Empty(t, changed, "the profile changed after close returned")
}

package browser

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// lockFiles are the files by which Chromium claims a profile.
var lockFiles = []string{"SingletonLock", "SingletonSocket", "SingletonCookie"}

// releaseProfile makes sure no live Chromium holds dir. SingletonLock is a
// symlink to "<hostname>-<pid>". A live Chromium on this host is asked to
// quit with SIGTERM (Chromium then shuts down cleanly and saves its session)
// and killed if it does not; then the lock files go, including stale ones a
// crash or another host left behind.
func releaseProfile(ctx context.Context, dir string, log zerolog.Logger) error {
	link, err := os.Readlink(filepath.Join(dir, "SingletonLock"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// Not a symlink: remove whatever it is below.
		link = ""
	}
	host, pid := parseLock(link)
	me, _ := os.Hostname()
	if pid > 0 && host == me && isChromium(pid) {
		log.Info().Int("pid", pid).Msg("another chromium holds the profile; closing it (its tabs come back)")
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if !waitGone(ctx, pid, 10*time.Second) {
			log.Warn().Int("pid", pid).Msg("chromium holding the profile ignored SIGTERM; killing it")
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone(ctx, pid, 3*time.Second)
		}
	}
	for _, f := range lockFiles {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func parseLock(link string) (string, int) {
	i := strings.LastIndexByte(link, '-')
	if i <= 0 {
		return "", 0
	}
	pid, err := strconv.Atoi(link[i+1:])
	if err != nil {
		return "", 0
	}
	return link[:i], pid
}

// isChromium reports whether pid is a live Chromium process.
func isChromium(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return false
	}
	c := strings.TrimSpace(string(comm))
	return strings.HasPrefix(c, "chrom")
}

// waitGone polls until pid is gone (or a zombie) or d passes.
func waitGone(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/safefs"
)

// lockFiles are the files by which Chromium claims a profile.
var lockFiles = []string{"SingletonLock", "SingletonSocket", "SingletonCookie"}

// own is every Browser this botd started and that has not exited yet: the
// Chromium processes botd knows to be its own.
var own = struct {
	sync.Mutex
	m map[*Browser]struct{}
}{m: map[*Browser]struct{}{}}

func addOwn(b *Browser) {
	own.Lock()
	own.m[b] = struct{}{}
	own.Unlock()
	go func() {
		<-b.proc.Done()
		own.Lock()
		delete(own.m, b)
		own.Unlock()
	}()
}

// ownHolding is botd's own live browser on profile dir whose main process
// is pid, or nil.
func ownHolding(dir string, pid int) *Browser {
	own.Lock()
	defer own.Unlock()
	for b := range own.m {
		if b.o.ProfileDir == dir && b.Pid() == pid {
			return b
		}
	}
	return nil
}

// profile is where a Chromium profile lives: dir is the exact
// --user-data-dir; base/rel is the same directory, opened from the trusted
// base without following a link (safefs), since its owner (desktop) can
// change everything in it; uid is the user botd runs Chromium as (-1:
// botd's own user, tests only).
type profile struct {
	dir       string
	base, rel string
	uid       int
}

// releaseProfile makes sure no live Chromium holds the profile, then
// removes its lock files. SingletonLock is a symlink to "<hostname>-<pid>",
// written by the profile's owner, who can make it name any process: so the
// pid is signalled only when it is botd's own Chromium on this profile
// (closed through its handle), or a process of the profile's user whose
// command line names exactly this --user-data-dir (a browser a person
// started from the screen's menu), asked to quit with SIGINT (it saves its
// session and writes its cookies; after SIGTERM Chromium exits without
// writing its cookie store) and killed if it does not. Any other process (another user's,
// or one merely named like Chromium) is left alone. The lock files are
// removed relative to the profile's fd, never through a link.
func releaseProfile(ctx context.Context, p profile, log zerolog.Logger) error {
	fd, err := safefs.OpenDirBelow(p.base, p.rel)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	link, err := readlinkAt(fd, "SingletonLock")
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	host, pid := parseLock(link) // not a link (err EINVAL): no pid; removed below
	me, _ := os.Hostname()
	if pid > 0 && host == me {
		if b := ownHolding(p.dir, pid); b != nil {
			log.Info().Int("pid", pid).Msg("botd's previous chromium still holds the profile; closing it")
			if err := b.Close(ctx); err != nil {
				return err
			}
		} else if p.uid >= 0 {
			closeUsersChromium(ctx, pid, p, log)
		} else {
			log.Warn().Int("pid", pid).Msg("the profile's lock names a process botd did not start; left alone")
		}
	}
	for _, f := range lockFiles {
		if err := unix.Unlinkat(fd, f, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "remove", Path: p.dir + "/" + f, Err: err}
		}
	}
	return nil
}

// maxPreferences bounds the Preferences file markCleanExit reads.
const maxPreferences = 16 << 20

// markCleanExit records the profile's last exit as clean in its
// Default/Preferences (exit_type "Normal", exited_cleanly true) when it
// says otherwise. Chromium records "Crashed" while it runs, so a profile
// whose browser was killed, or whose machine was lost and replaced from a
// checkpoint, says "Crashed"; Chromium then ignores --restore-last-session
// and opens a new tab page instead of the profile's tabs (seen with
// Chromium 156: three restarts after a SIGKILL, no tab back; with the mark,
// each brought the page back). The file is the profile user's: opened
// below the profile without following a link, and rewritten in place only
// when it is a regular file with one link, owned by that user (uid -1: the
// profile is botd's own).
func markCleanExit(p profile, log zerolog.Logger) error {
	const notPlain = "the profile's Preferences is not a plain file of its user: its last exit is left as recorded"
	dfd, err := safefs.OpenDirBelow(p.base, filepath.Join(p.rel, "Default"))
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if errors.Is(err, safefs.ErrUnsafe) {
		log.Warn().Msg(notPlain)
		return nil
	}
	if err != nil {
		return fmt.Errorf("browser: profile: %w", err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, "Preferences", unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if errors.Is(err, unix.ELOOP) {
		log.Warn().Msg(notPlain)
		return nil
	}
	if err != nil {
		return fmt.Errorf("browser: profile: open Preferences: %w", err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(p.dir, "Default", "Preferences"))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("browser: profile: %w", err)
	}
	owner := p.uid
	if owner < 0 {
		owner = os.Geteuid()
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != owner || st.Size > maxPreferences {
		log.Warn().Msg(notPlain)
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPreferences))
	if err != nil {
		return fmt.Errorf("browser: profile: read Preferences: %w", err)
	}
	out := bytes.Replace(data, []byte(`"exit_type":"Crashed"`), []byte(`"exit_type":"Normal"`), 1)
	out = bytes.Replace(out, []byte(`"exited_cleanly":false`), []byte(`"exited_cleanly":true`), 1)
	if bytes.Equal(out, data) {
		return nil
	}
	if _, err := f.WriteAt(out, 0); err != nil {
		return fmt.Errorf("browser: profile: write Preferences: %w", err)
	}
	if err := f.Truncate(int64(len(out))); err != nil {
		return fmt.Errorf("browser: profile: write Preferences: %w", err)
	}
	log.Info().Msg("the profile's last exit was not clean (its browser or machine died): marked clean so its tabs come back")
	return nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// closeUsersChromium asks pid to quit (SIGINT, then SIGKILL) if it is a
// process of p.uid whose command line holds --user-data-dir=p.dir. The
// process is pinned with a pidfd before it is checked, and the signals go
// to that pidfd, so a pid that is reused meanwhile is never signalled.
func closeUsersChromium(ctx context.Context, pid int, p profile, log zerolog.Logger) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // gone: the lock is stale
	}
	if err != nil {
		pidfd = -1 // no pidfds here (an old kernel or seccomp): plain kill below
	} else {
		defer unix.Close(pidfd)
	}
	if why := holdsProfile(pid, p); why != "" {
		log.Warn().Int("pid", pid).Str("why", why).Msg("the profile's lock names a process that is not this profile's chromium; left alone")
		return
	}
	signal := func(sig syscall.Signal) error {
		if pidfd >= 0 {
			return unix.PidfdSendSignal(pidfd, sig, nil, 0)
		}
		return syscall.Kill(pid, sig)
	}
	// Signal 0 through the pidfd: the process checked above is the one
	// pinned (had it exited before the check, this fails).
	if signal(0) != nil {
		return
	}
	log.Info().Int("pid", pid).Msg("another chromium holds the profile; closing it (its tabs come back)")
	_ = signal(syscall.SIGINT)
	if !waitExit(ctx, pid, pidfd, 10*time.Second) {
		log.Warn().Int("pid", pid).Msg("chromium holding the profile ignored SIGINT; killing it")
		_ = signal(syscall.SIGKILL)
		waitExit(ctx, pid, pidfd, 3*time.Second)
	}
}

// holdsProfile is "" when pid runs as p.uid (real, effective, saved and
// filesystem uid) with --user-data-dir=p.dir in its command line, else why
// not.
func holdsProfile(pid int, p profile) string {
	proc := "/proc/" + strconv.Itoa(pid)
	st, err := os.ReadFile(proc + "/status")
	if err != nil {
		return "no status: " + err.Error()
	}
	uids := ""
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			uids = v
		}
	}
	f := strings.Fields(uids)
	if len(f) != 4 {
		return "no uids"
	}
	for _, u := range f {
		if u != strconv.Itoa(p.uid) {
			return "runs as uid " + strings.Join(f, "/") + ", not " + strconv.Itoa(p.uid)
		}
	}
	cmd, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return "no cmdline: " + err.Error()
	}
	if !namesProfile(cmd, p.dir) {
		return "its command line does not name this profile"
	}
	return ""
}

// namesProfile reports whether a /proc/<pid>/cmdline holds the argument
// --user-data-dir=dir: as one of its NUL-separated arguments, or, for a
// Chromium with a display, which rewrites its argv into one title (the
// arguments joined by spaces), as a whole space-separated word of it. (A
// dir with spaces could be matched by a longer one there; only a process
// of the profile's own user is ever considered, which that user may end
// anyway.)
func namesProfile(cmd []byte, dir string) bool {
	flag := []byte("--user-data-dir=" + dir)
	args := bytes.Split(bytes.TrimRight(cmd, "\x00"), []byte{0})
	for _, a := range args {
		if bytes.Equal(a, flag) {
			return true
		}
	}
	if len(args) == 1 {
		title := append(append([]byte{' '}, args[0]...), ' ')
		return bytes.Contains(title, append(append([]byte{' '}, flag...), ' '))
	}
	return false
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

// waitExit waits until pid has exited (its pidfd, when there is one, turns
// readable; else /proc says gone, or a zombie with no other thread left)
// or d passes.
func waitExit(ctx context.Context, pid, pidfd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if pidfd >= 0 {
			fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 100); n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
				return n > 0
			}
			continue
		}
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		// A zombie first thread is not the end: Chromium's other threads
		// go on writing the profile after it (its task list says so).
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			if ts, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task"); err != nil || len(ts) <= 1 {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

package browser_test

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// copyExe copies the program src to dir/name (0755): a process named like
// Chromium that is not one.
func copyExe(t *testing.T, src, dir, name string) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, name)
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// Red team (issue 25, attack 3): a profile's SingletonLock is a symlink
// its owner, desktop, writes; it names a pid that botd (root) used to
// SIGTERM and SIGKILL whenever that process's name began with "chrom",
// whoever owned it. Each row: a process named like Chromium runs, desktop
// (a real process as the desktop user) points the lock of a screen's
// profile at it, botd's browser starts real Chromium on that profile
// (releasing it first), and the process is checked. Only a process of the
// desktop user whose command line names exactly this --user-data-dir (a
// browser a person started from the screen's menu) may be closed.
func TestRedTeamProfileReleaseSignalsOnlyItsChromium(t *testing.T) {
	u := browsertest.Require(t)
	bot, err := osuser.Lookup("bot")
	if err != nil {
		testenv.Unavailable(t, "bot user: %v", err)
	}
	old := browsertest.Displays
	browsertest.Displays = [2]int{600, 619}
	t.Cleanup(func() { browsertest.Displays = old })
	x := browsertest.StartX(t, u)
	bin := browsertest.TempDir(t, u)
	sleepy := copyExe(t, "/bin/sleep", bin, "chromium-x")
	shy := copyExe(t, "/bin/sh", bin, "chromium-y")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}

	for i, row := range []struct {
		name string
		user *osuser.User // nil: root
		// argv gets the row's profile dir and another screen's.
		argv func(profile, other string) []string
		// closed: the process must be gone after the release.
		closed bool
	}{
		{"root's process named chromium-x", nil, func(_, _ string) []string { return []string{sleepy, "600"} }, false},
		{"bot's process named chromium-x", &bot, func(_, _ string) []string { return []string{sleepy, "600"} }, false},
		{"desktop's chromium-y on another screen's profile", &u, func(_, other string) []string {
			return []string{shy, "-c", "sleep 600 & wait", "chromium-y", "--user-data-dir=" + other}
		}, false},
		{"desktop's chromium-y on this profile (a person's browser)", &u, func(profile, _ string) []string {
			return []string{shy, "-c", "sleep 600 & wait", "chromium-y", "--user-data-dir=" + profile}
		}, true},
	} {
		t.Run(row.name, func(t *testing.T) {
			name := "rt-lock-" + strconv.Itoa(i)
			o := x.Options(t, name)
			// The screen's profile exists, desktop's, as after a run.
			if err := safefs.EnsureDir(filepath.Join(x.Dir, "screens"), name+"/chromium", 0o700, int(u.UID), int(u.GID)); err != nil {
				t.Fatal(err)
			}
			p, err := runner.Exec{}.Start(runner.Spec{Argv: row.argv(o.ProfileDir, x.Profile("someone-else")), User: row.user, Dir: "/"})
			if err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _, _ = p.Wait(); close(exited) }()
			t.Cleanup(func() {
				_ = p.SignalGroup(syscall.SIGKILL)
				<-exited
			})
			var out []byte
			lp, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"ln", "-sfn", host + "-" + strconv.Itoa(p.Pid()), filepath.Join(o.ProfileDir, "SingletonLock")},
				User: &u, Dir: "/", Stdout: writerTo(&out), Stderr: writerTo(&out)})
			if err != nil {
				t.Fatal(err)
			}
			if code, err := lp.Wait(); code != 0 || err != nil {
				t.Fatalf("desktop's ln: %d %v %s", code, err, out)
			}

			browsertest.Launch(t, o)

			if row.closed {
				select {
				case <-exited:
				case <-time.After(15 * time.Second):
					t.Fatal("the browser a person started on this profile was not closed")
				}
				return
			}
			if !testenv.Alive(p.Pid()) {
				t.Fatalf("botd signalled pid %d (%v), which desktop's SingletonLock named: not a Chromium on this profile", p.Pid(), row.argv(o.ProfileDir, x.Profile("someone-else")))
			}
		})
	}
	// botd's own earlier browser still on the profile is closed (through
	// its handle) when botd starts another on it.
	t.Run("botd's own browser on this profile", func(t *testing.T) {
		o := x.Options(t, "rt-lock-own")
		first := browsertest.Launch(t, o)
		browsertest.Launch(t, o)
		select {
		case <-first.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("botd's earlier browser on the profile still runs")
		}
	})
}

type sliceWriter struct{ b *[]byte }

func (w sliceWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

func writerTo(b *[]byte) io.Writer { return sliceWriter{b} }

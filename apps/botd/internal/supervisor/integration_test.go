package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for testenv.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRealStubbornChildKilledAfterGrace(t *testing.T) {
	testenv.RequireTools(t, "sh")
	trapped := filepath.Join(t.TempDir(), "trapped")
	s := New(Options{})
	// sh says when its trap is in place; only then is TERM sure to be ignored.
	p, err := s.Start(Spec{Name: "stubborn", Restart: RestartNever, Cmd: runner.Spec{Argv: []string{"sh", "-c", `trap '' TERM; echo > "$0"; while :; do sleep 0.05; done`, trapped}}})
	require.NoError(t, err)
	require.NoError(t, p.WaitRunning(testenv.Context(t, 30*time.Second)))
	require.Eventually(t, func() bool { _, err := os.Stat(trapped); return err == nil },
		30*time.Second, 10*time.Millisecond, "sh never installed its trap")
	start := time.Now()
	require.NoError(t, p.Stop(testenv.Context(t, 60*time.Second)))
	took := time.Since(start)
	require.GreaterOrEqual(t, took, StopGrace-100*time.Millisecond, "killed before the grace period")
	// A liveness bound, not a speed figure: a child never KILLed would run on.
	require.Less(t, took, StopGrace+30*time.Second)
	require.Equal(t, shared.StateStopped, p.State())
}

func TestRealKilledChildRestartsAndGrandchildrenDie(t *testing.T) {
	testenv.RequireTools(t, "sh", "sleep")
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	s := New(Options{})
	// The child starts a grandchild in the background, records its pid, and waits.
	p, err := s.Start(Spec{Name: "parent", Restart: RestartAlways, Cmd: runner.Spec{Argv: []string{"sh", "-c", `sleep 300 & echo $! >> "$0"; wait`, pidFile}}})
	require.NoError(t, err)
	require.NoError(t, p.WaitRunning(testenv.Context(t, 30*time.Second)))
	grandchild := readPid(t, pidFile, 1)
	first := p.Pid()
	require.NoError(t, syscall.Kill(first, syscall.SIGKILL))
	waitGone(t, grandchild) // died with the group

	deadline := time.Now().Add(30 * time.Second)
	for p.Pid() == 0 || p.Pid() == first || p.State() != shared.StateRunning {
		require.True(t, time.Now().Before(deadline), "not restarted")
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 1, p.Restarts())
	second := p.Pid()
	gc2 := readPid(t, pidFile, 2)
	s.StopAll(testenv.Context(t, 10*time.Second))
	waitGone(t, second)
	waitGone(t, gc2)
}

func TestRealChildRunsAsUserWithBotsGroup(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireUsers(t)
	bot, err := osuser.Lookup("bot")
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "supervisor-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	out := filepath.Join(dir, "id")
	s := New(Options{})
	p, err := s.Start(Spec{Name: "id", Restart: RestartNever, Cmd: runner.Spec{User: &bot, Argv: []string{"sh", "-c", `id -u > "$0"; id -G >> "$0"`, out}}})
	require.NoError(t, err)
	<-p.Done()
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Equal(t, strconv.Itoa(int(bot.UID)), lines[0])
	require.Contains(t, strings.Fields(lines[1]), strconv.Itoa(osuser.BotsGID))
	require.Equal(t, shared.StateStopped, p.State(), "exit 0 of a restart=never process is a stop")
}

// readPid waits for the nth line of path and returns it as a pid.
func readPid(t *testing.T, path string, nth int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if lines := strings.Fields(string(b)); err == nil && len(lines) >= nth {
			if n, err := strconv.Atoi(lines[nth-1]); err == nil && n > 0 {
				return n
			}
		}
		require.True(t, time.Now().Before(deadline), "no pid in %s", path)
		time.Sleep(10 * time.Millisecond)
	}
}

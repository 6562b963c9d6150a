package providers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared/client"
)

// Displays 660-679 and ports 17000-17499 are these tests' own (no other
// test uses them): 660-667, 670-677 and 678-679; 17000-17021, 17100-17121
// and 17200-17209.
const (
	usersDisplayBase = 660
	usersPortBase    = 17000
)

func usersLocal(t *testing.T, name string, displayBase, portBase, maxScreens int) (*Local, LocalOptions) {
	t.Helper()
	requireHost(t)
	for _, tool := range []string{"xdpyinfo", "setpriv", "useradd"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s not on PATH (scripts/provision.sh)", tool)
		}
	}
	o := LocalOptions{
		DataDir: filepath.Join(tmpRoot, name), BotdBin: testBotd(t),
		DisplayBase: displayBase, PortBase: portBase, Slots: 2, MaxScreens: maxScreens,
		ReadyTimeout: 3 * time.Minute,
	}
	l, err := NewLocal(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l, o
}

// asUser runs argv as the named user (its uid, primary group and groups),
// with env and nothing else: a process of that position on the host.
func asUser(t *testing.T, name string, env []string, argv ...string) (string, error) {
	t.Helper()
	u, err := user.Lookup(name)
	require.NoError(t, err)
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", "--"}, argv...)...)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Two computers of two teams on one host: from team B's shell (its bot,
// through B's botd exec API, as the shell tool runs) and from a terminal
// on B's screen (B's desktop with B's DISPLAY and XAUTHORITY), team A's
// workspace, profiles, X cookie and botd token are unreadable, and A's
// display does not open. The positions are real: each reads its own.
func TestLocalUsersTeamsDoNotShare(t *testing.T) {
	l, _ := usersLocal(t, "data-users-teams", usersDisplayBase, usersPortBase, 4)
	ctx := testCtx(t, 6*time.Minute)

	type team struct {
		ref     string
		c       Machine
		scr     client.Screen
		desktop string
		bot     string
	}
	var teams []team
	for _, id := range []string{"team-a-pc", "team-b-pc"} {
		spec := Spec{ComputerID: id, BotdToken: testToken()}
		ref, err := l.Provision(ctx, spec)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Destroy(context.Background(), ref) })
		m, err := l.Reconnect(ctx, ref, spec)
		require.NoError(t, err)
		s, err := m.StartScreen(ctx, "alice")
		require.NoError(t, err)
		d, b := l.Users(ref)
		teams = append(teams, team{ref: ref, c: m, scr: s, desktop: d, bot: b})
	}
	a, b := teams[0], teams[1]
	assert.NotEqual(t, a.desktop, b.desktop, "each computer has its own desktop user")
	assert.NotEqual(t, a.bot, b.bot, "each computer has its own bot user")

	const secret = "secret-plan: launch on friday"
	require.NoError(t, a.c.WriteFile(ctx, "bots/alice/secret-plan.txt", []byte(secret)))
	require.NoError(t, b.c.WriteFile(ctx, "bots/bob/mine.txt", []byte("b's own")))
	aHome, bHome := l.home(a.ref), l.home(b.ref)
	aCookie := filepath.Join(aHome, "desktop", ".Xauthority-"+strconv.Itoa(a.scr.Slot))
	bCookie := filepath.Join(bHome, "desktop", ".Xauthority-"+strconv.Itoa(b.scr.Slot))
	aProfile := filepath.Join(aHome, "desktop", "screens", "alice")
	// A file of A's profile, as Chromium leaves them: A's desktop's.
	aUser, err := user.Lookup(a.desktop)
	require.NoError(t, err)
	auid, _ := strconv.Atoi(aUser.Uid)
	agid, _ := strconv.Atoi(aUser.Gid)
	profileFile := filepath.Join(aProfile, "Preferences")
	require.NoError(t, os.WriteFile(profileFile, []byte(`{"profile":"team a"}`), 0o644))
	require.NoError(t, os.Chown(profileFile, auid, agid))
	token, err := os.ReadFile(l.token(a.ref))
	require.NoError(t, err)
	for _, p := range []string{aCookie, bCookie, profileFile, filepath.Join(aHome, "bot", "bots", "alice", "secret-plan.txt")} {
		require.FileExists(t, p)
	}

	// Positions.
	bDesktopEnv := []string{"DISPLAY=" + b.scr.Display, "XAUTHORITY=" + bCookie, "HOME=" + filepath.Join(bHome, "desktop")}
	type result struct {
		out string
		ok  bool
	}
	bShell := func(env map[string]string, argv ...string) result {
		r, err := b.c.Exec(ctx, client.ExecRequest{Argv: argv, Env: env})
		require.NoError(t, err)
		return result{r.Stdout + r.Stderr, r.ExitCode == 0}
	}
	bTerminal := func(env map[string]string, argv ...string) result {
		e := append([]string(nil), bDesktopEnv...)
		for k, v := range env {
			e = append(e, k+"="+v)
		}
		out, err := asUser(t, b.desktop, e, argv...)
		return result{out, err == nil}
	}
	// The positions are what they say: B's terminal opens B's display,
	// B's shell reads B's workspace, and A's desktop reads A's cookie.
	require.True(t, bTerminal(nil, "xdpyinfo").ok, "B's desktop opens its own display")
	require.Contains(t, bShell(nil, "cat", filepath.Join(bHome, "bot", "bots", "bob", "mine.txt")).out, "b's own")
	own, err := asUser(t, a.desktop, nil, "cat", aCookie)
	require.NoError(t, err, "A's desktop reads A's cookie: %s", own)

	rows := []struct {
		name string
		env  map[string]string
		argv []string
	}{
		{"A's workspace file", nil, []string{"cat", filepath.Join(aHome, "bot", "bots", "alice", "secret-plan.txt")}},
		{"A's workspace by search", nil, []string{"sh", "-c", "grep -rs secret-plan " + filepath.Join(aHome, "bot") + " && exit 0; exit 1"}},
		{"A's profile file", nil, []string{"cat", profileFile}},
		{"A's profile listing", nil, []string{"ls", aProfile}},
		{"A's X cookie", nil, []string{"cat", aCookie}},
		{"A's botd token file", nil, []string{"cat", l.token(a.ref)}},
		{"A's display with A's cookie", map[string]string{"XAUTHORITY": aCookie}, []string{"xdpyinfo", "-display", a.scr.Display}},
		{"A's display with B's own cookie", nil, []string{"xdpyinfo", "-display", a.scr.Display}},
		{"A's display through xdotool", map[string]string{"XAUTHORITY": aCookie, "DISPLAY": a.scr.Display}, []string{"xdotool", "getmouselocation"}},
	}
	for _, pos := range []struct {
		name string
		run  func(map[string]string, ...string) result
	}{{"B's shell (bot)", bShell}, {"a terminal on B's screen (desktop)", bTerminal}} {
		for _, row := range rows {
			// assert, not require: every row is reported.
			r := pos.run(row.env, row.argv...)
			assert.False(t, r.ok, "%s reached %s", pos.name, row.name)
			assert.NotContains(t, r.out, secret, "%s: %s", pos.name, row.name)
			assert.NotContains(t, r.out, "team a", "%s: %s", pos.name, row.name)
			assert.NotContains(t, r.out, strings.TrimSpace(string(token)), "%s: %s", pos.name, row.name)
		}
	}
}

// A restarted worker re-adopts each computer's users (the same names and
// ids, botd runs as them again); Destroy removes them, their groups and
// what they left on the host, and no process of theirs survives.
func TestLocalUsersReadoptedAndRemoved(t *testing.T) {
	l, o := usersLocal(t, "data-users-readopt", usersDisplayBase+10, usersPortBase+100, 4)
	ctx := testCtx(t, 6*time.Minute)
	spec := Spec{ComputerID: "readopt", BotdToken: testToken()}
	ref, err := l.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Destroy(context.Background(), ref) })
	m, err := l.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	desk, bot := l.Users(ref)
	require.NotEmpty(t, desk)
	r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"id", "-un"}})
	require.NoError(t, err)
	require.Equal(t, bot+"\n", r.Stdout, "the shell runs as the computer's own bot")
	meta, err := l.readMeta(ref)
	require.NoError(t, err)
	u := *meta.Users
	st, err := os.Stat(l.dir(ref))
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|0o710, st.Mode(), "the computer's directory: root's, its group passes")
	require.EqualValues(t, u.GID, st.Sys().(*syscall.Stat_t).Gid)
	// Something a teammate leaves behind on the host: a file in /tmp and
	// a process that outlives botd (its own session).
	r, err = m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "echo x > /tmp/obc-left-" + ref + "; setsid sleep 600 </dev/null >/dev/null 2>&1 & echo started"}})
	require.NoError(t, err)
	require.Contains(t, r.Stdout, "started")

	// The worker restarts.
	require.NoError(t, l.Close(ctx))
	l2, err := NewLocal(o)
	require.NoError(t, err)
	defer l2.Close(context.Background())
	m2, err := l2.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	d2, b2 := l2.Users(ref)
	require.Equal(t, [2]string{desk, bot}, [2]string{d2, b2}, "the same users")
	r, err = m2.Exec(ctx, client.ExecRequest{Argv: []string{"id", "-un"}})
	require.NoError(t, err)
	require.Equal(t, bot+"\n", r.Stdout)
	s, err := m2.StartScreen(ctx, "alice")
	require.NoError(t, err)
	out, err := asUser(t, desk, []string{"DISPLAY=" + s.Display, "XAUTHORITY=" + filepath.Join(l2.home(ref), "desktop", ".Xauthority-"+strconv.Itoa(s.Slot))}, "xdpyinfo")
	require.NoError(t, err, "its desktop still opens its screen: %s", out)
	require.NotEmpty(t, procsOf(u.uids()), "the left-behind process runs")

	require.NoError(t, l2.Destroy(ctx, ref))
	for _, n := range []string{u.Desktop, u.Bot} {
		_, err := user.Lookup(n)
		require.Error(t, err, "user %s is gone", n)
	}
	for _, n := range []string{u.Desktop, u.Bot, u.Group} {
		_, err := user.LookupGroup(n)
		require.Error(t, err, "group %s is gone", n)
	}
	require.Empty(t, procsOf(u.uids()), "no process of the computer's users is left")
	require.NoFileExists(t, "/tmp/obc-left-"+ref)
	for _, d := range sharedDirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			fi, err := os.Lstat(filepath.Join(d, e.Name()))
			if err != nil {
				continue
			}
			st := fi.Sys().(*syscall.Stat_t)
			require.False(t, containsInt(u.uids(), int(st.Uid)), "%s is still owned by the computer's user", filepath.Join(d, e.Name()))
		}
	}
	require.NoDirExists(t, l2.dir(ref))
}

// A computer made before each had its own users (machine.json without
// them, its home owned by the host's shared desktop, bot and bots) gets
// users of its own at its next start, and its files are handed over.
func TestLocalUsersForEarlierComputer(t *testing.T) {
	l, _ := usersLocal(t, "data-users-earlier", usersDisplayBase+18, usersPortBase+200, 1)
	ctx := testCtx(t, 5*time.Minute)
	spec := Spec{ComputerID: "earlier", BotdToken: testToken()}
	ref, err := l.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Destroy(context.Background(), ref) })
	// Make it what an earlier worker left.
	meta, err := l.readMeta(ref)
	require.NoError(t, err)
	require.NoError(t, meta.Users.remove())
	meta.Users = nil
	l.mu.Lock()
	require.NoError(t, l.writeMetaLocked(ref, meta))
	l.mu.Unlock()
	require.NoError(t, os.Chown(l.dir(ref), 0, 0))
	require.NoError(t, os.Chmod(l.dir(ref), 0o755))
	hostBot, err := user.Lookup("bot")
	require.NoError(t, err)
	hbuid, _ := strconv.Atoi(hostBot.Uid)
	alice := filepath.Join(l.home(ref), "bot", "bots", "alice")
	require.NoError(t, os.MkdirAll(alice, 0o775))
	f := filepath.Join(alice, "notes.txt")
	require.NoError(t, os.WriteFile(f, []byte("kept"), 0o660))
	for _, p := range []string{filepath.Join(l.home(ref), "bot"), filepath.Join(l.home(ref), "bot", "bots"), alice, f} {
		require.NoError(t, os.Chown(p, hbuid, 1100))
	}
	require.Empty(t, func() string { d, _ := l.Users(ref); return d }())

	m, err := l.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	desk, bot := l.Users(ref)
	require.NotEmpty(t, desk)
	meta, err = l.readMeta(ref)
	require.NoError(t, err)
	st, err := os.Stat(f)
	require.NoError(t, err)
	require.EqualValues(t, meta.Users.BotUID, st.Sys().(*syscall.Stat_t).Uid, "the file is the computer's own bot's")
	require.EqualValues(t, meta.Users.GID, st.Sys().(*syscall.Stat_t).Gid, "in the computer's own group")
	r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "id -un; cat bots/alice/notes.txt; echo more >> bots/alice/notes.txt && echo wrote"}})
	require.NoError(t, err)
	require.Equal(t, bot+"\nkeptwrote\n", r.Stdout, r.Stderr)
	st, err = os.Stat(l.dir(ref))
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|0o710, st.Mode())
}

// Users whose computer directory was lost (machine.json with it) are
// found through the provider's claims and removed when the worker starts.
func TestLocalUsersOfALostComputerRemoved(t *testing.T) {
	l, o := usersLocal(t, "data-users-lost", usersDisplayBase+18, usersPortBase+200, 1)
	ctx := testCtx(t, time.Minute)
	ref, err := l.Provision(ctx, Spec{ComputerID: "lost", BotdToken: testToken()})
	require.NoError(t, err)
	meta, err := l.readMeta(ref)
	require.NoError(t, err)
	u := *meta.Users
	require.True(t, u.present())
	require.FileExists(t, l.claimFile(u.Index))
	require.NoError(t, os.RemoveAll(l.dir(ref)))
	require.NoError(t, l.Close(ctx))

	l2, err := NewLocal(o)
	require.NoError(t, err)
	defer l2.Close(context.Background())
	for _, n := range []string{u.Desktop, u.Bot} {
		_, err := user.Lookup(n)
		require.Error(t, err, "user %s of the lost computer is gone", n)
	}
	_, err = user.LookupGroup(u.Group)
	require.Error(t, err)
	require.NoFileExists(t, l2.claimFile(u.Index))
}

// The id range is refused where useradd could hand its ids to a host user.
func TestLocalUsersIDRange(t *testing.T) {
	defs := map[string]int{"UID_MIN": 1000, "UID_MAX": 60000, "SYS_UID_MIN": 101, "SYS_UID_MAX": 999}
	require.NoError(t, checkIDRange(DefaultLocalIDBase, defs))
	require.ErrorContains(t, checkIDRange(59000, defs), "UID_MIN..UID_MAX")
	require.ErrorContains(t, checkIDRange(61000, map[string]int{"UID_MAX": 65000}), "UID_MIN..UID_MAX")
	require.ErrorContains(t, checkIDRange(99000, defs), "SUB_UID_MIN..SUB_UID_MAX")
	require.Error(t, checkIDRange(500, defs))
	// An id a host user already has is never taken (60100 is the host's
	// shared desktop, made by scripts/provision.sh).
	if _, err := user.LookupId("60100"); err == nil {
		l := &Local{o: LocalOptions{IDBase: 60100}}
		require.False(t, l.usersFor(0).free())
	}
}

// TestLocalUsersCreateRemoveAtOnce: two workers' providers (each its own
// machines directory, the same id range) making and removing the same
// computer number's users at once: every create makes all its users or
// finds a name or id taken, and every remove removes what its create made.
func TestLocalUsersCreateRemoveAtOnce(t *testing.T) {
	requireHost(t)
	if _, err := exec.LookPath("useradd"); err != nil {
		unavailable(t, "useradd not on PATH (scripts/provision.sh)")
	}
	u := (&Local{o: LocalOptions{IDBase: DefaultLocalIDBase}}).usersFor(650) // no other test's
	require.True(t, u.free(), "%s's ids are free before the test", u.Desktop)
	defer func() { _ = u.remove() }()
	home := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	made := make([]int, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				err := u.create(home, fmt.Sprintf("c_atonce%d%d-00000000", w, i))
				if errors.Is(err, errIDTaken) {
					continue
				}
				if err != nil {
					errs <- err
					continue
				}
				made[w]++
				if !u.present() {
					errs <- fmt.Errorf("worker %d: made, then not present", w)
				}
				if err := u.remove(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("made %d and %d times", made[0], made[1])
	require.Positive(t, made[0]+made[1])
	require.True(t, u.free(), "all removed")
}

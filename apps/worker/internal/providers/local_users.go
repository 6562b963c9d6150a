package providers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every local computer runs as users of its own: a desktop user, a bot user
// and a group both share (botd's BOTD_DESKTOP_USER, BOTD_BOT_USER and
// BOTD_BOTS_GROUP), so one team's shell or terminal never runs as the uid
// that owns another team's workspace, profiles and X cookies. Computer
// number i holds the ids base+3i (desktop, its uid and its own group),
// base+3i+1 (bot, likewise) and base+3i+2 (the shared group).

const (
	// DefaultLocalIDBase is the first uid/gid of local computers' users;
	// they end before DefaultLocalIDBase+LocalIDSpan. Above useradd's
	// UID_MAX (60000 on Debian) and the host's desktop/bot (60100/60101),
	// below the subordinate ids (100000).
	DefaultLocalIDBase = 61000
	// LocalIDSpan is how many ids the local provider may use (666 computers).
	LocalIDSpan = 2000
)

// localUsers is one computer's users, kept in machine.json.
type localUsers struct {
	Index      int    `json:"index"`
	Desktop    string `json:"desktop"`
	DesktopUID int    `json:"desktopUid"`
	Bot        string `json:"bot"`
	BotUID     int    `json:"botUid"`
	Group      string `json:"group"`
	GID        int    `json:"gid"`
}

// usersFor is computer number i's users.
func (l *Local) usersFor(i int) localUsers {
	b := l.o.IDBase + 3*i
	n := "obc" + strconv.Itoa(i)
	return localUsers{Index: i, Desktop: n + "-desktop", DesktopUID: b, Bot: n + "-bot", BotUID: b + 1, Group: n + "-bots", GID: b + 2}
}

func (l *Local) maxUsers() int { return LocalIDSpan / 3 }

// comment is the GECOS field of ref's users: with the ref's random suffix,
// it tells this provider's users from any other's.
func userComment(ref string) string { return "open-bot local computer " + ref }

// owns says whether u's users are the ones made for ref (their comment).
func (u localUsers) owns(ref string) bool {
	for _, n := range []string{u.Desktop, u.Bot} {
		v, err := user.Lookup(n)
		if err != nil || v.Name != userComment(ref) {
			return false
		}
	}
	return true
}

// uids is every uid of u.
func (u localUsers) uids() []int { return []int{u.DesktopUID, u.BotUID} }

// gids is every gid of u.
func (u localUsers) gids() []int { return []int{u.DesktopUID, u.BotUID, u.GID} }

// checkIDRange refuses an id range that useradd or groupadd could hand to
// a host user or group (login.defs' UID_MIN..UID_MAX, SYS_UID_MIN..
// SYS_UID_MAX and the subordinate ids, likewise for gids).
func checkIDRange(base int, defs map[string]int) error {
	lo, hi := base, base+LocalIDSpan-1
	if lo < 1000 {
		return fmt.Errorf("local provider: user ids from %d: want 1000 or more", lo)
	}
	ranges := [][3]string{
		{"UID_MIN", "UID_MAX", "1000/60000"}, {"SYS_UID_MIN", "SYS_UID_MAX", "101/999"},
		{"GID_MIN", "GID_MAX", "1000/60000"}, {"SYS_GID_MIN", "SYS_GID_MAX", "101/999"},
		{"SUB_UID_MIN", "SUB_UID_MAX", "100000/600100000"}, {"SUB_GID_MIN", "SUB_GID_MAX", "100000/600100000"},
	}
	for _, r := range ranges {
		d := strings.Split(r[2], "/")
		a, _ := strconv.Atoi(d[0])
		b, _ := strconv.Atoi(d[1])
		if v, ok := defs[r[0]]; ok {
			a = v
		}
		if v, ok := defs[r[1]]; ok {
			b = v
		}
		if lo <= b && a <= hi {
			return fmt.Errorf("local provider: user ids %d-%d overlap %s..%s (%d-%d in /etc/login.defs), which useradd may give a host user; set another WORKER_LOCAL_ID_BASE", lo, hi, r[0], r[1], a, b)
		}
	}
	return nil
}

// loginDefs reads the numeric settings of /etc/login.defs (none when it is
// missing: the defaults above apply).
func loginDefs() map[string]int {
	out := map[string]int{}
	b, err := os.ReadFile("/etc/login.defs")
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if n, err := strconv.Atoi(f[1]); err == nil {
			out[f[0]] = n
		}
	}
	return out
}

// idTaken says whether a user or group already has the name or the id
// (the files useradd writes, and whatever else the name service knows).
func idTaken(db string, name string, id int) bool {
	b, _ := os.ReadFile(db)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) >= 3 && (f[0] == name || f[2] == strconv.Itoa(id)) {
			return true
		}
	}
	if db == "/etc/passwd" {
		_, e1 := user.Lookup(name)
		_, e2 := user.LookupId(strconv.Itoa(id))
		return e1 == nil || e2 == nil
	}
	_, e1 := user.LookupGroup(name)
	_, e2 := user.LookupGroupId(strconv.Itoa(id))
	return e1 == nil || e2 == nil
}

// free says whether none of u's names and ids is in use on the host.
func (u localUsers) free() bool {
	return !idTaken("/etc/group", u.Group, u.GID) &&
		!idTaken("/etc/group", u.Desktop, u.DesktopUID) && !idTaken("/etc/group", u.Bot, u.BotUID) &&
		!idTaken("/etc/passwd", u.Desktop, u.DesktopUID) && !idTaken("/etc/passwd", u.Bot, u.BotUID)
}

// present says whether u's users exist on the host with exactly u's ids
// and groups (a restarted worker re-adopts them).
func (u localUsers) present() bool {
	for _, x := range []struct {
		name     string
		uid, gid int
	}{{u.Desktop, u.DesktopUID, u.DesktopUID}, {u.Bot, u.BotUID, u.BotUID}} {
		v, err := user.Lookup(x.name)
		if err != nil || v.Uid != strconv.Itoa(x.uid) || v.Gid != strconv.Itoa(x.gid) {
			return false
		}
		gids, err := v.GroupIds()
		if err != nil || !contains(gids, strconv.Itoa(u.GID)) {
			return false
		}
	}
	g, err := user.LookupGroup(u.Group)
	return err == nil && g.Gid == strconv.Itoa(u.GID)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// errIDTaken: another process took one of the names or ids meanwhile.
var errIDTaken = errors.New("a name or id is taken")

// runTool runs one of the shadow tools (argv, never a shell); exit 4 (id in
// use) and 9 (name in use) are errIDTaken.
func runTool(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && (ee.ExitCode() == 4 || ee.ExitCode() == 9) {
		return fmt.Errorf("%s: %w: %s", argv[0], errIDTaken, strings.TrimSpace(string(out)))
	}
	return fmt.Errorf("%s: %v: %s", argv[0], err, strings.TrimSpace(string(out)))
}

// create makes u's groups and users: system accounts (no subordinate ids,
// no mail spool, no lastlog entry), no home made (botd makes and owns
// BOTD_HOME/desktop and BOTD_HOME/bot), bash as the shell a terminal on
// the screen starts. When a step fails, what this call made is removed
// again (never a user or group someone else made meanwhile).
func (u localUsers) create(home, ref string) (err error) {
	unlock, err := lockUsers()
	if err != nil {
		return err
	}
	defer unlock()
	// Free when the caller looked may be taken now: looked again under the
	// host's lock, with nothing made yet.
	if !u.free() {
		return fmt.Errorf("local provider: %w: %s, %s or %s", errIDTaken, u.Desktop, u.Bot, u.Group)
	}
	var users, groups []string
	defer func() {
		if err == nil {
			return
		}
		for _, n := range users {
			_ = runGone("userdel", n)
		}
		for _, n := range groups {
			_ = runGone("groupdel", n)
		}
	}()
	for _, g := range []struct {
		name string
		gid  int
	}{{u.Group, u.GID}, {u.Desktop, u.DesktopUID}, {u.Bot, u.BotUID}} {
		if err := runTool("groupadd", "-g", strconv.Itoa(g.gid), g.name); err != nil {
			return err
		}
		groups = append(groups, g.name)
	}
	for _, x := range []struct {
		name, home string
		uid        int
	}{{u.Desktop, filepath.Join(home, "desktop"), u.DesktopUID}, {u.Bot, filepath.Join(home, "bot"), u.BotUID}} {
		if err := runTool("useradd", "-r", "-M", "-l", "-N",
			"-u", strconv.Itoa(x.uid), "-g", strconv.Itoa(x.uid), "-G", strconv.Itoa(u.GID),
			"-d", x.home, "-s", "/bin/bash", "-c", userComment(ref), x.name); err != nil {
			return err
		}
		users = append(users, x.name)
	}
	return nil
}

// remove deletes u's users and groups; ones already gone are fine. Their
// processes must have ended (userdel refuses otherwise).
func (u localUsers) remove() error {
	unlock, err := lockUsers()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, n := range []string{u.Desktop, u.Bot} {
		if err := runGone("userdel", n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range []string{u.Desktop, u.Bot, u.Group} {
		if err := runGone("groupdel", n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// usersLock is the host's one lock on local computers' users: every
// worker on the host (each with its own machines directory, all drawing
// ids from the same range) makes and removes them under it, so one's
// check that ids are free and its useradd are never split by another's
// groupadd or groupdel of the same names (seen: two tests' workers, the
// same second, "useradd: group '61005' does not exist"). In /run, which
// only root writes; opened without following a symlink.
const usersLock = "/run/open-bot-local-users.lock"

// lockUsers takes usersLock; unlock gives it back. Never nested: create
// and remove each take it once and call neither each other nor it again.
func lockUsers() (unlock func(), err error) {
	fd, err := unix.Open(usersLock, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("local provider: open %s: %w", usersLock, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("local provider: lock %s: %w", usersLock, err)
	}
	return func() { unix.Close(fd) }, nil
}

// runGone runs userdel or groupdel; exit 6 (no such user or group) is fine.
func runGone(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	var ee *exec.ExitError
	if err == nil || errors.As(err, &ee) && ee.ExitCode() == 6 {
		return nil
	}
	return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
}

// killAll ends every process that runs as one of uids (what a bot or a
// terminal left behind after botd stopped: a daemon, a setsid'd job).
func killAll(uids []int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := procsOf(uids)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procsOf lists the live processes whose real, effective, saved or
// filesystem uid is one of uids.
func procsOf(uids []int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !procAlive(pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "Uid:") {
				continue
			}
			for _, f := range strings.Fields(line)[1:] {
				if n, err := strconv.Atoi(f); err == nil && containsInt(uids, n) {
					out = append(out, pid)
					break
				}
			}
			break
		}
	}
	return out
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// sharedDirs are the host's world-writable places a computer's users can
// leave files in (and botd's root of screen runtime directories); what
// they own there is removed with them, so a later computer given the same
// ids inherits nothing.
var sharedDirs = []string{"/tmp", "/var/tmp", "/dev/shm", "/run/botd-screens", "/var/mail"}

// removeOwned removes what uids or gids own at the top of sharedDirs and
// one level into their sticky world-writable directories (/tmp/.X11-unix,
// /tmp/.ICE-unix). Nothing is followed: RemoveAll unlinks a link itself.
// Run when none of uids has a process left.
func removeOwned(uids, gids []int) error {
	var errs []error
	var scan func(dir string, depth int)
	scan = func(dir string, depth int) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			fi, err := os.Lstat(p)
			if err != nil {
				continue
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				continue
			}
			if containsInt(uids, int(st.Uid)) || containsInt(gids, int(st.Gid)) && st.Uid != 0 {
				if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
				continue
			}
			if depth == 0 && fi.IsDir() && st.Uid == 0 && fi.Mode()&fs.ModeSticky != 0 && fi.Mode().Perm()&0o002 != 0 {
				scan(p, depth+1)
			}
		}
	}
	for _, d := range sharedDirs {
		scan(d, 0)
	}
	return errors.Join(errs...)
}

// chownTree hands what the host's shared desktop and bot (and bots) own
// under dir to u's users: a computer made before each had its own. Links
// are changed themselves, never followed.
func chownTree(dir string, u localUsers) error {
	uidMap, gidMap := map[int]int{}, map[int]int{}
	for _, x := range []struct {
		name string
		to   int
	}{{"desktop", u.DesktopUID}, {"bot", u.BotUID}} {
		if v, err := user.Lookup(x.name); err == nil {
			if n, err := strconv.Atoi(v.Uid); err == nil {
				uidMap[n] = x.to
			}
			if n, err := strconv.Atoi(v.Gid); err == nil {
				gidMap[n] = x.to
			}
		}
	}
	gidMap[1100] = u.GID
	if g, err := user.LookupGroup("bots"); err == nil {
		if n, err := strconv.Atoi(g.Gid); err == nil {
			gidMap[n] = u.GID
		}
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		uid, gid := int(st.Uid), int(st.Gid)
		nu, okU := uidMap[uid]
		ng, okG := gidMap[gid]
		if !okU && !okG {
			return nil
		}
		if !okU {
			nu = uid
		}
		if !okG {
			ng = gid
		}
		if err := os.Lchown(p, nu, ng); err != nil {
			return err
		}
		return nil
	})
}

// A claim (computers/.users/<index>, root's 0600) records, apart from the
// computer's own directory, which users this provider made for which ref:
// users whose computer directory was lost with its machine.json are still
// found and removed (reclaimLocked).
type userClaim struct {
	Ref   string     `json:"ref"`
	Users localUsers `json:"users"`
}

func (l *Local) claims() string { return filepath.Join(l.computers(), ".users") }
func (l *Local) claimFile(i int) string {
	return filepath.Join(l.claims(), strconv.Itoa(i))
}

func (l *Local) writeClaimLocked(ref string, u localUsers) error {
	if err := os.Mkdir(l.claims(), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	b, _ := json.Marshal(userClaim{Ref: ref, Users: u})
	return writeSecret(l.claimFile(u.Index), string(b))
}

// reclaimLocked removes the users of every claim whose computer no longer
// names them (its directory or machine.json lost), and the claim; users
// someone else made meanwhile under those names are left alone.
func (l *Local) reclaimLocked() {
	ents, err := os.ReadDir(l.claims())
	if err != nil {
		return
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(l.claims(), e.Name()))
		if err != nil {
			continue
		}
		var c userClaim
		if json.Unmarshal(b, &c) != nil || strconv.Itoa(c.Users.Index) != e.Name() || checkRef(c.Ref) != nil {
			continue
		}
		if m, err := l.readMeta(c.Ref); err == nil && m.Users != nil && m.Users.Index == c.Users.Index {
			continue
		} else if err != nil && !errors.Is(err, ErrGone) {
			continue
		}
		if c.Users.owns(c.Ref) {
			killAll(c.Users.uids())
			if err := errors.Join(removeOwned(c.Users.uids(), c.Users.gids()), c.Users.remove()); err != nil {
				l.log.Warn().Err(err).Str("ref", c.Ref).Msg("remove the users of a lost computer")
				continue
			}
			l.log.Info().Str("ref", c.Ref).Str("desktop", c.Users.Desktop).Msg("removed the users of a lost computer")
		}
		_ = os.Remove(filepath.Join(l.claims(), e.Name()))
	}
}

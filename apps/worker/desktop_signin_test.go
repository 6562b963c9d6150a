package main

// Sign-ins travel on the vendors' stock desktops (issue 30, requirement
// 3): each screen's Chromium runs on its own profile under the portable
// workspace (.browser-profiles/<screen>), an export closes it cleanly and
// starts it again on its tabs, and a replacement's browser comes back
// signed in and on the same tab. Driven through the worker's direct tool
// API (POST /v1/computers/{id}/tools/{name}); the sign-in is a cookie set
// by a loopback site in the sandbox (mockserve's button page, no model
// used); the sandbox is lost behind the worker's back through the vendor
// emulator's own API.

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/pkg/shared/client"
)

// signinPageURL is the button page on the sandbox's loopback.
const signinPageURL = "http://127.0.0.1:18081/"

// signinSite is mockserve's button page run inside each sandbox the test
// uses (its scripted model idles: no key of the worker's), with one
// sign-in cookie value across them; its record is read with `docker exec`.
type signinSite struct {
	t         *testing.T
	dir       string // mockserve and a key of its own
	cookie    string
	container string
}

func newSigninSite(t *testing.T, dir string) *signinSite {
	t.Helper()
	ms := filepath.Join(dir, "signin-site")
	require.NoError(t, os.Mkdir(ms, 0o755))
	build := exec.Command("go", "build", "-o", filepath.Join(ms, "mockserve"), "github.com/open-bot/computer/apps/worker/internal/mockmodel/mockserve")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build mockserve: %s", out)
	var k, c [16]byte
	_, _ = rand.Read(k[:])
	_, _ = rand.Read(c[:])
	require.NoError(t, os.WriteFile(filepath.Join(ms, "key"), []byte(hex.EncodeToString(k[:])), 0o600))
	return &signinSite{t: t, dir: ms, cookie: hex.EncodeToString(c[:])}
}

// start runs the site in container, with an empty record.
func (s *signinSite) start(container string) {
	t := s.t
	t.Helper()
	s.container = container
	out, err := exec.Command("docker", "cp", s.dir+"/.", container+":/opt/signin-site/").CombinedOutput()
	require.NoError(t, err, "docker cp: %s", out)
	out, err = exec.Command("docker", "exec", "-d", container, "/opt/signin-site/mockserve", "-key-file", "/opt/signin-site/key",
		"-cookie", s.cookie, "-state", "/tmp/signin-site").CombinedOutput()
	require.NoError(t, err, "docker exec mockserve: %s", out)
	waitFor(t, "the sign-in site in the sandbox", 30*time.Second, func() bool {
		return exec.Command("docker", "exec", container, "test", "-d", "/tmp/signin-site").Run() == nil
	})
}

// seen is every sign-in cookie value the page was sent, "none" for a
// visit without one.
func (s *signinSite) seen() []string {
	out, _ := exec.Command("docker", "exec", s.container, "cat", "/tmp/signin-site/seen").Output()
	return strings.Fields(string(out))
}

// signedIn: a visit carried the cookie the page set.
func (s *signinSite) signedIn() bool { return slices.Contains(s.seen(), s.cookie) }

// displayOf is screen bot's display on d's machine ("" when it has none).
func displayOf(t *testing.T, m machines.Machine, bot string) string {
	t.Helper()
	scs, err := m.Screens(t.Context())
	require.NoError(t, err)
	for _, s := range scs {
		if s.ID == bot {
			return s.Display
		}
	}
	return ""
}

// browserOn is what display shows of Chromium, through the machine's own
// shell (the sandbox's user): the visible windows' names and the profiles
// (--user-data-dir) of the browser main processes on that display.
func browserOn(t *testing.T, m machines.Machine, display string) (windows, profiles []string) {
	t.Helper()
	script := `for w in $(xdotool search --onlyvisible --class chromium 2>/dev/null); do echo "window $(xdotool getwindowname "$w")"; done
for f in $(grep -lz -- '^--user-data-dir=' /proc/[0-9]*/cmdline 2>/dev/null); do
  grep -qz -- '^--type=' "$f" && continue
  grep -qzx "DISPLAY=$DISPLAY" "${f%/cmdline}/environ" 2>/dev/null || continue
  echo "profile $(grep -z -- '^--user-data-dir=' "$f" | tr -d '\0' | sed 's/^--user-data-dir=//')"
done`
	r, err := m.Exec(t.Context(), client.ExecRequest{Argv: []string{"sh", "-c", script}, Env: map[string]string{"DISPLAY": display}})
	require.NoError(t, err)
	if r.ExitCode != 0 || r.TimedOut {
		t.Logf("the browser probe on %s: exit %d, timed out %v: %s", display, r.ExitCode, r.TimedOut, r.Stderr)
	}
	for _, l := range strings.Split(r.Stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "window "); ok {
			windows = append(windows, v)
		}
		if v, ok := strings.CutPrefix(l, "profile "); ok {
			profiles = append(profiles, v)
		}
	}
	return windows, profiles
}

// screenCall is toolCall, tried again (at most twice more) while the
// screen did not start in time: on a loaded host a display's first start
// can outlast the machine's start timeout; what is checked here is what
// runs on the display once it is up.
func screenCall(t *testing.T, e *workerEnv, bot, name string, args map[string]any) (int, string) {
	t.Helper()
	for i := 0; ; i++ {
		status, text := toolCall(t, e, bot, name, args)
		if i == 2 || status != http.StatusServiceUnavailable || !strings.Contains(text, "did not start") {
			return status, text
		}
		t.Logf("%s for %s: %s; again", name, bot, text)
	}
}

func anyContains(list []string, sub string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, sub) })
}

// signinTravels is the check on a desktop computer made on e with body:
// alice signs in on the loopback site (the page sets its cookie); bob
// opens another page on his own screen (twoScreens), which never shows on
// alice's display and runs on bob's own profile, or is refused with
// MULTI_SCREEN_UNAVAILABLE on a single-screen sandbox; an explicit
// checkpoint closes alice's browser and starts it again on the same tab;
// then the sandbox is lost behind the worker's back (lose), recover makes
// a replacement with the checkpoint imported, and alice's screen there
// shows her browser on the same tab, signed in: the page is visited with
// the cookie it set on the first sandbox.
func signinTravels(t *testing.T, e *workerEnv, dir string, body map[string]any, twoScreens bool, containerOf func(ref string) string, lose func(ref string)) {
	t.Helper()
	ctx := t.Context()
	status, cc, d := createComputer(t, e, body)
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	if cc.Computer.State != "running" && strings.Contains(cc.Computer.LastError, "deadline exceeded") {
		// A loaded host: the sandbox's display did not come up in time.
		// recover from the error makes another one.
		t.Logf("create: %s; recover", cc.Computer.LastError)
		var rec struct {
			Computer computers.View `json:"computer"`
		}
		require.Equal(t, http.StatusOK, d.do(t, "POST", "/recover", nil, &rec))
		cc.Computer.State, cc.Computer.LastError = rec.Computer.State, rec.Computer.LastError
	}
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	for _, bot := range []string{"alice", "bob"} {
		require.Equal(t, http.StatusCreated, d.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	}
	c, err := e.w.Store.GetComputer(ctx, d.computer)
	require.NoError(t, err)
	site := newSigninSite(t, dir)
	site.start(containerOf(c.ProviderRef))

	// alice signs in: her first visit has no cookie, and gets one.
	status, text := screenCall(t, d, "alice", "open_path", map[string]any{"target": signinPageURL})
	require.Equal(t, http.StatusOK, status, text)
	waitFor(t, "alice's first visit", 60*time.Second, func() bool { return slices.Contains(site.seen(), "none") })
	m, err := e.w.Computers.Machine(ctx, d.computer)
	require.NoError(t, err)
	displayA := displayOf(t, m, "alice")
	require.NotEmpty(t, displayA)
	profA := ".browser-profiles/alice"
	waitFor(t, "alice's page on her display", 60*time.Second, func() bool {
		w, p := browserOn(t, m, displayA)
		return anyContains(w, "e2e button") && len(p) == 1 && strings.HasSuffix(p[0], "/"+profA)
	})

	// bob's page is his screen's alone.
	const bobURL = "http://127.0.0.1:18081/bob-only"
	status, text = screenCall(t, d, "bob", "open_path", map[string]any{"target": bobURL})
	if twoScreens {
		require.Equal(t, http.StatusOK, status, text)
		displayB := displayOf(t, m, "bob")
		require.NotEmpty(t, displayB)
		require.NotEqual(t, displayA, displayB)
		waitFor(t, "bob's page on his display", 60*time.Second, func() bool {
			w, p := browserOn(t, m, displayB)
			return anyContains(w, "bob-only") && len(p) == 1 && strings.HasSuffix(p[0], "/.browser-profiles/bob")
		})
	} else {
		require.Equal(t, http.StatusServiceUnavailable, status, text)
		require.Contains(t, text, "single screen")
	}
	w, p := browserOn(t, m, displayA)
	if len(p) != 1 {
		r, _ := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "ps -eo pid,etime,args | grep -e chromium -e Xvfb | grep -v -e --type= -e grep | cut -c1-300; free -m; df -h /dev/shm"}})
		t.Logf("alice's display %s: windows %v, profiles %v; the sandbox:\n%s", displayA, w, p, r.Stdout)
	}
	require.False(t, anyContains(w, "bob-only"), "bob's page shows on alice's display: %v", w)
	require.Len(t, p, 1, "one browser on alice's display: %v", p)
	require.True(t, strings.HasSuffix(p[0], "/"+profA), "alice's display runs alice's profile: %v", p)

	// The checkpoint closes alice's browser for the copy and starts it
	// again on her tab.
	pidOf := func() string {
		r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c",
			`for f in $(grep -lzx -- "--user-data-d[i]r=.*/$1" /proc/[0-9]*/cmdline 2>/dev/null); do grep -qz -- '^--type=' "$f" || { p="${f#/proc/}"; echo "${p%/cmdline}"; }; done`,
			"sh", profA}})
		require.NoError(t, err)
		return strings.TrimSpace(r.Stdout)
	}
	before := pidOf()
	require.NotEmpty(t, before)
	start := time.Now()
	cp := checkpointOnceMore(t, d)
	require.Positive(t, cp.Size)
	t.Logf("checkpoint: %d bytes in %v", cp.Size, time.Since(start))
	var now string
	var wins, profs []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		now = pidOf()
		wins, profs = browserOn(t, m, displayA)
		// The same tab: the page's title, or its host while it (re)loads.
		if now != "" && now != before && (anyContains(wins, "e2e button") || anyContains(wins, "127.0.0.1:18081")) {
			break
		}
		if time.Now().After(deadline) {
			r, _ := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "ps -eo pid,etime,args | grep -e chromium -e Xvfb | grep -v -e --type= -e grep | cut -c1-200; ls -l .browser-profiles/alice/Singleton*; head ${TMPDIR:-/tmp}/open-bot-desktop/browsers/*"}})
			t.Fatalf("alice's browser was not started again on her tab: pid %q (before %q), windows %v, profiles %v; the sandbox:\n%s", now, before, wins, profs, r.Stdout)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("alice's browser back on her tab %v after the checkpoint began", time.Since(start))
	_, cookies, ok := checkpointFile(t, d, profA+"/Default/Cookies")
	require.True(t, ok, "the checkpoint holds alice's cookie store")
	require.Equal(t, 1, cookieRows(t, cookies, "signin"), "the checkpoint's cookie store holds the page's sign-in cookie (the browser wrote it before it exited)")
	_, _, ok = checkpointFile(t, d, profA+"/SingletonLock")
	require.False(t, ok, "the checkpoint leaves out the browser's lock")

	// The sandbox is lost; the replacement's alice is signed in, on her tab.
	lose(c.ProviderRef)
	var rec struct {
		Computer computers.View `json:"computer"`
	}
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/recover", nil, &rec))
	if rec.Computer.State != "running" && strings.Contains(rec.Computer.LastError, "deadline exceeded") {
		// A loaded host: the replacement's display did not come up in
		// time. recover from the error makes another one.
		t.Logf("recover: %s; again", rec.Computer.LastError)
		require.Equal(t, http.StatusOK, d.do(t, "POST", "/recover", nil, &rec))
	}
	require.Equal(t, "running", rec.Computer.State, rec.Computer.LastError)
	after, err := e.w.Store.GetComputer(ctx, d.computer)
	require.NoError(t, err)
	require.NotEqual(t, c.ProviderRef, after.ProviderRef)
	site.start(containerOf(after.ProviderRef))
	require.Empty(t, site.seen(), "a fresh record on the replacement")
	status, text = screenCall(t, d, "alice", "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, status, text)
	m, err = e.w.Computers.Machine(ctx, d.computer)
	require.NoError(t, err)
	displayA = displayOf(t, m, "alice")
	require.NotEmpty(t, displayA)
	waitFor(t, "the replacement's browser visits alice's tab signed in", 90*time.Second, site.signedIn)
	require.NotContains(t, site.seen(), "none", "the replacement's browser visited the page without the sign-in")
	waitFor(t, "alice's tab on her display on the replacement", 60*time.Second, func() bool {
		w, p := browserOn(t, m, displayA)
		return anyContains(w, "e2e button") && len(p) == 1 && strings.HasSuffix(p[0], "/"+profA)
	})
	w, _ = browserOn(t, m, displayA)
	require.False(t, anyContains(w, "bob-only"), "bob's page shows on alice's display on the replacement: %v", w)
}

// TestSigninTravelsE2BDesktop: signinTravels on E2B's desktop template
// (the emulator's stand-in), the sandbox killed through the emulator.
func TestSigninTravelsE2BDesktop(t *testing.T) {
	emu := bothTemplates(t)
	dir := openDir(t, "wire-e2bsign-")
	e := templateWorker(t, e2bEnv(emu, nil), filepath.Join(dir, "machines"))
	signinTravels(t, e, dir, map[string]any{"scope": map[string]string{"team": "t1"}, "template": e2b.DesktopTemplate}, true,
		func(ref string) string { return sandboxOf(t, ref) }, func(ref string) { killSandbox(t, emu, ref) })
}

// TestSigninTravelsDaytonaDesktop: signinTravels on Daytona's desktop
// snapshot (the emulator's stand-in), the sandbox deleted through the
// emulator.
func TestSigninTravelsDaytonaDesktop(t *testing.T) {
	emu := bothSnapshots(t)
	dir := openDir(t, "wire-dtsign-")
	e := templateWorker(t, daytonaEnv(emu, nil), filepath.Join(dir, "machines"))
	signinTravels(t, e, dir, map[string]any{"scope": map[string]string{"team": "t1"}, "template": daytona.DesktopSnapshot}, true,
		func(ref string) string { return daytonaContainer(t, ref) }, func(ref string) { loseDaytona(t, emu, ref) })
}

// TestSigninTravelsBox: signinTravels on a Box (one screen: bob's open is
// refused, never shown on alice's display), the box deleted through the
// emulator.
func TestSigninTravelsBox(t *testing.T) {
	emu := boxEmulator(t)
	dir := openDir(t, "wire-boxsign-")
	e := templateWorker(t, boxEnv(emu, nil), filepath.Join(dir, "machines"))
	signinTravels(t, e, dir, map[string]any{"scope": map[string]string{"team": "t1"}}, false,
		func(ref string) string { return boxContainer(t, emu, ref) }, func(ref string) { deleteBox(t, emu, ref) })
}

// cookieRows counts the cookies named name in db, a Chromium cookie store
// (SQLite), read with the worker's own SQLite driver.
func cookieRows(t *testing.T, db, name string) int {
	t.Helper()
	f := filepath.Join(t.TempDir(), "Cookies")
	require.NoError(t, os.WriteFile(f, []byte(db), 0o600))
	sq, err := sql.Open("sqlite", "file:"+f+"?mode=ro")
	require.NoError(t, err)
	defer sq.Close()
	var n int
	require.NoError(t, sq.QueryRow(`SELECT count(*) FROM cookies WHERE name = ?`, name).Scan(&n))
	return n
}

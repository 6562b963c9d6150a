package screen

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/jpeg"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Integration tests use displays :120+ and ports 25900+/26080+ so packages
// testing in parallel never collide.
const (
	itDisplayBase  = 120
	itViewPortBase = 26080
)

var desktopTools = []string{"Xvfb", "xfwm4", "xfce4-panel", "xfdesktop", "dbus-daemon", "x11vnc", "xdpyinfo", "scrot", "mousepad"}

// itExtraEnv lets SCREEN_TEST_XDG_CONFIG_DIRS point XFCE at other defaults
// (e.g. the repo's rootfs/etc/xdg before provisioning copied it).
func itExtraEnv() []string {
	if v := os.Getenv("SCREEN_TEST_XDG_CONFIG_DIRS"); v != "" {
		return []string{"XDG_CONFIG_DIRS=" + v}
	}
	return nil
}

type itEnv struct {
	m       *Manager
	home    string
	desktop osuser.User
	bot     osuser.User
}

func newIT(t testing.TB, max int, base int) *itEnv {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, desktopTools...)
	testenv.RequireUsers(t)
	home, err := os.MkdirTemp("", "screen-it-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	d, err := osuser.Lookup("desktop")
	require.NoError(t, err)
	b, err := osuser.Lookup("bot")
	require.NoError(t, err)
	require.NoError(t, osuser.PrepareDirs(osuser.Layout(home, d, b)))
	log := zerolog.Nop()
	if os.Getenv("SCREEN_TEST_LOG") != "" {
		zerolog.TimeFieldFormat = time.RFC3339Nano
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: true}).With().Timestamp().Logger()
	}
	m := New(Options{Home: home, DisplayBase: base,
		ViewPortBase: itViewPortBase + 2*(base-itDisplayBase), MaxScreens: max, Desktop: d, Log: log,
		ExtraEnv: itExtraEnv()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	return &itEnv{m: m, home: home, desktop: d, bot: b}
}

func (e *itEnv) procs(t testing.TB, id string) *procStack {
	t.Helper()
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	s := e.m.screens[id]
	require.NotNil(t, s)
	ps, ok := s.stack.(*procStack)
	require.True(t, ok, "screen %s has no running stack", id)
	return ps
}

// runAs runs argv as u and returns its exit code and output.
func runAs(t testing.TB, u osuser.User, env []string, argv ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	p, err := runner.Exec{}.Start(runner.Spec{Argv: argv, User: &u, Env: env, Stdout: &out, Stderr: &out, Dir: "/"})
	require.NoError(t, err)
	code, err := p.Wait()
	require.NoError(t, err)
	return code, out.String()
}

func cookieOf(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	// One entry: family(2) addr(2+0) num(2+0) name(2+18) data(2+16).
	require.Len(t, b, 2+2+2+2+len(cookieName)+2+16)
	require.Equal(t, []byte{0xff, 0xff}, b[:2], "family Wild")
	return b[len(b)-16:]
}

func TestIntegrationScreenLifecycle(t *testing.T) {
	e := newIT(t, 2, itDisplayBase)
	ctx := testenv.Context(t, 2*time.Minute)

	// Concurrent Ensure: one start, one Xvfb.
	var wg sync.WaitGroup
	got := make([]*Screen, 5)
	start := time.Now()
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.m.Ensure(ctx, "it-a")
			require.NoError(t, err)
			got[i] = s
		}()
	}
	wg.Wait()
	t.Logf("cold start: %v", time.Since(start))
	for _, s := range got {
		require.Same(t, got[0], s)
	}
	in, _ := e.m.Info("it-a")
	require.Equal(t, shared.StateRunning, in.State)
	require.Equal(t, 0, *in.Slot)
	require.Equal(t, ":120", in.Display)
	require.Equal(t, Ports{View: 26080, Control: 26081}, *in.Ports)
	require.Len(t, xvfbPids(t, 120), 1, "exactly one X server for concurrent starts")

	// The cookie file: desktop, 0600, one Wild entry, and X accepts it.
	xa := e.m.xauthPath(0)
	require.Equal(t, filepath.Join(e.home, "desktop", ".Xauthority-0"), xa)
	st, err := os.Stat(xa)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.EqualValues(t, e.desktop.UID, st.Sys().(*syscall.Stat_t).Uid)
	cookie1 := cookieOf(t, xa)
	x, err := dialX(ctx, 120, int(e.desktop.UID), cookie1)
	require.NoError(t, err)
	ok, err := x.wmRunning()
	x.Close()
	require.NoError(t, err)
	require.True(t, ok, "the window manager is up once running")
	_, err = dialX(ctx, 120, int(e.desktop.UID), make([]byte, 16))
	require.ErrorIs(t, err, errXAuth, "a wrong cookie is refused")
	// Every process of the stack runs as desktop.
	ps := e.procs(t, "it-a")
	for _, p := range append(ps.session, ps.xvfb) {
		require.EqualValues(t, e.desktop.UID, uidOf(t, p.Pid()), p.Name())
	}
	// The profile dir exists, desktop-owned.
	st, err = os.Stat(e.m.ProfileDir("it-a"))
	require.NoError(t, err)
	require.EqualValues(t, e.desktop.UID, st.Sys().(*syscall.Stat_t).Uid)

	// A second screen takes slot 1.
	_, err = e.m.Ensure(ctx, "it-b")
	require.NoError(t, err)
	in, _ = e.m.Info("it-b")
	require.Equal(t, 1, *in.Slot)

	// MAX_SCREENS=2: a third evicts the least recently used (it-a). The
	// pause only keeps it-b's use time apart from it-a's (a longer one
	// under load changes nothing).
	time.Sleep(10 * time.Millisecond)
	_, err = e.m.Ensure(ctx, "it-b") // it-b is the more recently used
	require.NoError(t, err)
	_, err = e.m.Ensure(ctx, "it-c")
	require.NoError(t, err)
	in, _ = e.m.Info("it-a")
	require.Equal(t, shared.StateStopped, in.State)
	in, _ = e.m.Info("it-c")
	require.Equal(t, 0, *in.Slot, "the freed slot is reused")
	require.NotEqual(t, cookie1, cookieOf(t, xa), "a new cookie at every start")
	require.Len(t, xvfbPids(t, 120), 1, "the evicted screen's X server is gone")

	// Both running screens held: the next start fails, nothing stops.
	_, err = e.m.Leases().Acquire("it-b", lease.Agent, "run-b", time.Minute)
	require.NoError(t, err)
	_, err = e.m.Leases().Acquire("it-c", lease.User, "ann", time.Minute)
	require.NoError(t, err)
	_, err = e.m.Ensure(ctx, "it-a")
	require.Equal(t, shared.CodeMultiScreen, codeOf(err))
	require.Equal(t, shared.StateRunning, mustInfo(e.m, "it-b").State)
	require.Equal(t, shared.StateRunning, mustInfo(e.m, "it-c").State)

	// Stop leaves nothing drawing.
	pids := []int{e.procs(t, "it-b").xvfb.Pid()}
	for _, p := range e.procs(t, "it-b").session {
		pids = append(pids, p.Pid())
	}
	require.NoError(t, e.m.Stop(ctx, "it-b"))
	for _, pid := range pids {
		require.False(t, testenv.Alive(pid), "pid %d outlived its screen", pid)
	}
	require.NoFileExists(t, e.m.xauthPath(1))
}

func mustInfo(m *Manager, id string) Info { in, _ := m.Info(id); return in }

func uidOf(t testing.TB, pid int) uint32 {
	t.Helper()
	st, err := os.Stat("/proc/" + strconv.Itoa(pid))
	require.NoError(t, err)
	return st.Sys().(*syscall.Stat_t).Uid
}

// xvfbPids lists live Xvfb processes serving display n.
func xvfbPids(t testing.TB, n int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "Xvfb" && args[1] == ":"+strconv.Itoa(n) && testenv.Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func TestIntegrationCrashRestarts(t *testing.T) {
	e := newIT(t, 2, itDisplayBase+4)
	ctx := testenv.Context(t, 2*time.Minute)
	l, err := e.m.Leases().Acquire("it-crash", lease.Agent, "run", time.Minute)
	require.NoError(t, err)
	_, err = e.m.Register("it-crash")
	require.NoError(t, err)
	obs := observeIT(t, e, ctx, "it-crash", l.ID)
	require.NotEmpty(t, obs.Image)
	old := e.procs(t, "it-crash").xvfb.Pid()
	cookie := cookieOf(t, e.m.xauthPath(0))
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))

	// The next action either finds the display gone (a clear 503) or, if
	// the watcher was first, restarts the screen; botd lives on.
	deadline := time.Now().Add(10 * time.Second)
	for mustInfo(e.m, "it-crash").State != shared.StateCrashed {
		require.True(t, time.Now().Before(deadline), "not marked crashed: %+v", mustInfo(e.m, "it-crash"))
		time.Sleep(10 * time.Millisecond)
	}
	obs = observeIT(t, e, ctx, "it-crash", l.ID)
	require.NotEmpty(t, obs.Image)
	require.NotEqual(t, old, e.procs(t, "it-crash").xvfb.Pid())
	require.NotEqual(t, cookie, cookieOf(t, e.m.xauthPath(0)))
}

func TestIntegrationDisplayGoneMidAction(t *testing.T) {
	e := newIT(t, 2, itDisplayBase+6)
	ctx := testenv.Context(t, 2*time.Minute)
	_, err := e.m.Register("it-gone")
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire("it-gone", lease.Agent, "run", time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, observeIT(t, e, ctx, "it-gone", l.ID).Image)
	pid := e.procs(t, "it-gone").xvfb.Pid()
	errc := make(chan error, 1)
	go func() {
		_, err := actIT(e, ctx, "it-gone", l.ID, shared.Action{Type: shared.ActionType, Text: strp(strings.Repeat("x", 3000))})
		errc <- err
	}()
	waitInFlight(t, e, "it-gone") // the display dies mid-action, not before it
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	err = <-errc
	require.Error(t, err)
	require.Contains(t, []shared.Code{shared.CodeScreenUnavailable}, codeOf(err), "%v", err)
	// Next use restarts it.
	require.NotEmpty(t, observeIT(t, e, ctx, "it-gone", l.ID).Image)
}

func observeIT(t testing.TB, e *itEnv, ctx context.Context, id, leaseID string) *Observation {
	t.Helper()
	var obs *Observation
	require.NoError(t, e.m.WithLease(ctx, id, leaseID, func(ctx context.Context, s *Screen) error {
		var err error
		obs, err = s.Observe(ctx)
		return err
	}))
	return obs
}

func actIT(e *itEnv, ctx context.Context, id, leaseID string, actions ...shared.Action) (*ActResult, error) {
	var res *ActResult
	err := e.m.WithLease(ctx, id, leaseID, func(ctx context.Context, s *Screen) error {
		var err error
		res, err = s.Act(ctx, actions)
		return err
	})
	return res, err
}

func TestIntegrationPreemption(t *testing.T) {
	e := newIT(t, 2, itDisplayBase+8)
	ctx := testenv.Context(t, 2*time.Minute)
	_, err := e.m.Register("it-pre")
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire("it-pre", lease.Agent, "run", time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, observeIT(t, e, ctx, "it-pre", l.ID).Image)

	// An editor to type into.
	require.NoError(t, e.m.WithLease(ctx, "it-pre", l.ID, func(ctx context.Context, s *Screen) error {
		lf, err := e.m.launcher("editor")
		if err != nil {
			return err
		}
		_, err = lf(ctx, s)
		return err
	}))
	// The panel and the desktop are two managed windows; the editor's is a third.
	waitClients(t, ctx, e, itDisplayBase+8, "it-pre", 3)

	for _, a := range []shared.Action{
		{Type: shared.ActionWait, Ms: intp(8000)},
		{Type: shared.ActionType, Text: strp(strings.Repeat("preempt me ", 900))},
	} {
		t.Run(a.Type, func(t *testing.T) {
			l, err := e.m.Leases().Acquire("it-pre", lease.Agent, "run", time.Minute)
			require.NoError(t, err)
			errc := make(chan error, 1)
			go func() {
				_, err := actIT(e, ctx, "it-pre", l.ID, a)
				errc <- err
			}()
			// Only an action already running can be cut off; one refused
			// before it started would pass with the same code.
			waitInFlight(t, e, "it-pre")
			began := time.Now()
			u, err := e.m.Leases().Acquire("it-pre", lease.User, "ann", time.Minute)
			require.NoError(t, err)
			select {
			case err := <-errc:
				// Left alone, the action would end without an error.
				require.Equal(t, shared.CodeUserHasControl, codeOf(err), "%v", err)
				t.Logf("%s cut off %v after the user lease", a.Type, time.Since(began))
			case <-time.After(60 * time.Second): // a liveness bound, not a speed figure
				t.Fatal("the action was not cut off")
			}
			// The agent is refused; the user can act.
			_, err = actIT(e, ctx, "it-pre", l.ID, shared.Action{Type: shared.ActionScreenshot})
			require.Equal(t, shared.CodeUserHasControl, codeOf(err))
			_, err = actIT(e, ctx, "it-pre", "stale", shared.Action{Type: shared.ActionScreenshot})
			require.Equal(t, shared.CodeUserHasControl, codeOf(err))
			res, err := actIT(e, ctx, "it-pre", u.ID, shared.Action{Type: shared.ActionScreenshot})
			require.NoError(t, err)
			require.NotEmpty(t, res.Observation.Image)
			require.NoError(t, e.m.Leases().Release("it-pre", u.ID))
			// Nobody holds it now: a stale id is lease_required.
			_, err = actIT(e, ctx, "it-pre", "stale", shared.Action{Type: shared.ActionScreenshot})
			require.Equal(t, shared.CodeLeaseRequired, codeOf(err))
		})
	}
}

func TestIntegrationBotIsolation(t *testing.T) {
	e := newIT(t, 2, itDisplayBase+10)
	ctx := testenv.Context(t, 2*time.Minute)
	_, err := e.m.Ensure(ctx, "it-iso")
	require.NoError(t, err)
	tgt, ok := e.m.Target("it-iso")
	require.True(t, ok)
	env := []string{"DISPLAY=" + tgt.Display, "XAUTHORITY=" + tgt.XAuthority}
	shot := filepath.Join(os.TempDir(), "screen-it-bot-shot.png")
	defer os.Remove(shot)

	// The controls: desktop can do all three, so the refusals below are
	// about the user, not the commands.
	code, out := runAs(t, e.desktop, env, "xdpyinfo")
	require.Equal(t, 0, code, out)
	code, out = runAs(t, e.desktop, env, "scrot", "-o", shot)
	require.Equal(t, 0, code, out)
	require.NoError(t, os.Remove(shot))

	// bot cannot read any cookie file…
	xauths, err := filepath.Glob(filepath.Join(e.home, "desktop", ".Xauthority-*"))
	require.NoError(t, err)
	require.NotEmpty(t, xauths)
	for _, f := range xauths {
		code, out = runAs(t, e.bot, nil, "cat", f)
		require.NotEqual(t, 0, code, "bot read %s: %s", f, out)
		require.Contains(t, out, "Permission denied")
	}
	// …cannot connect to the display, with or without pointing at the file…
	for _, env := range [][]string{env, {"DISPLAY=" + tgt.Display}} {
		code, out = runAs(t, e.bot, env, "xdpyinfo")
		require.NotEqual(t, 0, code, "bot connected to the display: %s", out)
		require.Contains(t, out, "unable to open display")
	}
	// …and cannot take a screenshot.
	code, out = runAs(t, e.bot, env, "scrot", "-o", shot)
	require.NotEqual(t, 0, code, "bot took a screenshot: %s", out)
	require.NoFileExists(t, shot)
}

// TestIntegrationFreshScreenshot saves a fresh screen's observation as
// JPEG and PNG under SCREEN_SHOT_DIR (when set) for a human to look at.
func TestIntegrationFreshScreenshot(t *testing.T) {
	e := newIT(t, 2, itDisplayBase+12)
	ctx := testenv.Context(t, 2*time.Minute)
	_, err := e.m.Register("it-shot")
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire("it-shot", lease.Agent, "run", time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, observeIT(t, e, ctx, "it-shot", l.ID).Image)
	// Let the panel and desktop finish drawing: observe until a frame comes
	// back unchanged, so the move below is what changes the next one.
	deadline := time.Now().Add(60 * time.Second)
	for !observeIT(t, e, ctx, "it-shot", l.ID).Unchanged {
		require.True(t, time.Now().Before(deadline), "the fresh screen never stopped drawing")
		time.Sleep(250 * time.Millisecond)
	}
	// Not (640,400): Xvfb starts the pointer there, and an identical frame
	// would (rightly) come back unchanged, without bytes.
	res, err := actIT(e, ctx, "it-shot", l.ID, shared.Action{Type: shared.ActionMove, X: intp(700), Y: intp(450)})
	require.NoError(t, err)
	obs := res.Observation
	require.Equal(t, Width, obs.Width)
	require.Equal(t, Height, obs.Height)
	require.False(t, obs.Unchanged)
	require.Equal(t, shared.Point{X: 700, Y: 450}, obs.Pointer)
	img, err := jpeg.Decode(bytes.NewReader(obs.Image))
	if err != nil {
		_ = os.WriteFile(filepath.Join(os.TempDir(), "screen-bad.jpg"), obs.Image, 0o644)
	}
	require.NoError(t, err, "a %d-byte JPEG", len(obs.Image))
	require.Equal(t, Width, img.Bounds().Dx())
	t.Logf("fresh screen: %d bytes of JPEG", len(obs.Image))
	if dir := os.Getenv("SCREEN_SHOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "fresh.jpg"), obs.Image, 0o644))
		var b bytes.Buffer
		require.NoError(t, png.Encode(&b, img))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "fresh.png"), b.Bytes(), 0o644))
	}
}

func TestIntegrationTwoScreensActInParallel(t *testing.T) {
	e := newIT(t, 2, itDisplayBase+14)
	ctx := testenv.Context(t, 2*time.Minute)
	ids := []string{"it-par-a", "it-par-b"}
	leases := map[string]string{}
	for _, id := range ids {
		_, err := e.m.Register(id)
		require.NoError(t, err)
		l, err := e.m.Leases().Acquire(id, lease.Agent, "run-"+id, time.Minute)
		require.NoError(t, err)
		leases[id] = l.ID
		require.NotEmpty(t, observeIT(t, e, ctx, id, l.ID).Image)
	}
	// a's batch clicks, then waits a minute; b's whole batch (click, short
	// wait, settle, capture) runs meanwhile. Were the screens serialised,
	// b would wait out a's minute.
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aerr := make(chan error, 1)
	go func() {
		_, err := actIT(e, actx, "it-par-a", leases["it-par-a"],
			shared.Action{Type: shared.ActionClick, X: intp(900), Y: intp(600)}, shared.Action{Type: shared.ActionWait, Ms: intp(60_000)})
		aerr <- err
	}()
	waitInFlight(t, e, "it-par-a")
	res, err := actIT(e, ctx, "it-par-b", leases["it-par-b"],
		shared.Action{Type: shared.ActionClick, X: intp(900), Y: intp(600)}, shared.Action{Type: shared.ActionWait, Ms: intp(100)})
	require.NoError(t, err)
	require.Len(t, res.Results, 2)
	require.NotNil(t, res.Observation)
	require.Equal(t, 1, inFlight(e, "it-par-a"), "b's batch ended while a's was still running")
	acancel()
	require.Error(t, <-aerr)
}

// inFlight counts the screen's running action batches.
func inFlight(e *itEnv, id string) int {
	s := e.m.Get(id)
	if s == nil {
		return 0
	}
	s.inMu.Lock()
	defer s.inMu.Unlock()
	return len(s.inflight)
}

// waitInFlight waits until an action batch runs on screen id.
func waitInFlight(t testing.TB, e *itEnv, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for inFlight(e, id) == 0 {
		require.True(t, time.Now().Before(deadline), "no action in flight on %s", id)
		time.Sleep(5 * time.Millisecond)
	}
}

// waitClients waits until the window manager of screen id (displays from
// base) manages at least n windows.
func waitClients(t testing.TB, ctx context.Context, e *itEnv, base int, id string, n int) {
	t.Helper()
	slot := *mustInfo(e.m, id).Slot
	deadline := time.Now().Add(60 * time.Second)
	for {
		x, err := dialX(ctx, base+slot, int(e.desktop.UID), cookieOf(t, e.m.xauthPath(slot)))
		require.NoError(t, err)
		got, err := x.clients()
		x.Close()
		require.NoError(t, err)
		if got >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d windows on %s, want %d", got, id, n)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIntegrationObserveOverHTTP: the observe and act routes on a real
// screen. The first observe carries a JPEG of the whole screen; once the
// desktop has settled an observe says unchanged and carries no bytes (with
// the same frame hash); an action that moves the pointer brings a new
// frame, drawn with the pointer where it was sent.
func TestIntegrationObserveOverHTTP(t *testing.T) {
	e := newIT(t, 2, itDisplayBase+16)
	mux := http.NewServeMux()
	e.m.Routes(mux)
	_, err := e.m.Register("it-http")
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire("it-http", lease.Agent, "run", time.Minute)
	require.NoError(t, err)
	observe := func() apiResp {
		t.Helper()
		r := call(t, mux, "POST", "/screens/it-http/observe", map[string]any{"leaseId": l.ID})
		require.Equal(t, http.StatusOK, r.status, r.body)
		return r
	}
	jpegOf := func(r apiResp) image.Image {
		t.Helper()
		s, _ := r.body["image"].(string)
		b, err := base64.StdEncoding.DecodeString(s)
		require.NoError(t, err)
		img, err := jpeg.Decode(bytes.NewReader(b))
		require.NoError(t, err, "a %d-byte image", len(b))
		return img
	}

	first := observe()
	require.Equal(t, false, first.body["unchanged"])
	img := jpegOf(first)
	require.Equal(t, Width, img.Bounds().Dx())
	require.Equal(t, Height, img.Bounds().Dy())
	require.EqualValues(t, Width, first.body["width"])
	require.NotEmpty(t, first.body["frameHash"])

	// Until the panel and desktop are drawn every frame is new (with bytes);
	// then one comes back unchanged, without bytes, with the last hash.
	prev := first
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := observe()
		if r.body["unchanged"] == true {
			require.Nil(t, r.body["image"], "an unchanged frame carries no bytes")
			require.Equal(t, prev.body["frameHash"], r.body["frameHash"])
			break
		}
		require.Equal(t, false, r.body["unchanged"])
		jpegOf(r)
		prev = r
		require.True(t, time.Now().Before(deadline), "the fresh screen never stopped drawing")
		time.Sleep(250 * time.Millisecond)
	}

	r := call(t, mux, "POST", "/screens/it-http/act", map[string]any{"leaseId": l.ID, "actions": []any{map[string]any{"type": "move", "x": 700, "y": 450}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	obs, _ := r.body["observation"].(map[string]any)
	require.NotNil(t, obs, "act answers with an observation: %v", r.body)
	require.Equal(t, false, obs["unchanged"])
	require.NotEqual(t, prev.body["frameHash"], obs["frameHash"])
	require.Equal(t, map[string]any{"x": 700.0, "y": 450.0}, obs["pointer"])
	jpegOf(apiResp{body: obs})
}

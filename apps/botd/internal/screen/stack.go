package screen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/tailbuf"
)

// backend starts a screen's processes; the real one is procBackend, unit
// tests use a fake.
type backend interface {
	start(ctx context.Context, s *Screen, slot int) (stack, error)
}

// stack is one running screen's processes.
type stack interface {
	// died is closed when X ends, on its own or by stop (the manager
	// tells the two apart).
	died() <-chan struct{}
	// stop ends launched apps, then the session and x11vnc, then X.
	stop(ctx context.Context) error
	driver() Driver
	// launch starts argv on the screen as the desktop user.
	launch(ctx context.Context, name string, argv []string) (pid int, err error)
	// readClipboard and writeClipboard get and set the screen's
	// clipboard text (clipboard.go).
	readClipboard(ctx context.Context) (string, error)
	writeClipboard(ctx context.Context, text string) error
	// drawn is closed once the session has drawn (the panel and the
	// desktop are mapped), or after DrawnTimeout.
	drawn() <-chan struct{}
}

// DrawnTimeout caps how long a fresh screen's first observation waits for
// the panel and the desktop.
const DrawnTimeout = 8 * time.Second

// procBackend runs the real stack under the supervisor, every process as
// the desktop user:
//
//	Xvfb :N -screen 0 1280x800x24 -auth <cookie file> -nolisten tcp
//	dbus-daemon --session  (XFCE's settings daemon and friends need a bus)
//	xfwm4, xfce4-panel, xfdesktop
//	x11vnc -unixsock <runDir>/vnc -rfbport 0 (no TCP port at all)
//
// "running" is detected, never slept for: X accepts our cookie, then the
// window manager has set _NET_SUPPORTING_WM_CHECK, and x11vnc answers with
// its RFB banner on its unix socket. The socket lives in the screen's
// runtime directory (desktop 0700 inside root's RunRoot), so only root and
// desktop can reach RFB (THREAT-MODEL rule 2).
type procBackend struct{ m *Manager }

// procStack is a running procBackend screen.
type procStack struct {
	m       *Manager
	id      string
	slot    int
	runDir  string
	uid     int // the desktop user's
	xvfb    *supervisor.Proc
	session []*supervisor.Proc // dbus, xfwm4, panel, desktop, x11vnc
	drv     Driver

	drawnCh chan struct{}

	// mu guards apps.
	mu   sync.Mutex
	apps []*supervisor.Proc
}

func (p *procStack) died() <-chan struct{}  { return p.xvfb.Done() }
func (p *procStack) drawn() <-chan struct{} { return p.drawnCh }
func (p *procStack) driver() Driver         { return p.drv }

// env is the environment of every process on the screen.
func (b *procBackend) env(slot int, runDir string) []string {
	m := b.m
	return append([]string{
		"HOME=" + m.DesktopHome(),
		"DISPLAY=:" + strconv.Itoa(m.display(slot)),
		"XAUTHORITY=" + m.xauthPath(slot),
		"XDG_RUNTIME_DIR=" + runDir,
		"DBUS_SESSION_BUS_ADDRESS=unix:path=" + filepath.Join(runDir, "bus"),
		"XDG_CURRENT_DESKTOP=XFCE",
		"XDG_SESSION_DESKTOP=xfce",
		"XDG_SESSION_TYPE=x11",
		// No NO_AT_BRIDGE: GTK programs export their trees on the
		// screen's accessibility bus (the session bus activates
		// at-spi-bus-launcher), where botd reads desktop elements
		// (desktop_elements.go). Chromium alone keeps it off.
	}, m.o.ExtraEnv...)
}

// RunRoot holds every screen's runtime directory. It is root's (0755, in
// root's /run), so desktop owns its screen's directory but can never swap it
// for a link (THREAT-MODEL rule 1).
const RunRoot = "/run/botd-screens"

// runDirFor is the screen's runtime directory (sockets); it is keyed by the
// display number, which is unique on the host, and kept short because unix
// socket paths are.
func runDirFor(display int) string { return filepath.Join(RunRoot, strconv.Itoa(display)) }

// vncSocket is the screen's x11vnc unix socket.
func vncSocket(runDir string) string { return filepath.Join(runDir, "vnc") }

// xSocketDir is where X servers put their sockets: root's, 1777 sticky (so
// a socket there can be replaced only by its owner).
const xSocketDir = "/tmp/.X11-unix"

func (b *procBackend) start(ctx context.Context, s *Screen, slot int) (st stack, err error) {
	m := b.m
	u := m.o.Desktop
	disp := m.display(slot)
	runDir := runDirFor(disp)

	// Filesystem: the desktop home and the profile dir (desktop-owned), a
	// fresh runtime dir, the X socket dir, and a new cookie for this start.
	// Every step is relative to a directory fd and never follows a link
	// desktop may have planted (safefs); RunRoot and /tmp/.X11-unix are
	// root's, repaired when they drifted.
	uid, gid := int(u.UID), int(u.GID)
	for _, d := range []struct {
		rel  string
		mode os.FileMode
	}{{"desktop", 0o755}, {filepath.Join("desktop", "screens"), 0o755}, {filepath.Join("desktop", "screens", s.ID), 0o700}} {
		if err := safefs.EnsureDir(m.o.Home, d.rel, d.mode, uid, gid); err != nil {
			return nil, err
		}
	}
	if err := safefs.EnsureRootDir(RunRoot, 0o755); err != nil {
		return nil, fmt.Errorf("screen runtime root: %w", err)
	}
	_ = os.RemoveAll(runDir) // in root's RunRoot: nothing there to follow
	if err := safefs.EnsureDir(RunRoot, strconv.Itoa(disp), 0o700, uid, gid); err != nil {
		return nil, err
	}
	if err := safefs.EnsureRootDir(xSocketDir, os.ModeSticky|0o777); err != nil {
		return nil, fmt.Errorf("x socket dir: %w", err)
	}
	cookie, err := newCookie()
	if err != nil {
		return nil, err
	}
	xauth := m.xauthPath(slot)
	if err := writeXauthority(xauth, cookie, int(u.UID), int(u.GID)); err != nil {
		return nil, err
	}

	ps := &procStack{m: m, id: s.ID, slot: slot, runDir: runDir, uid: uid, drawnCh: make(chan struct{})}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
			defer cancel()
			_ = ps.stop(sctx)
		}
	}()
	env := b.env(slot, runDir)
	spec := func(name string, restart supervisor.Restart, argv []string, ready func(context.Context) error) supervisor.Spec {
		return supervisor.Spec{
			Name:    fmt.Sprintf("%s:%s", name, s.ID),
			Restart: restart,
			Cmd:     runner.Spec{Argv: argv, User: &u, Env: env, Dir: m.DesktopHome()},
			Ready:   ready,
		}
	}
	sup := m.o.Supervisor

	// X and the session bus first, side by side (the bus needs no display).
	// X is the screen: when it dies the screen has crashed, so it is never
	// restarted behind our back (the next Ensure starts a new stack with a
	// new cookie).
	ps.xvfb, err = sup.Start(spec("xvfb", supervisor.RestartNever,
		[]string{"Xvfb", ":" + strconv.Itoa(disp), "-screen", "0", fmt.Sprintf("%dx%dx24", Width, Height),
			"-auth", xauth, "-nolisten", "tcp", "-noreset"},
		func(ctx context.Context) error { return pollX(ctx, disp, uid, cookie, false) }))
	if err != nil {
		return nil, fmt.Errorf("start xvfb: %w", err)
	}
	bus := filepath.Join(runDir, "bus")
	dbus, err := sup.Start(spec("dbus", supervisor.RestartAlways,
		[]string{"dbus-daemon", "--session", "--nofork", "--nopidfile", "--address=unix:path=" + bus},
		func(ctx context.Context) error { return pollDial(ctx, "unix", bus, nil) }))
	if err != nil {
		return nil, fmt.Errorf("start dbus: %w", err)
	}
	ps.session = append(ps.session, dbus)
	if err := ps.xvfb.WaitRunning(ctx); err != nil {
		return nil, m.xvfbFailed(ps.xvfb, disp, err)
	}
	if err := dbus.WaitRunning(ctx); err != nil {
		return nil, fmt.Errorf("dbus: %w", err)
	}

	// Then the window manager and x11vnc; the screen is running once both
	// answer. The panel and the desktop start after the window manager is
	// up (they would only compete with it for the CPU) and are not waited
	// for: they draw within moments, and settle covers the first frame.
	vncSock := vncSocket(runDir)
	type procDef struct {
		name  string
		argv  []string
		ready func(context.Context) error
	}
	// x11vnc's last words: a start that fails because x11vnc keeps
	// exiting says why (its stderr holds no secret: no password, the
	// display and socket names). Rehearsal 43 saw it exit 1 six times
	// with nothing to say why.
	vncErr := &tailbuf.Buffer{Max: 2048}
	startAll := func(defs []procDef) error {
		var started []*supervisor.Proc
		var tails []*tailbuf.Buffer
		for _, d := range defs {
			sp := spec(d.name, supervisor.RestartAlways, d.argv, d.ready)
			var tail *tailbuf.Buffer
			if d.name == "x11vnc" {
				sp.Cmd.Stderr, tail = vncErr, vncErr
			}
			proc, err := sup.Start(sp)
			if err != nil {
				return fmt.Errorf("start %s: %w", d.name, err)
			}
			ps.session = append(ps.session, proc)
			started = append(started, proc)
			tails = append(tails, tail)
		}
		for i, p := range started {
			if err := p.WaitRunning(ctx); err != nil {
				if t := lastWords(tails[i]); t != "" {
					return fmt.Errorf("%w; its last output: %s", err, t)
				}
				return err
			}
		}
		return nil
	}
	// --vblank=off: xfwm4 otherwise loads Mesa to find a vblank source,
	// which on a busy 2-core machine more than doubled the cold start (and
	// an Xvfb screen has no vblank to sync to).
	if err := startAll([]procDef{
		{"xfwm4", []string{"xfwm4", "--compositor=off", "--vblank=off"}, func(ctx context.Context) error { return pollX(ctx, disp, uid, cookie, true) }},
		// -rfbport 0 -rfbportv6 0 -no6: no TCP listener at all (with
		// -rfbport 0 alone, x11vnc still listens on [::]:5900). No
		// -threads: with it x11vnc accepts on the unix socket but never
		// greets (checked with x11vnc 0.9.16).
		{"x11vnc", []string{"x11vnc", "-display", ":" + strconv.Itoa(disp), "-auth", xauth,
			"-unixsock", vncSock, "-rfbport", "0", "-rfbportv6", "0", "-no6",
			"-shared", "-forever", "-nopw", "-quiet", "-noxdamage"},
			func(ctx context.Context) error { return pollDial(ctx, "unix", vncSock, isRFB) }},
	}); err != nil {
		return nil, err
	}
	if err := startAll([]procDef{
		{"xfce4-panel", []string{"xfce4-panel"}, nil},
		{"xfdesktop", []string{"xfdesktop"}, nil},
	}); err != nil {
		return nil, err
	}
	go ps.watchDrawn(disp, uid, cookie)
	if m.o.NewDriver != nil {
		ps.drv, err = m.o.NewDriver(Target{Display: ":" + strconv.Itoa(disp), XAuthority: xauth, User: &u, Width: Width, Height: Height})
		if err != nil {
			return nil, fmt.Errorf("driver: %w", err)
		}
	}
	return ps, nil
}

// watchDrawn closes drawnCh once the window manager manages two windows
// (the panel and the desktop) plus a moment for them to paint, or after
// DrawnTimeout, or when X dies: a fresh screen's first observation should
// show a desktop, not the black of a session still starting.
func (p *procStack) watchDrawn(display, uid int, cookie []byte) {
	defer close(p.drawnCh)
	ctx, cancel := context.WithTimeout(context.Background(), DrawnTimeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		if x, err := dialX(pctx, display, uid, cookie); err == nil {
			n, _ := x.clients()
			x.Close()
			if n >= 2 {
				pcancel()
				select {
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
				}
				return
			}
		}
		pcancel()
		select {
		case <-ctx.Done():
			return
		case <-p.xvfb.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends everything that draws (launched apps first, then the session
// and x11vnc in parallel), then X. The caller has already stopped the
// browser through the BeforeStop hooks.
func (p *procStack) stop(ctx context.Context) error {
	if p.drv != nil {
		_ = p.drv.Close()
	}
	p.mu.Lock()
	apps := p.apps
	p.apps = nil
	p.mu.Unlock()
	var errs []error
	stopAll := func(procs []*supervisor.Proc) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, pr := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := pr.Stop(ctx); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("stop %s: %w", pr.Name(), err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	stopAll(apps)
	stopAll(p.session)
	if p.xvfb != nil {
		stopAll([]*supervisor.Proc{p.xvfb})
	}
	if n := reapOrphanShm(p.uid); n > 0 {
		p.m.log.Info().Str("screen", p.id).Int("segments", n).Msg("removed shared memory segments the desktop user's exited programs left")
	}
	_ = os.RemoveAll(p.runDir)
	return errors.Join(errs...)
}

// launch starts an application on the screen (restart=never: closing it on
// the desktop leaves it closed). It is stopped with the screen.
func (p *procStack) launch(ctx context.Context, name string, argv []string) (int, error) {
	b := &procBackend{m: p.m}
	u := p.m.o.Desktop
	proc, err := p.m.o.Supervisor.Start(supervisor.Spec{
		Name:    fmt.Sprintf("app:%s:%s", p.id, name),
		Restart: supervisor.RestartNever,
		Cmd:     runner.Spec{Argv: argv, User: &u, Env: b.env(p.slot, p.runDir), Dir: p.m.DesktopHome()},
	})
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	kept := p.apps[:0]
	for _, a := range p.apps {
		select {
		case <-a.Done():
		default:
			kept = append(kept, a)
		}
	}
	p.apps = append(kept, proc)
	p.mu.Unlock()
	if err := proc.WaitRunning(ctx); err != nil {
		if proc.State() == shared.StateStopped {
			return 0, nil // handed its work to a running instance and exited 0
		}
		return 0, err
	}
	return proc.Pid(), nil
}

// pollInterval is how often readiness is probed.
const pollInterval = 10 * time.Millisecond

// pollX waits until display accepts cookie (and, with wm, until a window
// manager is up).
func pollX(ctx context.Context, display, uid int, cookie []byte, wm bool) error {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		x, err := dialX(pctx, display, uid, cookie)
		if err == nil {
			ok := true
			if wm {
				ok, err = x.wmRunning()
			}
			x.Close()
			if err == nil && ok {
				cancel()
				return nil
			}
		}
		cancel()
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// pollDial waits until addr accepts a connection (and check, when set,
// accepts what it says first).
func pollDial(ctx context.Context, network, addr string, check func(net.Conn) error) error {
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(dctx, network, addr)
		cancel()
		if err == nil {
			if check != nil {
				_ = c.SetDeadline(time.Now().Add(time.Second))
				err = check(c)
			}
			c.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// isRFB checks that the listener speaks RFB.
func isRFB(c net.Conn) error {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "RFB ") {
		return errors.New("not RFB")
	}
	return nil
}

// slotFreeOnHost reports whether nothing outside botd uses slot: nobody
// holds its display number (displayHeld: the X lock, the X socket, the
// abstract X name). Its view and control ports do not decide: package vnc
// takes ports the kernel picks when someone else holds the slot's own.
// Never called with m.mu held.
func (m *Manager) slotFreeOnHost(slot int) bool {
	return !displayHeld(m.display(slot), int(m.o.Desktop.UID))
}

// lockStale: an X lock whose server is gone and that Xvfb (as desktop) may
// replace (desktop's own).
func lockStale(path string, b []byte, desktop int) bool {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || (int(st.Uid) != desktop && st.Uid != 0) {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return !(err == nil || errors.Is(err, syscall.EPERM))
}

// lastWords is what a process's stderr tail holds, on one line and valid
// UTF-8 ("" for none).
func lastWords(t *tailbuf.Buffer) string {
	if t == nil {
		return ""
	}
	return strings.Join(strings.Fields(strings.ToValidUTF8(t.String(), "?")), " ")
}

// Package desktop is the command-driven desktop machine: a machines.Machine
// over a sandbox that runs no botd, driven as the vendor desktop SDKs drive
// theirs (E2B's @e2b/desktop): commands and files through the backend's
// API (Backend), a screenshot with the pointer (scrot), input with xdotool,
// the live view with x11vnc and websockify/noVNC. The worker holds the
// leases here, by botd's rules.
//
// Screens: the first screen is the sandbox's own display :0 (started
// through commands, Xvfb and XFCE, when it is not up, as the SDK does);
// every further screen gets slot i: its own Xvfb on :i, an XFCE session
// and x11vnc, with websockify on the view port 6080+2i (view-only x11vnc)
// and the control port 6081+2i (x11vnc taking input). A backend that can
// run only one screen gets MULTI_SCREEN_UNAVAILABLE for any other.
//
// Browsers: each screen's Chromium runs on its own profile in the
// workspace (ProfilesDir/<screen>), started by the machine on the screen's
// display (browser.go); an export or import closes them cleanly and starts
// them again on their tabs, and the export leaves out the profiles'
// transient files (pkg/shared/transient), so a replacement's screens come
// back signed in.
//
// Trust: the sandbox is one trust domain. Everything runs as one user, so
// a command the bot runs can reach X, x11vnc and the workspace; leases keep
// the worker's agents and people apart, not processes in the sandbox.
package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Options configures a Machine; zero values get the defaults.
type Options struct {
	// Backend runs commands and moves files (required).
	Backend Backend
	// User runs everything in the sandbox (default "user", E2B's).
	User string
	// Home is User's home (default /home/user).
	Home string
	// Workspace is where relative paths, exec and the workspace export are
	// rooted (default Home + "/open-bot-home").
	Workspace string
	// Width and Height are the geometry of every display the machine
	// starts (default 1280×800, botd's).
	Width, Height int
	// MaxScreens caps the slots (default 4; never more than the backend's).
	MaxScreens int
	// ViewPortBase is slot 0's view port (default 6080; control is +1,
	// slot i is +2i). RFBPortBase is slot 0's view-only x11vnc port
	// (default 5900; the control x11vnc is +1, slot i +2i), inside only.
	ViewPortBase, RFBPortBase int
	// StartTimeout bounds one screen start (default 60 s).
	StartTimeout time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// HeldStream makes the machine hold one RFB session per screen (to its
	// control x11vnc, through the backend's port URL) and take
	// observations from it, falling back to the screenshot command while
	// the stream is down (issue 31). Providers set it from HeldStreamEnv:
	// on unless that is "0".
	HeldStream bool
	// HeldRefresh bounds the wait for the held stream's answer to a
	// refresh, past which an observation takes the command path
	// (default 2 s).
	HeldRefresh time.Duration
	// Log takes the held streams' state changes and viewers' ends (the
	// zero Logger drops them). Nothing secret is logged.
	Log zerolog.Logger
	// BootedAt is when the sandbox's desktop came up, what Health reports
	// (zero: when New ran). A backend that finds a running desktop again
	// passes its start, so a reconnect is seen not to restart it.
	BootedAt time.Time
}

// Machine is the command-driven desktop machine.
type Machine struct {
	o      Options
	b      Backend
	leases *leaseTable
	booted time.Time
	events *hub
	links  *linkTable

	// startMu serializes screen starts and stops (slot bookkeeping in the
	// sandbox).
	startMu sync.Mutex

	// mu guards screens, every screen's slot and running, and wsReady.
	mu      sync.Mutex
	screens map[string]*screen
	wsReady bool

	// xferMu makes one workspace transfer run at a time (botd's 409).
	xferMu sync.Mutex
	// browserMu serializes the screens' browser starts, opens and closes,
	// and holds them while a workspace transfer has the browsers closed
	// (quiesceBrowsers). Taken after startMu, never before it.
	browserMu sync.Mutex
	// stop ends the sweeper.
	stop chan struct{}
	once sync.Once

	// heldFrames counts observations taken from a held stream (heldRefreshes
	// those that waited for a refresh first), heldInputs actions performed
	// through one.
	heldFrames, heldRefreshes, heldInputs atomic.Int64
	// viewers counts the viewers served from held streams (mux.go).
	viewers atomic.Int64
}

// New returns a machine over o.Backend. It starts nothing in the sandbox
// until a screen is used; Close stops its lease sweeper.
func New(o Options) (*Machine, error) {
	if o.Backend == nil {
		return nil, errors.New("desktop machine: no backend")
	}
	if o.User == "" {
		o.User = "user"
	}
	if o.Home == "" {
		o.Home = "/home/" + o.User
	}
	if o.Workspace == "" {
		o.Workspace = strings.TrimRight(o.Home, "/") + "/open-bot-home"
	}
	if o.Width <= 0 || o.Height <= 0 {
		o.Width, o.Height = 1280, 800
	}
	if o.HeldRefresh <= 0 {
		o.HeldRefresh = heldRefresh
	}
	if o.MaxScreens <= 0 {
		o.MaxScreens = 4
	}
	if n := o.Backend.MaxScreens(); n > 0 && n < o.MaxScreens {
		o.MaxScreens = n
	}
	if o.ViewPortBase == 0 {
		o.ViewPortBase = 6080
	}
	if o.RFBPortBase == 0 {
		o.RFBPortBase = 5900
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	booted := o.BootedAt
	if booted.IsZero() {
		booted = o.Now()
	}
	m := &Machine{o: o, b: o.Backend, booted: booted, screens: map[string]*screen{}, stop: make(chan struct{})}
	m.events = newHub()
	m.links = newLinkTable(o.Now)
	m.leases = newLeaseTable(o.Now, m.leaseChanged)
	go m.sweep()
	return m, nil
}

// Close stops the machine's own goroutines and its event stream (the
// sandbox and what runs in it stay).
func (m *Machine) Close() error {
	m.once.Do(func() {
		close(m.stop)
		m.events.close()
		m.mu.Lock()
		ss := make([]*screen, 0, len(m.screens))
		for _, s := range m.screens {
			ss = append(ss, s)
		}
		m.mu.Unlock()
		for _, s := range ss {
			m.dropStream(s)
		}
	})
	return nil
}

func (m *Machine) sweep() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.leases.sweep()
		}
	}
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validID(id string) error {
	if !idPattern.MatchString(id) {
		return apiErr(http.StatusBadRequest, shared.CodeInvalidID, "screen id must match [A-Za-z0-9_-]{1,64}")
	}
	return nil
}

func notFound(id string) error {
	return apiErr(http.StatusNotFound, shared.CodeNotFound, "no screen %s", id)
}

func errUnavailable(id, why string) error {
	return apiErr(http.StatusServiceUnavailable, shared.CodeScreenUnavailable, "screen %s %s", id, why)
}

// errPreempted is the cause of an action cut off because a person took
// the screen; errStopped of one cut off because the screen was forgotten.
var (
	errPreempted = errors.New("preempted by a user")
	errStopped   = errors.New("screen stopped")
)

// leaseChanged cuts an agent off the moment a person takes its screen (and
// ends a control stream when its person's lease ends), then tells /events.
func (m *Machine) leaseChanged(c lease.Change) {
	if c.What == "preempted" {
		if s := m.get(c.Screen); s != nil {
			s.cutOff(errPreempted)
		}
	}
	if c.Old != nil && c.Old.Kind == lease.User && c.What != "acquired" {
		m.links.endControl(c.Screen, c.Old.Holder)
	}
	data := map[string]any{"screen": c.Screen, "what": c.What}
	if c.Old != nil {
		data["old"] = c.Old.Info()
	}
	if c.New != nil {
		data["new"] = c.New.Info()
	}
	m.events.publish(shared.EventLease, data)
	if c.What == "preempted" {
		m.events.publish(shared.EventPreempted, data)
	}
}

func (m *Machine) get(id string) *screen {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.screens[id]
}

// register makes screen id known (as stopped, no slot) and returns it.
func (m *Machine) register(id string) *screen {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.screens[id]
	if s == nil {
		s = &screen{id: id, slot: -1, inflight: map[int]context.CancelCauseFunc{}}
		m.screens[id] = s
	}
	return s
}

// freeSlotLocked is the lowest slot no screen holds, or -1.
func (m *Machine) freeSlotLocked() int {
	used := map[int]bool{}
	for _, s := range m.screens {
		if s.slot >= 0 {
			used[s.slot] = true
		}
	}
	for i := 0; i < m.o.MaxScreens; i++ {
		if !used[i] {
			return i
		}
	}
	return -1
}

func (m *Machine) errMultiScreen() error {
	if m.o.MaxScreens == 1 {
		return apiErr(http.StatusServiceUnavailable, shared.CodeMultiScreen,
			"this computer's sandbox runs a single screen and another bot uses it; shell and file tools still work")
	}
	return apiErr(http.StatusServiceUnavailable, shared.CodeMultiScreen,
		"all %d screens of this computer are in use; shell and file tools still work", m.o.MaxScreens)
}

// CheckScreen allows a screen that holds a slot or could take a free one;
// it starts nothing.
func (m *Machine) CheckScreen(ctx context.Context, id string) error {
	if id == "" {
		return apiErr(http.StatusBadRequest, shared.CodeInvalidID, "no screen id")
	}
	if err := validID(id); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.screens[id]; s != nil && s.slot >= 0 {
		return nil
	}
	if m.freeSlotLocked() < 0 {
		return m.errMultiScreen()
	}
	return nil
}

func (m *Machine) display(slot int) string { return ":" + strconv.Itoa(slot) }
func (m *Machine) viewPort(slot int) int   { return m.o.ViewPortBase + 2*slot }
func (m *Machine) ctlPort(slot int) int    { return m.o.ViewPortBase + 2*slot + 1 }
func (m *Machine) rfbPort(slot int) int    { return m.o.RFBPortBase + 2*slot }

func (m *Machine) info(s *screen) client.Screen {
	c := client.Screen{ID: s.id, Slot: s.slot, State: string(shared.StateStopped)}
	if s.slot >= 0 {
		c.Display = m.display(s.slot)
	}
	if s.running {
		c.State = string(shared.StateRunning)
	}
	return c
}

// StartScreen starts screen id (registering it): slot 0 is the sandbox's
// own display :0, started through commands when it is not up.
func (m *Machine) StartScreen(ctx context.Context, id string) (client.Screen, error) {
	if err := validID(id); err != nil {
		return client.Screen{}, err
	}
	m.register(id)
	s, err := m.ensure(ctx, id)
	if err != nil {
		return client.Screen{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.info(s), nil
}

// Screens lists the known screens by id.
func (m *Machine) Screens(ctx context.Context) ([]client.Screen, error) {
	m.mu.Lock()
	out := make([]client.Screen, 0, len(m.screens))
	for _, s := range m.screens {
		out = append(out, m.info(s))
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ensure gives screen id a slot and runs its stack (idempotent: a display
// already up is kept).
func (m *Machine) ensure(ctx context.Context, id string) (*screen, error) {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	s := m.screens[id]
	if s == nil {
		m.mu.Unlock()
		return nil, notFound(id)
	}
	if s.running {
		m.mu.Unlock()
		return s, nil
	}
	if s.slot < 0 {
		slot := m.freeSlotLocked()
		if slot < 0 {
			m.mu.Unlock()
			return nil, m.errMultiScreen()
		}
		s.slot = slot
	}
	slot := s.slot
	m.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, m.o.StartTimeout)
	defer cancel()
	if err := m.ensureWorkspace(sctx); err != nil {
		return nil, errUnavailable(id, "did not start: "+err.Error())
	}
	w, h, err := m.startSlot(sctx, slot)
	if err != nil {
		m.events.publish(shared.EventScreen, map[string]any{"screen": id, "state": shared.StateCrashed})
		return nil, errUnavailable(id, "did not start: "+err.Error())
	}
	m.mu.Lock()
	s.running, s.width, s.height = true, w, h
	m.mu.Unlock()
	m.holdStream(s, slot)
	// A screen with a profile gets its browser back on its last session:
	// on a replacement, the imported sign-ins and tabs.
	bctx, bcancel := context.WithTimeout(ctx, m.o.StartTimeout)
	m.restoreBrowser(bctx, id, slot)
	bcancel()
	m.events.publish(shared.EventScreen, map[string]any{"screen": id, "state": shared.StateRunning, "display": m.display(slot)})
	return s, nil
}

// ForgetScreen ends the screen's lease, cuts off what runs on it, closes its
// browser cleanly (its profile stays in the workspace), stops its stack (a
// further slot's Xvfb, XFCE and x11vnc; the sandbox's own display :0 stays
// up) and frees its slot, so the next screen there never shows this one's
// browser.
func (m *Machine) ForgetScreen(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	s := m.get(id)
	if s == nil {
		return nil
	}
	m.leases.drop(id)
	s.cutOff(errStopped)
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	slot := s.slot
	delete(m.screens, id)
	m.mu.Unlock()
	m.links.forget(id)
	m.dropStream(s)
	if err := m.closeBrowser(ctx, id); err != nil {
		return fmt.Errorf("desktop machine: stop screen %s: %w", id, err)
	}
	if slot > 0 {
		if err := m.stopSlot(ctx, slot); err != nil {
			return fmt.Errorf("desktop machine: stop screen %s: %w", id, err)
		}
	}
	m.events.publish(shared.EventScreen, map[string]any{"screen": id, "state": shared.StateStopped, "forgotten": true})
	return nil
}

// AcquireLease registers the screen and grants a lease by botd's rules. A
// person's lease wakes the screen in the background, as botd does.
func (m *Machine) AcquireLease(ctx context.Context, id, kind, holder string, ttl time.Duration) (client.Lease, error) {
	if err := validID(id); err != nil {
		return client.Lease{}, err
	}
	if ttl < 0 {
		return client.Lease{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "ttlSeconds must not be negative")
	}
	m.register(id)
	l, err := m.leases.acquire(id, kind, holder, ttl, time.Time{})
	if err == nil && kind == KindUser {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), m.o.StartTimeout)
			defer cancel()
			_, _ = m.ensure(ctx, id)
		}()
	}
	return l, err
}

// ReleaseLease ends lease leaseID on screen id (404 when it is not the
// current one).
func (m *Machine) ReleaseLease(ctx context.Context, id, leaseID string) error {
	if err := validID(id); err != nil {
		return err
	}
	return m.leases.release(id, leaseID)
}

// Health: the backend answers and display :0 is up (OK); the agent is
// always "stopped" (no agent runs on a desktop machine: DialAgent).
func (m *Machine) Health(ctx context.Context) (shared.ComputerHealth, error) {
	h := shared.ComputerHealth{BootedAt: m.booted.UTC(), Agent: shared.StateStopped, Egress: shared.EgressHealth{Mode: "sandbox"}}
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"xdpyinfo", "-display", ":0"}, User: m.o.User, MaxOutput: 1})
	if err != nil {
		return h, fmt.Errorf("desktop machine: the sandbox does not answer: %w", err)
	}
	h.OK = r.ExitCode == 0
	m.mu.Lock()
	for _, s := range m.screens {
		sh := shared.ScreenHealth{ID: s.id, State: shared.StateStopped, Browser: shared.StateStopped, Lease: m.leases.current(s.id).Info()}
		if s.running {
			sh.State = shared.StateRunning
		}
		h.Screens = append(h.Screens, sh)
	}
	m.mu.Unlock()
	sort.Slice(h.Screens, func(i, j int) bool { return h.Screens[i].ID < h.Screens[j].ID })
	return h, nil
}

// unavailable is the answer of a browser helper this machine cannot do
// honestly: it drives X, not a managed Chromium over DevTools.
func unavailable(what, instead string) error {
	return apiErr(http.StatusNotImplemented, shared.CodeUnavailable,
		"%s is not available on a command-driven desktop (no managed browser); %s", what, instead)
}

// TypeSecret is unavailable: without the browser's DevTools the machine
// cannot check the page's origin before it types, so it never types one.
func (m *Machine) TypeSecret(ctx context.Context, id, leaseID, origin, secret string, visible bool) error {
	return unavailable("typing a secret", "the machine cannot verify the page's origin, so it types no secret; sign in by taking over the screen")
}

// ReadPage is unavailable (no DevTools to read the page).
func (m *Machine) ReadPage(ctx context.Context, id string) (client.Page, error) {
	return client.Page{}, unavailable("reading the page", "observe the screen instead")
}

// BrowserPages is unavailable (no DevTools to list tabs).
func (m *Machine) BrowserPages(ctx context.Context, id string) ([]string, error) {
	return nil, unavailable("listing the browser's pages", "observe the screen instead")
}

// DialCDP is unavailable: the browser here is a plain Chromium the
// machine starts through commands, with no DevTools endpoint the worker
// keeps (and no policy between a CDP client and the vault's sealed tabs).
func (m *Machine) DialCDP(ctx context.Context, screenID, leaseID string) (*websocket.Conn, error) {
	return nil, apiErr(http.StatusNotImplemented, shared.CodeUnavailable,
		"CDP needs botd's managed browser (a computer on template open-bot); this backend's desktop has none: drive it with computer_act and computer_observe instead")
}

// launchers is the allow-list of desktop applications (botd's).
var launchers = map[string][]string{
	"terminal": {"xfce4-terminal"},
	"files":    {"thunar"},
	"editor":   {"mousepad"},
}

// Launch starts an allowed application on the screen, under the lease.
func (m *Machine) Launch(ctx context.Context, id, leaseID, app string) (json.RawMessage, error) {
	argv, ok := launchers[app]
	if !ok {
		names := make([]string, 0, len(launchers))
		for k := range launchers {
			names = append(names, k)
		}
		sort.Strings(names)
		return nil, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "unknown app %q (want one of %s)", app, strings.Join(names, ", "))
	}
	var pid int
	err := m.withLease(ctx, id, leaseID, func(ctx context.Context, s *screen) error {
		var err error
		pid, err = m.spawn(ctx, s, argv)
		return err
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"app": app, "pid": pid})
}

// Open opens an http(s) URL on the screen, under the lease, in the screen's
// own Chromium: its profile is ProfilesDir/<screen> in the workspace, so
// two screens never share a browser or its sign-ins (browserScript; with
// no Chromium installed, xdg-open). It is plain input to the desktop: no
// page is read back (ReadPage is unavailable).
func (m *Machine) Open(ctx context.Context, id, leaseID, target string) (json.RawMessage, error) {
	if !(strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://")) || len(target) > 8192 || strings.ContainsAny(target, "\x00\n\r") {
		return nil, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "target must be an http(s) URL on this machine (no managed browser to open files or tabs)")
	}
	var pid int
	err := m.withLease(ctx, id, leaseID, func(ctx context.Context, s *screen) error {
		m.mu.Lock()
		slot := s.slot
		m.mu.Unlock()
		m.browserMu.Lock()
		out, err := m.browser(ctx, "open", id, slot, target)
		m.browserMu.Unlock()
		if err != nil {
			return err
		}
		pid, _ = strconv.Atoi(out)
		// A browser that starts cold takes a while to map its window: wait
		// (bounded) until one shows, so the next observation sees the
		// browser, not the desktop as it was before the open.
		_, _ = m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", awaitBrowserScript}, User: m.o.User, Cwd: m.o.Home, Env: m.displayEnv(slot), MaxOutput: 1 << 10})
		return sleepCtx(ctx, shared.SettleOpenURL)
	})
	if err != nil {
		return nil, m.ctxErr(ctx, id, err)
	}
	return json.Marshal(map[string]any{"url": target, "pid": pid, "managed": false})
}

// awaitBrowserScript waits up to 30 s for a visible Chromium window on
// $DISPLAY (at once when one is up already); without Chromium (xdg-open)
// it does not wait.
const awaitBrowserScript = `command -v chromium >/dev/null || exit 0
timeout 30 xdotool search --sync --onlyvisible --class chromium >/dev/null 2>&1 || true`

// spawn starts argv detached on the screen's display and returns its pid.
func (m *Machine) spawn(ctx context.Context, s *screen, argv []string) (int, error) {
	m.mu.Lock()
	slot := s.slot
	m.mu.Unlock()
	script := `setsid "$@" >/dev/null 2>&1 </dev/null & echo $!`
	r, err := m.b.Exec(ctx, Cmd{Argv: append([]string{"sh", "-c", script, "sh"}, argv...), User: m.o.User, Cwd: m.o.Home,
		Env: m.displayEnv(slot)})
	if err != nil {
		return 0, err
	}
	if r.ExitCode != 0 {
		return 0, fmt.Errorf("start %s: exit %d: %s", argv[0], r.ExitCode, firstLine(r.Stderr))
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
	return pid, nil
}

func (m *Machine) displayEnv(slot int) map[string]string {
	return map[string]string{"DISPLAY": m.display(slot), "HOME": m.o.Home}
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errNeedsBotd answers what only botd does (window lists and actions
// through the window manager, the clipboard): nothing of the batch ran.
func errNeedsBotd(what string) error {
	return apiErr(http.StatusNotImplemented, shared.CodeUnavailable,
		"%s need botd (a computer on template open-bot); this sandbox's desktop is driven through commands only: use computer_act with pointer and keyboard actions instead", what)
}

// Windows implements machines.Machine: not on a command-driven desktop.
func (m *Machine) Windows(ctx context.Context, id, leaseID string) ([]shared.Window, error) {
	return nil, errNeedsBotd("window lists")
}

// Clipboard implements machines.Machine: not on a command-driven desktop.
func (m *Machine) Clipboard(ctx context.Context, id, leaseID string) (string, error) {
	return "", errNeedsBotd("the clipboard tools")
}

// SetClipboard implements machines.Machine: not on a command-driven
// desktop.
func (m *Machine) SetClipboard(ctx context.Context, id, leaseID, text string) error {
	return errNeedsBotd("the clipboard tools")
}

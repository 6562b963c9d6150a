package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/machines"
)

// LocalOptions configures the local provider: botd as a child of this worker,
// one per computer, on this host (root).
type LocalOptions struct {
	// DataDir holds computers/<ref>/{home,token,machine.json}. It and its
	// parents must be traversable by others (0755): a BOTD_HOME inside a
	// 0700 directory makes Codex's start fail.
	DataDir string
	// BotdBin is the botd executable.
	BotdBin string
	// DisplayBase is the first X display of slot 0 (default 100); slot k
	// uses DisplayBase + k*MaxScreens onwards.
	DisplayBase int
	// PortBase is the first loopback port of slot 0 (default 20000); slot k
	// uses PortBase + k*PortsPerSlot onwards (API, SOCKS, view and control).
	PortBase int
	// Slots caps the local computers on this host (default 32); a stopped
	// computer keeps its slot.
	Slots int
	// MaxScreens is each botd's MAX_SCREENS (default 4).
	MaxScreens int
	// IDBase is the first uid and gid of the computers' own users
	// (default DefaultLocalIDBase); they use LocalIDSpan ids from it, which
	// must lie outside every range useradd hands out (/etc/login.defs).
	IDBase int
	// ReadyTimeout bounds the wait for a started botd's health (default 90 s).
	ReadyTimeout time.Duration
	// Env is extra environment for every botd (e.g. CODEX_BIN,
	// CODEX_CONFIG_EXTRA_FILE). BOTD_TOKEN is never passed.
	Env []string
	// Log is the provider's logger (nop when nil).
	Log *zerolog.Logger
}

// PortsPerSlot is the number of ports one local computer holds: API, SOCKS,
// and a view and a control port per screen (x11vnc has no TCP port, nor
// Codex: botd talks to it over a pipe).
func (o LocalOptions) PortsPerSlot() int { return 2 + 2*o.MaxScreens }

// Local is the local provider. Its refs are the names of directories under
// DataDir/computers.
type Local struct {
	o   LocalOptions
	log zerolog.Logger

	lock *os.File // flocked: this worker owns DataDir/computers

	// mu guards procs and slot allocation (the machine.json files).
	mu    sync.Mutex
	procs map[string]*localProc
}

// localMeta is computers/<ref>/machine.json: what survives a worker restart.
type localMeta struct {
	ComputerID string `json:"computerId"`
	Slot       int    `json:"slot"`
	// Users are the computer's own users (nil: made before computers had
	// their own; the next start gives it some).
	Users *localUsers `json:"users,omitempty"`
}

// NewLocal returns the local provider.
func NewLocal(o LocalOptions) (*Local, error) {
	if o.DataDir == "" || !filepath.IsAbs(o.DataDir) {
		return nil, fmt.Errorf("local provider: DATA_DIR must be an absolute path, got %q", o.DataDir)
	}
	if o.BotdBin == "" {
		return nil, errors.New("local provider: no botd binary configured")
	}
	if o.DisplayBase <= 0 {
		o.DisplayBase = 100
	}
	if o.PortBase <= 0 {
		o.PortBase = 20000
	}
	if o.Slots <= 0 {
		o.Slots = 32
	}
	if o.MaxScreens <= 0 {
		o.MaxScreens = 4
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	if o.IDBase <= 0 {
		o.IDBase = DefaultLocalIDBase
	}
	if err := checkIDRange(o.IDBase, loginDefs()); err != nil {
		return nil, err
	}
	if top := o.PortBase + o.Slots*o.PortsPerSlot(); top > 65535 {
		return nil, fmt.Errorf("local provider: %d slots from port %d end past 65535", o.Slots, o.PortBase)
	}
	l := &Local{o: o, procs: map[string]*localProc{}, log: zerolog.Nop()}
	if o.Log != nil {
		l.log = o.Log.With().Str("component", "provider_local").Logger()
	}
	if err := l.prepareDataDir(); err != nil {
		return nil, err
	}
	// One worker per DATA_DIR: two would start two botds on one home. The
	// lock lives as long as the worker process.
	f, err := os.OpenFile(filepath.Join(l.computers(), ".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("local provider: another worker holds %s (%w)", l.computers(), err)
	}
	l.lock = f
	l.mu.Lock()
	l.reclaimLocked()
	l.mu.Unlock()
	return l, nil
}

// Describe: botd's own screens, stop keeps the home directory.
func (l *Local) Describe() Description {
	return Description{Kind: KindLocal, Capabilities: Capabilities{MultiScreen: true, Stop: true, Persistent: true}}
}

func (l *Local) computers() string       { return filepath.Join(l.o.DataDir, "computers") }
func (l *Local) dir(ref string) string   { return filepath.Join(l.computers(), ref) }
func (l *Local) home(ref string) string  { return filepath.Join(l.dir(ref), "home") }
func (l *Local) token(ref string) string { return filepath.Join(l.dir(ref), "token") }
func (l *Local) meta(ref string) string  { return filepath.Join(l.dir(ref), "machine.json") }
func (l *Local) pidFile(ref string) string {
	return filepath.Join(l.dir(ref), "botd.pid")
}

// endStale stops a botd that an earlier worker started on ref's home and
// that outlived it (Pdeathsig is per thread, not a promise): two botds on
// one home would corrupt it. The pid is believed only when that process's
// environment names this home.
func (l *Local) endStale(ref string) error {
	b, err := os.ReadFile(l.pidFile(ref))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return nil
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00BOTD_HOME="+l.home(ref)+"\x00")) {
		return nil
	}
	l.log.Warn().Str("ref", ref).Int("pid", pid).Msg("a botd of an earlier worker still runs on this home; stopping it")
	deadline := time.Now().Add(20 * time.Second)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for procAlive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(10 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// procAlive: pid runs and is not a zombie.
func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// checkRef refuses a ref that is not one of ours in shape (a path escape
// or another kind's ref).
func checkRef(ref string) error {
	i := strings.LastIndexByte(ref, '-')
	if i <= 0 || checkComputerID(ref) != nil || len(ref)-i-1 != 8 {
		return fmt.Errorf("%w: malformed ref", ErrGone)
	}
	return nil
}

// Provision makes the computer's directory, home, token file and slot; the
// machine starts at the first Reconnect.
func (l *Local) Provision(ctx context.Context, spec Spec) (string, error) {
	if err := checkComputerID(spec.ComputerID); err != nil {
		return "", err
	}
	if len(spec.BotdToken) < 16 {
		return "", errors.New("local provider: botd token must be at least 16 characters")
	}
	ref := machineName(spec.ComputerID)
	l.mu.Lock()
	defer l.mu.Unlock()
	slot, err := l.freeSlotLocked("")
	if err != nil {
		return "", err
	}
	// Root's, entered only by the computer's own users (its group): no
	// other computer's users reach its home, token or X cookies.
	if err := os.Mkdir(l.dir(ref), 0o700); err != nil {
		return "", fmt.Errorf("local provider: %w", err)
	}
	m := localMeta{ComputerID: spec.ComputerID, Slot: slot}
	fail := func(err error) (string, error) {
		if m.Users != nil {
			_ = m.Users.remove()
			_ = os.Remove(l.claimFile(m.Users.Index))
		}
		_ = os.RemoveAll(l.dir(ref))
		return "", fmt.Errorf("local provider: %w", err)
	}
	if err := writeSecret(l.token(ref), spec.BotdToken); err != nil {
		return fail(err)
	}
	if err := l.makeUsersLocked(ref, &m); err != nil {
		return fail(err)
	}
	// The home exists from now on: a machine whose home is missing has
	// lost it (see Reconnect).
	if err := os.Mkdir(l.home(ref), 0o755); err != nil {
		return fail(err)
	}
	l.log.Info().Str("ref", ref).Int("slot", slot).Str("desktop", m.Users.Desktop).Str("bot", m.Users.Bot).Msg("provisioned")
	return ref, nil
}

// makeUsersLocked gives m's computer users of its own: the first number
// no other computer here claims and whose names and ids nobody on the
// host has (another worker may take one meanwhile: then the next). The
// claim is written before the users are made, so a crash in between
// leaves a machine.json that Destroy cleans up after.
func (l *Local) makeUsersLocked(ref string, m *localMeta) error {
	l.reclaimLocked()
	claimed := map[int]bool{}
	if ents, err := os.ReadDir(l.claims()); err == nil {
		for _, e := range ents {
			if i, err := strconv.Atoi(e.Name()); err == nil {
				claimed[i] = true
			}
		}
	}
	entries, err := os.ReadDir(l.computers())
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == ref || !e.IsDir() {
			continue
		}
		if o, err := l.readMeta(e.Name()); err == nil && o.Users != nil {
			claimed[o.Users.Index] = true
		}
	}
	for i := 0; i < l.maxUsers(); i++ {
		u := l.usersFor(i)
		if claimed[i] || !u.free() {
			continue
		}
		m.Users = &u
		if err := l.writeClaimLocked(ref, u); err != nil {
			return err
		}
		if err := l.writeMetaLocked(ref, *m); err != nil {
			return err
		}
		err := u.create(l.home(ref), ref)
		if err != nil {
			m.Users = nil
			_ = os.Remove(l.claimFile(i))
		}
		if errors.Is(err, errIDTaken) {
			continue
		}
		if err != nil {
			return err
		}
		return l.secureDirLocked(ref, u)
	}
	m.Users = nil
	_ = l.writeMetaLocked(ref, *m)
	return fmt.Errorf("no free user ids left in %d-%d", l.o.IDBase, l.o.IDBase+LocalIDSpan-1)
}

// secureDirLocked makes the computer's directory root's, mode 0710, group
// its users' shared group: they pass through to the home, and nobody
// else (another computer's users included) enters it.
func (l *Local) secureDirLocked(ref string, u localUsers) error {
	fd, err := syscall.Open(l.dir(ref), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Fchown(fd, 0, u.GID); err != nil {
		return err
	}
	return syscall.Fchmod(fd, 0o710)
}

// ensureUsersLocked re-adopts the computer's users before botd starts: a
// restarted worker finds them in machine.json; users lost with the host's
// passwd file are made again with the same ids; a computer made before
// each had its own gets some, and what the host's shared desktop and bot
// owned in its home is handed over to them.
func (l *Local) ensureUsersLocked(ref string, m *localMeta) error {
	if m.Users == nil {
		if err := l.makeUsersLocked(ref, m); err != nil {
			return err
		}
		l.log.Warn().Str("ref", ref).Str("desktop", m.Users.Desktop).Str("bot", m.Users.Bot).Msg("a computer of the shared desktop and bot users: it has users of its own now")
		return chownTree(l.home(ref), *m.Users)
	}
	u := *m.Users
	if !u.present() {
		if !u.free() {
			return fmt.Errorf("the users of %s (%s, %s, %s) are not as made and their names or ids are taken: not starting it as someone else", ref, u.Desktop, u.Bot, u.Group)
		}
		if err := u.create(l.home(ref), ref); err != nil {
			return err
		}
		l.log.Warn().Str("ref", ref).Str("desktop", u.Desktop).Msg("the computer's users were gone; made again with their ids")
	}
	if missing(l.claimFile(u.Index)) {
		if err := l.writeClaimLocked(ref, u); err != nil {
			return err
		}
	}
	return l.secureDirLocked(ref, u)
}

// prepareDataDir makes DataDir/computers (0711) and refuses a DATA_DIR that
// others cannot traverse.
func (l *Local) prepareDataDir() error {
	if err := os.MkdirAll(l.computers(), 0o711); err != nil {
		return fmt.Errorf("local provider: %w", err)
	}
	// Others pass through (each computer's users to their own directory)
	// but do not list the computers.
	if err := os.Chmod(l.computers(), 0o711); err != nil {
		return fmt.Errorf("local provider: %w", err)
	}
	for p := l.computers(); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("local provider: %w", err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("local provider: %s (mode %o) is not traversable by others; botd's users could not reach their home and Codex would not start: chmod o+x it or use another DATA_DIR", p, st.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// writeSecret writes a root-only 0600 file, never following a link.
func writeSecret(path, secret string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(secret); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (l *Local) readMeta(ref string) (localMeta, error) {
	var m localMeta
	b, err := os.ReadFile(l.meta(ref))
	if errors.Is(err, fs.ErrNotExist) {
		return m, ErrGone
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("local provider: %s: %w", l.meta(ref), err)
	}
	return m, nil
}

func (l *Local) writeMetaLocked(ref string, m localMeta) error {
	b, _ := json.Marshal(m)
	tmp := l.meta(ref) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, l.meta(ref))
}

// slotLayout is where slot k's botd listens and draws.
type slotLayout struct {
	api, socks  int
	viewBase    int
	displayBase int
}

func (l *Local) layout(slot int) slotLayout {
	p := l.o.PortBase + slot*l.o.PortsPerSlot()
	return slotLayout{
		api: p, socks: p + 1,
		viewBase:    p + 2,
		displayBase: l.o.DisplayBase + slot*l.o.MaxScreens,
	}
}

// busy says why slot's ports or displays are in use right now ("" = free).
func (l *Local) busy(slot int) string {
	s := l.layout(slot)
	for p := s.api; p < s.api+l.o.PortsPerSlot(); p++ {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return fmt.Sprintf("port 127.0.0.1:%d is taken", p)
		}
		ln.Close()
	}
	for d := s.displayBase; d < s.displayBase+l.o.MaxScreens; d++ {
		if f := displayHeld(d); f != "" {
			return fmt.Sprintf("display :%d is in use (%s)", d, f)
		}
	}
	return ""
}

// displayHeld names what holds X display d ("" = free): a lock file that
// names a live process (or cannot be read as a plain file), or a socket
// that accepts a connection. An X server killed hard (its botd SIGKILLed,
// the server with it) leaves both behind; Xvfb takes such a display over,
// and they must not hold a slot forever.
func displayHeld(d int) string {
	lock := "/tmp/.X" + strconv.Itoa(d) + "-lock"
	// /tmp is everyone's: no following a link, no blocking on a FIFO.
	if f, err := os.OpenFile(lock, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0); err == nil {
		pid := lockPID(f)
		f.Close()
		if pid <= 0 || procAlive(pid) {
			return lock
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return lock
	}
	sock := "/tmp/.X11-unix/X" + strconv.Itoa(d)
	if st, err := os.Lstat(sock); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return sock
		}
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			return sock
		}
	}
	return ""
}

// lockPID is the pid an X lock file holds (0 when it is no plain file
// holding one).
func lockPID(f *os.File) int {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return 0
	}
	b := make([]byte, 64)
	n, _ := f.Read(b)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// freeSlotLocked picks a slot no other computer claims and whose ports and
// displays are free now; self is the ref asking (its own claim is ignored).
func (l *Local) freeSlotLocked(self string) (int, error) {
	claimed := map[int]bool{}
	entries, err := os.ReadDir(l.computers())
	if err != nil {
		return 0, fmt.Errorf("local provider: %w", err)
	}
	for _, e := range entries {
		if e.Name() == self || !e.IsDir() {
			continue
		}
		if m, err := l.readMeta(e.Name()); err == nil {
			claimed[m.Slot] = true
		}
	}
	var why []string
	for k := 0; k < l.o.Slots; k++ {
		if claimed[k] {
			continue
		}
		if reason := l.busy(k); reason != "" {
			why = append(why, fmt.Sprintf("slot %d: %s", k, reason))
			continue
		}
		return k, nil
	}
	if len(why) > 3 {
		why = why[:3]
	}
	return 0, fmt.Errorf("local provider: no free slot among %d (%d claimed by computers; %s)", l.o.Slots, len(claimed), strings.Join(why, "; "))
}

// Reconnect starts the computer's botd when it is not running and waits
// until it is healthy. ErrGone when its directory or its home is gone: a
// botd started again on a missing home would make an empty one, and the
// computer would go on without its files instead of being replaced from
// its checkpoint.
func (l *Local) Reconnect(ctx context.Context, ref string, _ Spec) (Machine, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	tokenB, err := os.ReadFile(l.token(ref))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	token := strings.TrimSpace(string(tokenB))
	if missing(l.home(ref)) {
		return nil, fmt.Errorf("%w: the home of %s is gone", ErrGone, ref)
	}

	l.mu.Lock()
	p := l.procs[ref]
	if p == nil || p.fatal() != nil {
		p, err = l.startLocked(ref)
		if err != nil {
			l.mu.Unlock()
			return nil, err
		}
	}
	l.mu.Unlock()

	c := machines.NewBotd("http://"+p.api, token)
	if err := awaitHealthy(ctx, c, l.o.ReadyTimeout, p.fatal); err != nil {
		return nil, fmt.Errorf("local provider: computer %s: %w", ref, err)
	}
	return c, nil
}

// startLocked starts ref's botd under supervision, moving it to a free
// slot first when something else took its ports or displays.
func (l *Local) startLocked(ref string) (*localProc, error) {
	m, err := l.readMeta(ref)
	if err != nil {
		return nil, err
	}
	if err := l.endStale(ref); err != nil {
		return nil, err
	}
	if err := l.ensureUsersLocked(ref, &m); err != nil {
		return nil, fmt.Errorf("local provider: computer %s: users: %w", ref, err)
	}
	if reason := l.busy(m.Slot); reason != "" {
		slot, err := l.freeSlotLocked(ref)
		if err != nil {
			return nil, fmt.Errorf("%s, and %w", reason, err)
		}
		l.log.Warn().Str("ref", ref).Int("from", m.Slot).Int("to", slot).Str("reason", reason).Msg("moving to another slot")
		m.Slot = slot
		if err := l.writeMetaLocked(ref, m); err != nil {
			return nil, fmt.Errorf("local provider: %w", err)
		}
	}
	s := l.layout(m.Slot)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"LANG=C.UTF-8",
		"BOTD_HOME=" + l.home(ref),
		"BOTD_TOKEN_FILE=" + l.token(ref),
		"BOTD_LISTEN=127.0.0.1:" + strconv.Itoa(s.api),
		"SOCKS_LISTEN=127.0.0.1:" + strconv.Itoa(s.socks),
		"DISPLAY_BASE=" + strconv.Itoa(s.displayBase),
		"VIEW_PORT_BASE=" + strconv.Itoa(s.viewBase),
		"MAX_SCREENS=" + strconv.Itoa(l.o.MaxScreens),
		"BOTD_DESKTOP_USER=" + m.Users.Desktop,
		"BOTD_BOT_USER=" + m.Users.Bot,
		"BOTD_BOTS_GROUP=" + m.Users.Group,
	}
	for _, kv := range l.o.Env {
		if !strings.HasPrefix(kv, "BOTD_TOKEN=") && !strings.HasPrefix(kv, "BOTD_DESKTOP_USER=") && !strings.HasPrefix(kv, "BOTD_BOT_USER=") && !strings.HasPrefix(kv, "BOTD_BOTS_GROUP=") {
			env = append(env, kv)
		}
	}
	p := &localProc{
		ref: ref, bin: l.o.BotdBin, env: env, api: "127.0.0.1:" + strconv.Itoa(s.api), pidFile: l.pidFile(ref), home: l.home(ref),
		stop: make(chan struct{}), done: make(chan struct{}), log: l.log.With().Str("ref", ref).Logger(),
	}
	if err := p.startOnce(); err != nil {
		return nil, fmt.Errorf("local provider: start botd %s: %w", l.o.BotdBin, err)
	}
	go p.supervise()
	l.procs[ref] = p
	l.log.Info().Str("ref", ref).Int("slot", m.Slot).Msg("botd started")
	return p, nil
}

// Stop stops the computer's botd (SIGTERM, then SIGKILL after 20 s); the home
// stays. Stopping a stopped computer is fine; ErrGone when it is gone.
func (l *Local) Stop(ctx context.Context, ref string) error {
	if err := checkRef(ref); err != nil {
		return err
	}
	if _, err := os.Stat(l.dir(ref)); errors.Is(err, fs.ErrNotExist) {
		return ErrGone
	}
	l.mu.Lock()
	p := l.procs[ref]
	delete(l.procs, ref)
	l.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.terminate(ctx)
}

// Destroy stops the computer and removes its directory, home included.
// Destroying a gone computer is fine.
func (l *Local) Destroy(ctx context.Context, ref string) error {
	if err := l.Stop(ctx, ref); err != nil && !errors.Is(err, ErrGone) {
		return err
	}
	if err := checkRef(ref); err != nil {
		return nil
	}
	// The users go first (with whatever their processes left in /tmp and
	// the like), so a crash before the directory is gone leaves a
	// machine.json naming them for the next Destroy.
	if m, err := l.readMeta(ref); err == nil && m.Users != nil {
		u := *m.Users
		killAll(u.uids())
		err := errors.Join(removeOwned(u.uids(), u.gids()), u.remove())
		if err != nil {
			return fmt.Errorf("local provider: remove the users of %s: %w", ref, err)
		}
		_ = os.Remove(l.claimFile(u.Index))
	}
	// RemoveAll unlinks symlinks without following them; a second pass
	// catches files a dying process wrote meanwhile.
	err := os.RemoveAll(l.dir(ref))
	if err != nil {
		err = os.RemoveAll(l.dir(ref))
	}
	if err != nil {
		return fmt.Errorf("local provider: remove %s: %w", ref, err)
	}
	l.log.Info().Str("ref", ref).Msg("destroyed")
	return nil
}

// Users names the desktop and bot users of ref's computer ("" when it has
// none of its own yet).
func (l *Local) Users(ref string) (desktop, bot string) {
	m, err := l.readMeta(ref)
	if err != nil || m.Users == nil {
		return "", ""
	}
	return m.Users.Desktop, m.Users.Bot
}

// List returns every computer this provider holds on disk.
func (l *Local) List(context.Context) ([]Listed, error) {
	entries, err := os.ReadDir(l.computers())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Listed
	for _, e := range entries {
		if !e.IsDir() || checkRef(e.Name()) != nil {
			continue
		}
		m, err := l.readMeta(e.Name())
		if err != nil {
			continue
		}
		p := l.procs[e.Name()]
		out = append(out, Listed{Ref: e.Name(), ComputerID: m.ComputerID, Running: p != nil && p.fatal() == nil})
	}
	return out, nil
}

// Close stops every botd this provider started and releases DATA_DIR (the
// worker is exiting).
func (l *Local) Close(ctx context.Context) error {
	l.mu.Lock()
	procs := l.procs
	l.procs = map[string]*localProc{}
	l.mu.Unlock()
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.terminate(ctx))
	}
	if l.lock != nil {
		errs = append(errs, l.lock.Close())
	}
	return errors.Join(errs...)
}

// PID is the process id of ref's running botd (0 when not running), for
// measurements.
func (l *Local) PID(ref string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.procs[ref]; p != nil {
		return p.pid()
	}
	return 0
}

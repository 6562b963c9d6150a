package box

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// Kind is the provider kind.
const Kind = "box"

// DefaultAPIURL is Box's service (never tried from here: every test runs
// against the emulator).
const DefaultAPIURL = "https://box.ascii.dev"

// DefaultTTL is a box's life after its last refresh.
const DefaultTTL = 2 * time.Hour

// desktopUser is the box's user (its home /home/user).
const desktopUser = "user"

// NewKey seals a Box API key (vendorkit.Key: never rendered).
func NewKey(plain string, s *secret.Sealer) (*vendorkit.Key, error) {
	if !strings.HasPrefix(strings.TrimSpace(plain), "box_") {
		return nil, errors.New("box: BOX_API_KEY is not a Box key (box_…)")
	}
	return vendorkit.NewKey(plain, s, "box", "BOX_API_KEY")
}

// KeyFromEnv reads BOX_API_KEY or the file BOX_API_KEY_FILE names.
func KeyFromEnv(getenv func(string) string) (string, error) {
	return vendorkit.KeyFromEnv(getenv, "BOX_API_KEY")
}

// Options configures a Provider.
type Options struct {
	// APIURL is Box's URL (BOX_API_URL; DefaultAPIURL when empty): the
	// API is at APIURL + /api/box/v1.
	APIURL string
	// Key is the API key (required).
	Key *vendorkit.Key
	// TTL is a box's life after its last refresh (DefaultTTL; Box takes
	// 60 s..24 h).
	TTL time.Duration
	// RefreshEvery is how often the refresher looks (TTL/4 when zero): a
	// box used since its last look gets a new TTL.
	RefreshEvery time.Duration
	// ReadyTimeout bounds bringing a box's desktop up (2 min).
	ReadyTimeout time.Duration
	// HTTPClient makes the API calls (a 90 s client when nil).
	HTTPClient *http.Client
	// Transport carries the desktop forwarder's traffic (HTTPClient's, or
	// http.DefaultTransport).
	Transport http.RoundTripper
	// Env is the worker's machine environment (MODEL_UPSTREAM_URL and
	// MODEL_API_KEY reach the desktop machine's agent).
	Env []string
	// NoHeldStream makes desktop machines observe by command (and type
	// through xdotool) instead of through a held RFB session per screen
	// (WORKER_DESKTOP_HELD_STREAM=0; held streams are the default).
	NoHeldStream bool
	// Log logs (a disabled logger when nil). The key never reaches it.
	Log *zerolog.Logger
	// CommandWait is how long one command call waits for a command before
	// the command is polled with further calls (40 s; whole seconds,
	// 1..50: each call is at most 60 s).
	CommandWait time.Duration
	// Attempts and Backoff tune the retries on 429 and 5xx (4, 500 ms).
	Attempts int
	Backoff  time.Duration
}

// Provider makes and drives boxes.
type Provider struct {
	o   Options
	api *api
	log zerolog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	closed   bool
}

// New checks o.
func New(o Options) (*Provider, error) {
	if o.Key == nil {
		return nil, errors.New("box: no API key (BOX_API_KEY or BOX_API_KEY_FILE)")
	}
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < time.Minute || o.TTL > 24*time.Hour {
		return nil, fmt.Errorf("box: a TTL is 60 s..24 h, not %s", o.TTL)
	}
	if o.RefreshEvery <= 0 {
		o.RefreshEvery = o.TTL / 4
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 90 * time.Second}
	}
	if o.Transport == nil {
		o.Transport = o.HTTPClient.Transport
		if o.Transport == nil {
			o.Transport = http.DefaultTransport
		}
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	log := zerolog.Nop()
	if o.Log != nil {
		log = *o.Log
	}
	u := strings.TrimRight(o.APIURL, "/")
	if !strings.HasSuffix(u, Base) {
		u += Base
	}
	return &Provider{o: o, log: log, sessions: map[string]*session{},
		api: &api{base: u, key: o.Key, hc: o.HTTPClient, attempts: o.Attempts, backoff: o.Backoff}}, nil
}

func (p *Provider) ttl() int { return int(p.o.TTL / time.Second) }

// wait is CommandWait in seconds.
func (p *Provider) wait() int {
	if p.o.CommandWait <= 0 {
		return waitWindow
	}
	return min(50, max(1, int(p.o.CommandWait/time.Second)))
}

var boxID = regexp.MustCompile(`^bx_[a-z0-9]{8}$`)

// ParseRef checks a ref (the box id).
func ParseRef(ref string) (string, error) {
	if !boxID.MatchString(ref) {
		return "", fmt.Errorf("box: %q is not a box id", ref)
	}
	return ref, nil
}

// Provision makes a box (running, with the TTL) and returns its id.
func (p *Provider) Provision(ctx context.Context) (string, error) {
	b, err := p.api.create(ctx, p.ttl())
	if err != nil {
		return "", err
	}
	p.log.Info().Str("box", b.ID).Msg("box created")
	return b.ID, nil
}

// session is this provider's use of one running box.
type session struct {
	p   *Provider
	id  string
	act vendorkit.Activity

	mu   sync.Mutex
	m    *desktop.Machine
	fwd  *vendorkit.Forwarder
	done chan struct{}
	once sync.Once
}

// explainErr says, for an error of a call on the box, what state the box
// is in when that is why.
func (s *session) explainErr(err error) error {
	switch {
	case errors.Is(err, ErrNotRunning):
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b, gerr := s.p.api.get(ctx, s.id)
		if gerr == nil && b.ArchivedReason == "ttl_expired" {
			return fmt.Errorf("box %s is archived: its TTL ran out while the computer was idle (start the computer to resume it): %w", s.id, err)
		}
		return fmt.Errorf("box %s is archived (stopped): start the computer to resume it: %w", s.id, err)
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("box %s no longer exists (deleted): recover the computer to replace it: %w", s.id, err)
	}
	return err
}

// end ends the session: its machine, its forwarder and its refresher.
func (s *session) end() {
	s.once.Do(func() {
		close(s.done)
		s.mu.Lock()
		m, f := s.m, s.fwd
		s.m, s.fwd = nil, nil
		s.mu.Unlock()
		if m != nil {
			_ = m.Close()
		}
		if f != nil {
			f.Close()
		}
	})
}

// refresh gives the box a new TTL each RefreshEvery while it is in use
// (its commands, an open desktop stream); an idle box is left to its TTL.
func (s *session) refresh() {
	t := time.NewTicker(s.p.o.RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.mu.Lock()
			f := s.fwd
			s.mu.Unlock()
			inUse := s.act.Active(now, s.p.o.RefreshEvery) || (f != nil && f.InUse(now, s.p.o.RefreshEvery))
			if !inUse {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			b, err := s.p.api.resume(ctx, s.id, s.p.ttl())
			cancel()
			switch {
			case err != nil:
				s.p.log.Warn().Str("box", s.id).Err(err).Msg("box TTL refresh failed")
			default:
				s.p.log.Debug().Str("box", s.id).Time("expiresAt", b.ExpiresAt).Msg("box TTL refreshed")
			}
		}
	}
}

// desktopForwarder is the session's local entry to the box's desktop
// page, asked for with ?vnc=1 and polled while it provisions. The desktop
// URL (its secret) stays in the worker: the forwarder is in-process (no
// listener), handed only to the worker's own VNC relay.
func (s *session) desktopForwarder(ctx context.Context) (*vendorkit.Forwarder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return nil, fmt.Errorf("box: box %s: the session ended (the computer was stopped)", s.id)
	default:
	}
	if s.fwd != nil {
		return s.fwd, nil
	}
	var u string
	for i := 0; ; i++ {
		var prov bool
		var err error
		u, prov, err = s.p.api.desktop(ctx, s.id)
		if err != nil {
			return nil, s.explainErr(err)
		}
		if !prov && u != "" {
			break
		}
		if i > 300 {
			return nil, fmt.Errorf("box: box %s: the desktop is still provisioning", s.id)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	target, err := desktopTarget(u)
	if err != nil {
		return nil, err
	}
	f := vendorkit.NewForwarder(target, s.p.o.Transport, func(ctx context.Context) (int, string, bool) {
		b, err := s.p.api.get(ctx, s.id)
		switch {
		case errors.Is(err, ErrNotFound):
			return http.StatusGone, "box " + s.id + " no longer exists", true
		case err == nil && b.Status != "running":
			return http.StatusServiceUnavailable, "box " + s.id + " is archived (" + b.ArchivedReason + ")", true
		}
		return http.StatusBadGateway, "the box's desktop does not answer", false
	})
	s.fwd = f
	return f, nil
}

// desktopUp brings display :0 up when it is not (Box's boxes come with it
// running) and prints when it came up (unix seconds).
const desktopUp = `set -u
dir="${TMPDIR:-/tmp}/open-bot-desktop/box"; mkdir -p "$dir"
up() { xdpyinfo -display :0 >/dev/null 2>&1; }
if ! up; then
  rm -f /tmp/.X0-lock /tmp/.X11-unix/X0 2>/dev/null
  setsid Xvfb :0 -ac -screen 0 "$1x$2x24" -retro -dpi 96 -nolisten tcp >"$dir/xvfb.log" 2>&1 </dev/null &
  i=0; while ! up; do i=$((i+1)); [ $i -gt 150 ] && { echo "Xvfb :0 did not come up" >&2; exit 1; }; sleep 0.1; done
  DISPLAY=:0 setsid startxfce4 >"$dir/xfce.log" 2>&1 </dev/null &
  i=0; while [ "$(DISPLAY=:0 xprop -root _NET_CLIENT_LIST 2>/dev/null | tr ',' '\n' | grep -c 0x)" -lt 2 ]; do i=$((i+1)); [ $i -gt 300 ] && break; sleep 0.1; done
fi
stat -c %Y /tmp/.X11-unix/X0 2>/dev/null || true`

// Reconnect returns the desktop machine on box ref: an archived box is
// resumed (same id), a running one gets a new TTL. ErrNotFound when the
// box is gone.
func (p *Provider) Reconnect(ctx context.Context, ref string) (*desktop.Machine, error) {
	id, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("box: the provider is closed")
	}
	s := p.sessions[id]
	p.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		m := s.m
		s.mu.Unlock()
		if m != nil {
			// Still running? A box archived behind our back ends the session.
			b, err := p.api.get(ctx, id)
			if err == nil && b.Status == "running" {
				s.act.Used()
				return m, nil
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return nil, err
			}
			p.drop(id, s)
			if errors.Is(err, ErrNotFound) {
				return nil, fmt.Errorf("box %s no longer exists: %w", id, err)
			}
		}
	}
	b, err := p.api.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.Status != "running" {
		p.log.Info().Str("box", id).Str("reason", b.ArchivedReason).Msg("resuming an archived box")
	}
	// Resume: an archived box runs again; a running one gets a new TTL.
	if b, err = p.api.resume(ctx, id, p.ttl()); err != nil {
		return nil, err
	}
	s = &session{p: p, id: id, done: make(chan struct{})}
	release := s.act.Hold()
	defer release()
	bk := &cmdBackend{s: s, user: desktopUser}
	uctx, cancel := context.WithTimeout(ctx, p.o.ReadyTimeout)
	defer cancel()
	res, err := bk.Exec(uctx, desktop.Cmd{Argv: []string{"sh", "-c", desktopUp, "sh", "1280", "800"}, MaxOutput: 4 << 10})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, firstLine(string(res.Stderr)))
	}
	if err != nil {
		return nil, fmt.Errorf("box: box %s: display :0: %w", id, err)
	}
	booted := time.Now()
	if n, perr := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64); perr == nil && n > 0 {
		booted = time.Unix(n, 0)
	}
	m, err := desktop.New(desktop.Options{Backend: bk, User: desktopUser, Width: 1280, Height: 800, MaxScreens: 1,
		BootedAt: booted, HeldStream: !p.o.NoHeldStream, Log: p.log})
	if err != nil {
		return nil, err
	}
	s.m = m
	p.mu.Lock()
	if old := p.sessions[id]; old != nil {
		// Another reconnect made one first: keep one machine per box.
		p.mu.Unlock()
		s.end()
		old.mu.Lock()
		om := old.m
		old.mu.Unlock()
		if om != nil {
			return om, nil
		}
		return nil, fmt.Errorf("box: box %s: a concurrent reconnect failed", id)
	}
	p.sessions[id] = s
	p.mu.Unlock()
	go s.refresh()
	p.log.Info().Str("box", id).Time("expiresAt", b.ExpiresAt).Msg("box desktop machine ready")
	return m, nil
}

// drop ends s if it is still box id's session.
func (p *Provider) drop(id string, s *session) {
	p.mu.Lock()
	if p.sessions[id] == s {
		delete(p.sessions, id)
	}
	p.mu.Unlock()
	s.end()
}

func (p *Provider) dropID(id string) {
	p.mu.Lock()
	s := p.sessions[id]
	delete(p.sessions, id)
	p.mu.Unlock()
	if s != nil {
		s.end()
	}
}

// Stop archives the box (Box snapshots it first); its machine ends here.
func (p *Provider) Stop(ctx context.Context, ref string) error {
	id, err := ParseRef(ref)
	if err != nil {
		return err
	}
	p.dropID(id)
	_, err = p.api.stop(ctx, id)
	return err
}

// Destroy deletes the box.
func (p *Provider) Destroy(ctx context.Context, ref string) error {
	id, err := ParseRef(ref)
	if err != nil {
		return err
	}
	p.dropID(id)
	return p.api.delete(ctx, id)
}

// Listed is a box as List sees it.
type Listed struct {
	Ref     string
	Running bool
}

// List lists the account's boxes (Box has no labels: reconcile matches
// them by ref).
func (p *Provider) List(ctx context.Context) ([]Listed, error) {
	bs, err := p.api.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(bs))
	for _, b := range bs {
		out = append(out, Listed{Ref: b.ID, Running: b.Status == "running"})
	}
	return out, nil
}

// Get is box ref as the API answers it.
func (p *Provider) Get(ctx context.Context, ref string) (Box, error) {
	id, err := ParseRef(ref)
	if err != nil {
		return Box{}, err
	}
	return p.api.get(ctx, id)
}

// Close ends every session (the boxes keep running until their TTL).
func (p *Provider) Close() {
	p.mu.Lock()
	p.closed = true
	ss := p.sessions
	p.sessions = map[string]*session{}
	p.mu.Unlock()
	for _, s := range ss {
		s.end()
	}
}

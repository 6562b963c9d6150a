// Package e2b is the E2B provider's adapter (CONTROL-PLANE.md, Providers;
// STYLE.md, Vendor adapters): computers as sandboxes on E2B's published API
// (spec/), or on any cloud or emulator that speaks it — only the base URLs
// and the key differ, read from the variables the vendor's SDKs read
// (E2B_API_URL, E2B_DOMAIN, E2B_SANDBOX_URL, E2B_API_KEY).
//
// Mode "open-bot" (a template built from our computer image): the sandbox
// runs botd; the adapter writes botd's token and the model key as root-only
// files through envd, starts botd when it is not running and reaches it on
// port 7000 through the vendor's port routing with the traffic token. The
// machine it returns is botd's, so every feature works there.
//
// Mode "desktop" (E2B's stock desktop template): no botd; ReconnectDesktop
// brings the sandbox's display :0 up as E2B's desktop SDK does and returns
// the command-driven desktop machine (machines/desktop) on an envd backend
// (desktop_backend.go): more screens are displays :1, :2, … started through
// commands, their noVNC ports reached through forwarders like botd's.
//
// Lifecycle: create from a template with metadata naming the computer;
// connect (which resumes a paused sandbox) on every Reconnect; pause as
// Stop; kill as Destroy; the timeout refreshed while the computer is in use
// and left to lapse (auto-pause) when idle; list by metadata to reconcile.
//
// The package does not import providers (the providers glue imports it):
// its refs, specs and listings are its own types, and ErrNotFound is what
// the glue turns into providers.ErrGone.
package e2b

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Kind is the provider kind's name.
const Kind = "e2b"

// Defaults, as the vendor's SDKs have them.
const (
	DefaultAPIURL   = "https://api.e2b.app"
	DefaultDomain   = "e2b.app"
	DefaultTemplate = "open-bot"
	// DesktopTemplate is the vendor's stock desktop (the command-driven
	// mode).
	DesktopTemplate = "desktop"
)

// Metadata keys on every sandbox this provider makes.
const (
	metaMarker   = "open-bot"
	metaComputer = "open-bot-computer"
	metaMachine  = "open-bot-machine"
	metaTemplate = "open-bot-template"
)

// In the computer image (images/computer/Dockerfile): botd's port and
// binary, and where its root-only secrets go.
const (
	botdPort      = 7000
	botdBin       = "/opt/botd/botd"
	secretsDir    = "/run/secrets"
	tokenPath     = secretsDir + "/botd_token"
	modelKeyPath  = secretsDir + "/model_api_key"
	botdTag       = "botd"
	rootUser      = "root"
	defaultScreen = 4
)

// Options configures the provider.
type Options struct {
	// APIURL is the control plane (E2B_API_URL, default https://api.e2b.app).
	APIURL string
	// Domain is the sandboxes' domain when an answer names none
	// (E2B_DOMAIN, default e2b.app).
	Domain string
	// SandboxURL, when set, reaches every sandbox port through one URL with
	// the E2b-Sandbox-Id/E2b-Sandbox-Port headers (E2B_SANDBOX_URL).
	SandboxURL string
	// Key is the API key, sealed.
	Key *Key
	// Template is the template new computers get (E2B_TEMPLATE, default
	// open-bot); "desktop" is the vendor's stock desktop.
	Template string
	// Timeout is the sandbox's life after its last use (E2B_TIMEOUT_SECONDS,
	// default 10 min): the refresher extends it while the computer is used,
	// and past it an idle sandbox pauses (autoPause).
	Timeout time.Duration
	// ReadyTimeout bounds the wait for botd's health (default 180 s).
	ReadyTimeout time.Duration
	// MaxScreens is botd's MAX_SCREENS (default 4).
	MaxScreens int
	// Env is what every botd gets from the worker (providers' machine
	// env: MODEL_UPSTREAM_URL, MODEL_API_KEY, …); MODEL_API_KEY goes in as a
	// root-only file, never an environment variable.
	Env []string
	// HTTPClient is the control plane's client (default: 30 s timeout).
	HTTPClient *http.Client
	// Transport carries sandbox traffic (envd, botd); default
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Retries (default 4) and Backoff (default 500 ms, capped at 10 s):
	// the bounded retries of a 429 or a 5xx.
	Retries int
	Backoff time.Duration
	// NoHeldStream makes desktop machines observe by command (and type
	// through xdotool) instead of through a held RFB session per screen
	// (WORKER_DESKTOP_HELD_STREAM=0; held streams are the default).
	NoHeldStream bool
	// Log is the provider's logger (nop when nil).
	Log *zerolog.Logger
}

// Provider is the e2b kind.
type Provider struct {
	o   Options
	api *api
	log zerolog.Logger

	// mu guards sessions.
	mu       sync.Mutex
	sessions map[string]*session
}

// New returns the provider. It does not call the API.
func New(o Options) (*Provider, error) {
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	o.APIURL = strings.TrimRight(o.APIURL, "/")
	if u, err := url.Parse(o.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("E2B_API_URL: want http(s)://host, got %q", o.APIURL)
	}
	if o.SandboxURL != "" {
		if u, err := url.Parse(o.SandboxURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("E2B_SANDBOX_URL: want http(s)://host, got %q", o.SandboxURL)
		}
	}
	if o.Domain == "" {
		o.Domain = DefaultDomain
	}
	if o.Template == "" {
		o.Template = DefaultTemplate
	}
	if o.Key == nil {
		return nil, errors.New("e2b provider: no API key: set E2B_API_KEY or E2B_API_KEY_FILE")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 180 * time.Second
	}
	if o.MaxScreens <= 0 {
		o.MaxScreens = defaultScreen
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Retries <= 0 {
		o.Retries = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	p := &Provider{o: o, log: zerolog.Nop(), sessions: map[string]*session{}}
	if o.Log != nil {
		p.log = o.Log.With().Str("component", "provider_e2b").Logger()
	}
	p.api = &api{base: o.APIURL, key: o.Key, hc: o.HTTPClient, retry: vendorkit.Retry{
		Retries: o.Retries, Backoff: o.Backoff, MaxBackoff: 10 * time.Second, Sleep: vendorkit.SleepCtx}}
	return p, nil
}

// DefaultTemplate is the template a computer that names none gets
// (Options.Template: E2B_TEMPLATE, open-bot unless set).
func (p *Provider) DefaultTemplate() string { return p.o.Template }

// Spec is what Provision and Reconnect need of a computer.
type Spec struct {
	ComputerID string
	BotdToken  string
	// Template overrides Options.Template for this computer ("" keeps it).
	Template string
}

// Ref is the provider's opaque providerRef, as JSON.
type Ref struct {
	SandboxID string `json:"sandboxID"`
	Template  string `json:"template"`
}

func (r Ref) String() string { b, _ := json.Marshal(r); return string(b) }

// ParseRef reads a ref; a malformed one is ErrNotFound (there is no such
// sandbox to reach).
func ParseRef(s string) (Ref, error) {
	var r Ref
	if err := json.Unmarshal([]byte(s), &r); err != nil || !sandboxIDPattern.MatchString(r.SandboxID) {
		return Ref{}, fmt.Errorf("%w: malformed ref", ErrNotFound)
	}
	return r, nil
}

var (
	sandboxIDPattern  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	computerIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
)

// Desktop reports whether template is the command-driven mode.
func Desktop(template string) bool { return template == DesktopTemplate }

// Provision creates the sandbox. Reconnect installs the secrets and starts
// botd.
func (p *Provider) Provision(ctx context.Context, spec Spec) (string, error) {
	if !computerIDPattern.MatchString(spec.ComputerID) {
		return "", fmt.Errorf("computer id %q: want 1-63 of [a-z0-9_-], starting with a letter or digit", spec.ComputerID)
	}
	if len(spec.BotdToken) < 16 {
		return "", errors.New("e2b provider: botd token must be at least 16 characters")
	}
	tpl := spec.Template
	if tpl == "" {
		tpl = p.o.Template
	}
	machine := machineName(spec.ComputerID)
	s, err := p.api.create(ctx, newSandbox{
		TemplateID: tpl, Timeout: seconds(p.o.Timeout), AutoPause: true, Secure: true,
		Metadata: map[string]string{metaMarker: "computer", metaComputer: spec.ComputerID, metaMachine: machine, metaTemplate: tpl},
		Network:  &networkConfig{AllowPublicTraffic: false},
	})
	if err != nil {
		return "", err
	}
	ref := Ref{SandboxID: s.SandboxID, Template: tpl}
	p.log.Info().Str("sandbox", s.SandboxID).Str("machine", machine).Str("template", tpl).Msg("provisioned")
	return ref.String(), nil
}

// Reconnect connects to the sandbox (resuming it when paused), starts botd
// when it is not running and waits until botd answers. The client it
// returns reaches botd through a forwarder on 127.0.0.1. ErrNotFound when
// the sandbox is gone.
func (p *Provider) Reconnect(ctx context.Context, ref string, spec Spec) (*client.Client, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if Desktop(r.Template) {
		return nil, fmt.Errorf("e2b provider: sandbox %s is the vendor's desktop: it has no botd (ReconnectDesktop drives it)", r.SandboxID)
	}
	if len(spec.BotdToken) < 16 {
		return nil, errors.New("e2b provider: no botd token is kept for this computer")
	}
	sb, resumed, err := p.api.connect(ctx, r.SandboxID, p.o.Timeout)
	if err != nil {
		return nil, err
	}
	if resumed {
		p.log.Info().Str("sandbox", r.SandboxID).Msg("resumed a paused sandbox")
	}
	sess, err := p.session(sb)
	if err != nil {
		return nil, err
	}
	defer sess.hold()()
	running, err := sess.botdRunning(ctx)
	if err != nil {
		return nil, fmt.Errorf("e2b provider: sandbox %s: %w", r.SandboxID, err)
	}
	if !running {
		if err := sess.startBotd(ctx, spec.BotdToken, p.o.Env, p.o.MaxScreens); err != nil {
			return nil, fmt.Errorf("e2b provider: sandbox %s: %w", r.SandboxID, err)
		}
		p.log.Info().Str("sandbox", r.SandboxID).Msg("started botd")
	}
	c := client.New(sess.fwd.URL(), spec.BotdToken, &http.Client{Transport: sess.fwd}) // each call has its own deadline
	if err := p.awaitHealthy(ctx, sess, c); err != nil {
		return nil, fmt.Errorf("e2b provider: sandbox %s: %w", r.SandboxID, err)
	}
	// A reconnect is use: the sandbox lives a whole Timeout from now (botd
	// may have taken a while to start), and the refresher sees it used.
	sess.fwd.touch()
	if err := p.api.setTimeout(ctx, r.SandboxID, p.o.Timeout); err != nil {
		return nil, err
	}
	return c, nil
}

// awaitHealthy polls botd's /health through the forwarder until ok, until
// ReadyTimeout, or until botd's process is gone.
func (p *Provider) awaitHealthy(ctx context.Context, sess *session, c *client.Client) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.o.ReadyTimeout)
	defer cancel()
	last := "no answer yet"
	var lastCheck time.Time
	for {
		hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := c.Health(hctx)
		hcancel()
		switch {
		case err == nil && h.OK:
			return nil
		case err == nil:
			last = fmt.Sprintf("health ok:false (agent %s)", h.Agent)
		case ctx.Err() != nil:
		default:
			if client.CodeOf(err) == "unauthorized" {
				return fmt.Errorf("botd refuses the token this worker holds for it: %w", err)
			}
			last = err.Error()
		}
		if time.Since(lastCheck) > 2*time.Second {
			lastCheck = time.Now()
			if ok, err := sess.botdRunning(ctx); err == nil && !ok {
				return fmt.Errorf("botd exited while starting (last health: %s)", last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("botd not healthy after %s: %s", time.Since(start).Round(time.Millisecond), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop pauses the sandbox (its memory and disk kept; connect resumes it).
// Pausing a paused sandbox is fine; ErrNotFound when it is gone.
func (p *Provider) Stop(ctx context.Context, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return err
	}
	p.drop(r.SandboxID)
	err = p.api.pause(ctx, r.SandboxID)
	if errors.Is(err, ErrConflict) {
		d, gerr := p.api.get(ctx, r.SandboxID)
		if gerr == nil && d.State == "paused" {
			return nil
		}
		if gerr != nil {
			return gerr
		}
	}
	return err
}

// Destroy kills the sandbox. Destroying a gone sandbox is fine.
func (p *Provider) Destroy(ctx context.Context, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return nil
	}
	p.drop(r.SandboxID)
	err = p.api.kill(ctx, r.SandboxID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err == nil {
		p.log.Info().Str("sandbox", r.SandboxID).Msg("destroyed")
	}
	return err
}

// Listed is one sandbox this provider made.
type Listed struct {
	Ref        string
	ComputerID string
	Running    bool
}

// List returns the sandboxes, running or paused, whose metadata marks them
// as open-bot computers.
func (p *Provider) List(ctx context.Context) ([]Listed, error) {
	items, err := p.api.list(ctx, map[string]string{metaMarker: "computer"})
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(items))
	for _, s := range items {
		if s.Metadata[metaComputer] == "" {
			continue
		}
		tpl := s.Metadata[metaTemplate]
		if tpl == "" {
			tpl = s.TemplateID
		}
		out = append(out, Listed{Ref: Ref{SandboxID: s.SandboxID, Template: tpl}.String(),
			ComputerID: s.Metadata[metaComputer], Running: s.State == "running"})
	}
	return out, nil
}

// Close ends every forwarder and refresher (the sandboxes then lapse by
// their timeout).
func (p *Provider) Close() {
	p.mu.Lock()
	ss := p.sessions
	p.sessions = map[string]*session{}
	p.mu.Unlock()
	for _, s := range ss {
		s.close()
	}
}

func (p *Provider) drop(id string) {
	p.mu.Lock()
	s := p.sessions[id]
	delete(p.sessions, id)
	p.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// session is what a reconnected sandbox has on this side: its envd client,
// its forwarder and its timeout refresher.
type session struct {
	p     *Provider
	id    string
	envd  *envdClient
	fwd   *forwarder
	done  chan struct{}
	once  sync.Once
	token string // the envd access token this session was made with

	// domain and traffic reach the sandbox's other ports (traffic: the
	// traffic access token, kept in memory only); portMu guards ports, the
	// forwarders PortURL made, and desk, the desktop machine of a desktop
	// sandbox.
	domain  string
	traffic string
	portMu  sync.Mutex
	ports   map[int]*forwarder
	desk    *desktop.Machine

	// act is envd calls and reconnects in progress (the sandbox must not
	// lapse while botd, or the desktop, is being brought up on it).
	act vendorkit.Activity

	// explMu guards expl and explAt, the last explanation.
	explMu sync.Mutex
	expl   explained
	explAt time.Time
}

// session returns the sandbox's session, making it (or remaking it when
// the sandbox's tokens changed).
func (p *Provider) session(sb Sandbox) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sessions[sb.SandboxID]; s != nil {
		if s.token == sb.EnvdAccessToken {
			return s, nil
		}
		s.close()
	}
	domain := p.o.Domain
	if sb.Domain != nil && *sb.Domain != "" {
		domain = *sb.Domain
	}
	envdURL, byHeader, err := sandboxTarget(p.o.SandboxURL, "https", domain, sb.SandboxID, envdPort)
	if err != nil {
		return nil, err
	}
	envdHdr := http.Header{}
	if sb.EnvdAccessToken != "" {
		envdHdr.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	s := &session{p: p, id: sb.SandboxID, token: sb.EnvdAccessToken, done: make(chan struct{}), domain: domain, ports: map[int]*forwarder{}}
	if sb.TrafficAccessToken != nil {
		s.traffic = *sb.TrafficAccessToken
	}
	s.envd = newEnvd(envdURL.String(), &router{next: p.o.Transport, sandboxID: sb.SandboxID, port: envdPort, byHeader: byHeader, set: envdHdr, use: s.used})
	botdURL, byHeader, err := sandboxTarget(p.o.SandboxURL, "https", domain, sb.SandboxID, botdPort)
	if err != nil {
		return nil, err
	}
	botdHdr := http.Header{}
	if sb.TrafficAccessToken != nil && *sb.TrafficAccessToken != "" {
		botdHdr.Set("E2b-Traffic-Access-Token", *sb.TrafficAccessToken)
	}
	rt := &router{next: p.o.Transport, sandboxID: sb.SandboxID, port: botdPort, byHeader: byHeader, set: botdHdr}
	s.fwd = newForwarder(botdURL, rt, s.explain)
	p.sessions[sb.SandboxID] = s
	go s.refresh()
	return s, nil
}

// used records an envd call (exec, files, a desktop's observe or act).
func (s *session) used() { s.act.Used() }

// hold keeps the sandbox in use until the returned func is called (a
// reconnect: connect's timeout runs from its answer, and resuming, starting
// botd and waiting for it can take longer than a short Timeout). While
// held, the sandbox's timeout is extended every quarter Timeout, on a
// ticker of its own (the refresher's third may be too late on a busy host).
func (s *session) hold() func() {
	release := s.act.Hold()
	stop := make(chan struct{})
	every := max(s.p.o.Timeout/4, 250*time.Millisecond)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		extend := func() {
			ctx, cancel := context.WithTimeout(context.Background(), every)
			_ = s.p.api.setTimeout(ctx, s.id, s.p.o.Timeout)
			cancel()
		}
		extend() // at once: connect's answer may have been slow to arrive
		for {
			select {
			case <-stop:
				return
			case <-s.done:
				return
			case <-t.C:
				extend()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			release()
		})
	}
}

// inUse: a reconnect holds the session, an envd call was made, or botd's
// forwarder, or a port's (a desktop's viewer), was used.
func (s *session) inUse(now time.Time, idle time.Duration) bool {
	if s.act.Active(now, idle) || s.fwd.inUse(now, idle) {
		return true
	}
	s.portMu.Lock()
	defer s.portMu.Unlock()
	for _, f := range s.ports {
		if f.inUse(now, idle) {
			return true
		}
	}
	return false
}

func (s *session) close() {
	s.once.Do(func() {
		close(s.done)
		s.fwd.close()
		s.portMu.Lock()
		for _, f := range s.ports {
			f.close()
		}
		s.ports = map[int]*forwarder{}
		desk := s.desk
		s.desk = nil
		s.portMu.Unlock()
		if desk != nil {
			_ = desk.Close()
		}
	})
}

// refresh extends the sandbox's timeout while the computer is in use (a
// request to botd within the last Timeout, or an open agent or viewer
// connection); an idle sandbox is left to lapse into a pause. It ends with
// the session, or when the sandbox is gone.
func (s *session) refresh() {
	every := s.p.o.Timeout / 3
	if every < time.Second {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			if !s.inUse(now, s.p.o.Timeout-every) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := s.p.api.setTimeout(ctx, s.id, s.p.o.Timeout)
			cancel()
			switch {
			case errors.Is(err, ErrNotFound):
				s.p.log.Warn().Str("sandbox", s.id).Msg("the sandbox is gone; its timeout is no longer refreshed")
				s.p.drop(s.id)
				return
			case err != nil:
				s.p.log.Warn().Str("sandbox", s.id).Err(err).Msg("refresh the sandbox's timeout")
			}
		}
	}
}

// explain says why botd did not answer through the forwarder; known when
// the sandbox is not running (paused, gone). One answer is reused for 2 s:
// a botd that is still starting is probed often.
func (s *session) explain(ctx context.Context) (int, string, bool) {
	s.explMu.Lock()
	defer s.explMu.Unlock()
	if time.Since(s.explAt) < 2*time.Second {
		return s.expl.status, s.expl.msg, s.expl.known
	}
	d, err := s.p.api.get(ctx, s.id)
	e := explained{status: http.StatusBadGateway, msg: "botd in the E2B sandbox does not answer (the sandbox is running)"}
	switch {
	case errors.Is(err, ErrNotFound):
		e = explained{http.StatusBadGateway, "the E2B sandbox is gone (killed, or its timeout lapsed): start the computer again for a replacement", true}
	case err != nil:
		e.msg = "botd in the E2B sandbox does not answer, and the E2B API could not say why"
	case d.State == "paused":
		e = explained{http.StatusServiceUnavailable, "the E2B sandbox is paused (its timeout lapsed, or it was stopped): start the computer again to resume it", true}
	}
	s.expl, s.explAt = e, time.Now()
	return e.status, e.msg, e.known
}

type explained struct {
	status int
	msg    string
	known  bool
}

// botdRunning reports whether envd runs a process tagged botd.
func (s *session) botdRunning(ctx context.Context) (bool, error) {
	ps, err := s.envd.list(ctx, rootUser)
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		if p.GetTag() == botdTag {
			return true, nil
		}
	}
	return false, nil
}

// startBotd writes botd's token and the model key as root-only files and
// starts botd as root, tagged, in the background.
func (s *session) startBotd(ctx context.Context, token string, env []string, maxScreens int) error {
	envs := map[string]string{
		"BOTD_TOKEN_FILE": tokenPath,
		"MAX_SCREENS":     strconv.Itoa(maxScreens),
	}
	var modelKey string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "BOTD_TOKEN", "BOTD_TOKEN_FILE", "MODEL_API_KEY_FILE":
		case "MODEL_API_KEY":
			modelKey = v
		default:
			envs[k] = v
		}
	}
	// The directory first, root's and 0700: the files are never readable
	// by another user, not even between their upload and their chmod.
	if r, err := s.envd.run(ctx, rootUser, "/bin/sh", []string{"-c", "install -d -m 0700 -o root -g root " + secretsDir}, nil); err != nil {
		return fmt.Errorf("make %s: %w", secretsDir, err)
	} else if r.ExitCode != 0 {
		return fmt.Errorf("make %s: exit %d: %s", secretsDir, r.ExitCode, tail(r.Stderr))
	}
	files := []string{tokenPath}
	if err := s.envd.writeFile(ctx, rootUser, tokenPath, []byte(token)); err != nil {
		return err
	}
	if modelKey != "" {
		if err := s.envd.writeFile(ctx, rootUser, modelKeyPath, []byte(modelKey)); err != nil {
			return err
		}
		files = append(files, modelKeyPath)
		envs["MODEL_API_KEY_FILE"] = modelKeyPath
	}
	r, err := s.envd.run(ctx, rootUser, "/bin/chmod", append([]string{"0600"}, files...), nil)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, tail(r.Stderr))
	}
	if err != nil {
		return fmt.Errorf("chmod the secrets: %w", err)
	}
	if _, err := s.envd.start(ctx, rootUser, botdTag, botdBin, nil, envs); err != nil {
		return err
	}
	return nil
}

// stop asks botd to end (SIGTERM), for tests and tooling.
func (s *session) stopBotd(ctx context.Context) error {
	return s.envd.signal(ctx, rootUser, botdTag, process.Signal_SIGNAL_SIGTERM)
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = "…" + s[len(s)-300:]
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }

// machineName is a fresh name for one incarnation of a computer.
func machineName(computerID string) string {
	var b [4]byte
	_, _ = cryptorand.Read(b[:])
	return computerID + "-" + hex.EncodeToString(b[:])
}

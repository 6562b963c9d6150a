// Package daytona is the Daytona provider's adapter (CONTROL-PLANE.md,
// Providers; STYLE.md, Vendor adapters): computers as sandboxes on
// Daytona's published API (spec/), or on the emulator of it (emulator/) —
// only the API URL and the key differ, read from the variables the
// vendor's SDK reads (DAYTONA_API_URL, DAYTONA_API_KEY, DAYTONA_TARGET).
//
// Mode "open-bot" (a snapshot built from our computer image): the sandbox
// runs botd; the adapter writes botd's token and the model key as
// root-only files through the toolbox, starts botd when it is not running
// (process/execute) and reaches it on port 7000 through the sandbox's
// preview URL with its token. The machine it returns is botd's, so every
// feature works there.
//
// Lifecycle: create from a snapshot with labels naming the computer; on
// every Reconnect, start a stopped or archived sandbox and recover one in
// error; stop as Stop (auto-archive takes a long-stopped one to cheaper
// storage); delete as Destroy; list by label to reconcile. Daytona stops a
// sandbox after autoStopInterval minutes without activity (default 15): the
// adapter creates sandboxes with DAYTONA_AUTO_STOP_MINUTES and, while the
// computer is in use (a request to botd, an open agent or viewer
// connection, a toolbox call), marks it active (POST
// /sandbox/{id}/last-activity) well within that interval, so a computer in
// use is never stopped under its user and an idle one stops by itself.
//
// The package does not import providers (the providers glue imports it):
// its refs, specs and listings are its own types, and ErrNotFound is what
// the glue turns into providers.ErrGone.
package daytona

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
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Kind is the provider kind's name.
const Kind = "daytona"

// Defaults.
const (
	DefaultAPIURL   = "https://app.daytona.io/api"
	DefaultSnapshot = "open-bot"
	// DefaultAutoStop is the auto-stop interval new sandboxes get
	// (minutes; Daytona's own default is 15).
	DefaultAutoStop = 15
	// DefaultAutoArchive: a sandbox stopped this long (minutes) is
	// archived (a day).
	DefaultAutoArchive = 24 * 60
)

// Labels on every sandbox this provider makes.
const (
	labelMarker   = "open-bot"
	labelComputer = "open-bot-computer"
	labelMachine  = "open-bot-machine"
)

// In the computer image (images/computer/Dockerfile): botd's port and
// binary, and where its root-only secrets go.
const (
	botdPort      = 7000
	botdBin       = "/opt/botd/botd"
	secretsDir    = "/run/secrets"
	tokenPath     = secretsDir + "/botd_token"
	modelKeyPath  = secretsDir + "/model_api_key"
	botdPIDFile   = "/run/open-bot-botd.pid"
	botdLog       = "/var/log/open-bot-botd.log"
	defaultScreen = 4
)

// Options configures the provider.
type Options struct {
	// APIURL is the API (DAYTONA_API_URL, default https://app.daytona.io/api).
	APIURL string
	// Key is the API key, sealed.
	Key *Key
	// Target is the region new sandboxes go to (DAYTONA_TARGET; "" the
	// organisation's default).
	Target string
	// Snapshot is the snapshot new computers get (DAYTONA_SNAPSHOT,
	// default open-bot).
	Snapshot string
	// AutoStop is the auto-stop interval in minutes
	// (DAYTONA_AUTO_STOP_MINUTES, default 15; 0 never stops by itself).
	// While the computer is in use the adapter marks it active every
	// ActivityEvery.
	AutoStop int
	// AutoArchive is the auto-archive interval in minutes (default a day).
	AutoArchive int
	// ActivityEvery is how often a computer in use is marked active
	// (default a third of AutoStop, at most 5 min; tests shorten it along
	// with the emulator's minute).
	ActivityEvery time.Duration
	// ReadyTimeout bounds the waits for the sandbox to start and for
	// botd's health (default 180 s).
	ReadyTimeout time.Duration
	// MaxScreens is botd's MAX_SCREENS (default 4).
	MaxScreens int
	// Env is what every botd gets from the worker; MODEL_API_KEY goes in
	// as a root-only file, never an environment variable.
	Env []string
	// HTTPClient is the API's client (default: 60 s timeout).
	HTTPClient *http.Client
	// Transport carries sandbox traffic (toolbox, preview); default
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

// Provider is the daytona kind.
type Provider struct {
	o   Options
	api *api
	tb  *api // the same key and policy, on the sandbox-traffic client
	log zerolog.Logger

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
		return nil, fmt.Errorf("DAYTONA_API_URL: want http(s)://host[/path], got %q", o.APIURL)
	}
	if o.Snapshot == "" {
		o.Snapshot = DefaultSnapshot
	}
	if o.Key == nil {
		return nil, errors.New("daytona provider: no API key: set DAYTONA_API_KEY or DAYTONA_API_KEY_FILE")
	}
	if o.AutoStop < 0 {
		return nil, errors.New("daytona provider: the auto-stop interval is minutes ≥ 0")
	}
	if o.AutoArchive <= 0 {
		o.AutoArchive = DefaultAutoArchive
	}
	if o.ActivityEvery <= 0 {
		o.ActivityEvery = 5 * time.Minute
		if o.AutoStop > 0 {
			o.ActivityEvery = min(o.ActivityEvery, time.Duration(o.AutoStop)*time.Minute/3)
		}
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 180 * time.Second
	}
	if o.MaxScreens <= 0 {
		o.MaxScreens = defaultScreen
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 60 * time.Second}
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
		p.log = o.Log.With().Str("component", "provider_daytona").Logger()
	}
	p.api = &api{base: o.APIURL, key: o.Key, hc: o.HTTPClient, retry: vendorkit.Retry{
		Retries: o.Retries, Backoff: o.Backoff, MaxBackoff: 10 * time.Second, Sleep: vendorkit.SleepCtx}}
	tb := *p.api
	tb.hc = &http.Client{Transport: o.Transport}
	p.tb = &tb
	return p, nil
}

// DefaultSnapshot is the snapshot a computer that names none gets.
func (p *Provider) DefaultSnapshot() string { return p.o.Snapshot }

// Spec is what Provision and Reconnect need of a computer.
type Spec struct {
	ComputerID string
	BotdToken  string
	// Snapshot overrides Options.Snapshot for this computer ("" keeps it).
	Snapshot string
}

// Ref is the provider's opaque providerRef, as JSON.
type Ref struct {
	SandboxID string `json:"sandboxId"`
	Snapshot  string `json:"snapshot"`
}

func (r Ref) String() string { b, _ := json.Marshal(r); return string(b) }

// ParseRef reads a ref; a malformed one is ErrNotFound.
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

// Provision creates the sandbox (started). Reconnect installs the secrets
// and starts botd.
func (p *Provider) Provision(ctx context.Context, spec Spec) (string, error) {
	if !computerIDPattern.MatchString(spec.ComputerID) {
		return "", fmt.Errorf("computer id %q: want 1-63 of [a-z0-9_-], starting with a letter or digit", spec.ComputerID)
	}
	if len(spec.BotdToken) < 16 {
		return "", errors.New("daytona provider: botd token must be at least 16 characters")
	}
	snap := spec.Snapshot
	if snap == "" {
		snap = p.o.Snapshot
	}
	machine := machineName(spec.ComputerID)
	// open-bot runs botd as root; the vendor's desktop keeps its
	// snapshot's own user (the one its computer-use desktop runs as).
	user := "root"
	if Desktop(snap) {
		user = ""
	}
	s, err := p.api.create(ctx, createSandbox{
		Name: machine, Snapshot: snap, User: user, Target: p.o.Target,
		Labels:           map[string]string{labelMarker: "computer", labelComputer: spec.ComputerID, labelMachine: machine},
		AutoStopInterval: p.o.AutoStop, AutoArchiveInterval: p.o.AutoArchive, AutoDeleteInterval: -1,
	})
	if err != nil {
		return "", err
	}
	p.log.Info().Str("sandbox", s.ID).Str("machine", machine).Str("snapshot", snap).Msg("provisioned")
	return Ref{SandboxID: s.ID, Snapshot: snap}.String(), nil
}

// started brings the sandbox to started: a stopped or archived one is
// started, one in error recovered, one in transition waited for.
// ErrNotFound when it is gone.
func (p *Provider) started(ctx context.Context, id string) (Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.ReadyTimeout)
	defer cancel()
	for {
		s, err := p.api.get(ctx, id)
		if err != nil {
			return s, err
		}
		switch s.State {
		case "started":
			return s, nil
		case "stopped", "archived":
			p.log.Info().Str("sandbox", id).Str("state", s.State).Msg("starting the sandbox")
			if _, err := p.api.lifecycle(ctx, id, "start"); err != nil {
				return s, err
			}
		case "error", "build_failed":
			if s.Recoverable != nil && !*s.Recoverable {
				return s, fmt.Errorf("daytona: sandbox %s is in error and cannot be recovered: %s", id, s.ErrorReason)
			}
			p.log.Warn().Str("sandbox", id).Str("reason", s.ErrorReason).Msg("recovering the sandbox from error")
			if _, err := p.api.lifecycle(ctx, id, "recover"); err != nil {
				return s, fmt.Errorf("daytona: sandbox %s in error (%s): recover: %w", id, s.ErrorReason, err)
			}
		case "destroyed", "destroying":
			return s, fmt.Errorf("%w: sandbox %s is %s", ErrNotFound, id, s.State)
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("daytona: sandbox %s did not start (state %s): %w", id, s.State, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Reconnect starts the sandbox when it is not running, starts botd when
// it is not running and waits until botd answers. The client it returns
// reaches botd through a forwarder on 127.0.0.1. ErrNotFound when the
// sandbox is gone.
func (p *Provider) Reconnect(ctx context.Context, ref string, spec Spec) (*client.Client, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if Desktop(r.Snapshot) {
		return nil, fmt.Errorf("daytona provider: sandbox %s is the vendor's desktop: it has no botd (ReconnectDesktop drives it)", r.SandboxID)
	}
	if len(spec.BotdToken) < 16 {
		return nil, errors.New("daytona provider: no botd token is kept for this computer")
	}
	sb, err := p.started(ctx, r.SandboxID)
	if err != nil {
		return nil, err
	}
	sess, err := p.session(ctx, sb)
	if err != nil {
		return nil, err
	}
	defer sess.hold()()
	running, err := sess.botdRunning(ctx)
	if err != nil {
		return nil, fmt.Errorf("daytona provider: sandbox %s: %w", r.SandboxID, err)
	}
	if !running {
		if err := sess.startBotd(ctx, spec.BotdToken, p.o.Env, p.o.MaxScreens); err != nil {
			return nil, fmt.Errorf("daytona provider: sandbox %s: %w", r.SandboxID, err)
		}
		p.log.Info().Str("sandbox", r.SandboxID).Msg("started botd")
	}
	c := client.New(sess.fwd.URL(), spec.BotdToken, &http.Client{Transport: sess.fwd}) // each call has its own deadline
	if err := p.awaitHealthy(ctx, sess, c); err != nil {
		return nil, fmt.Errorf("daytona provider: sandbox %s: %w", r.SandboxID, err)
	}
	sess.fwd.touch()
	if err := p.api.touch(ctx, r.SandboxID); err != nil {
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

// Stop stops the sandbox (its disk kept; auto-archive moves it to cheaper
// storage after AutoArchive minutes; Reconnect starts it). Stopping a
// stopped sandbox is fine; ErrNotFound when it is gone.
func (p *Provider) Stop(ctx context.Context, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return err
	}
	p.drop(r.SandboxID)
	s, err := p.api.get(ctx, r.SandboxID)
	if err != nil {
		return err
	}
	if s.State == "stopped" || s.State == "archived" {
		return nil
	}
	_, err = p.api.lifecycle(ctx, r.SandboxID, "stop")
	return err
}

// Destroy deletes the sandbox. Deleting a gone sandbox is fine.
func (p *Provider) Destroy(ctx context.Context, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return nil
	}
	p.drop(r.SandboxID)
	err = p.api.delete(ctx, r.SandboxID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err == nil {
		p.log.Info().Str("sandbox", r.SandboxID).Msg("deleted")
	}
	return err
}

// Listed is one sandbox this provider made.
type Listed struct {
	Ref        string
	ComputerID string
	Running    bool
}

// List returns the sandboxes whose labels mark them as open-bot computers.
func (p *Provider) List(ctx context.Context) ([]Listed, error) {
	items, err := p.api.list(ctx, map[string]string{labelMarker: "computer"})
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(items))
	for _, s := range items {
		if s.Labels[labelComputer] == "" || s.State == "destroyed" || s.State == "destroying" {
			continue
		}
		out = append(out, Listed{Ref: Ref{SandboxID: s.ID, Snapshot: s.Snapshot}.String(),
			ComputerID: s.Labels[labelComputer], Running: s.State == "started"})
	}
	return out, nil
}

// Close ends every forwarder and refresher (idle sandboxes then stop by
// their auto-stop interval).
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

// session is what a reconnected sandbox has on this side: its toolbox,
// the forwarder to botd and the activity refresher.
type session struct {
	p    *Provider
	id   string
	tb   *toolbox
	fwd  *forwarder
	done chan struct{}
	once sync.Once
	// preview is the preview URL and token the forwarder was made with.
	preview previewURL

	// act is toolbox calls and reconnects in progress.
	act vendorkit.Activity

	// portMu guards ports (the forwarders a desktop machine's PortURL
	// made) and desk (the desktop machine of a desktop sandbox).
	portMu sync.Mutex
	ports  map[int]*forwarder
	desk   *desktop.Machine

	explMu sync.Mutex
	expl   explained
	explAt time.Time
}

// session returns the sandbox's session, making it (or remaking it when
// the sandbox's preview URL or token changed).
func (p *Provider) session(ctx context.Context, sb Sandbox) (*session, error) {
	pv, err := p.api.preview(ctx, sb.ID, botdPort)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sessions[sb.ID]; s != nil {
		if s.preview == pv {
			return s, nil
		}
		s.close()
	}
	if sb.ToolboxProxyURL == "" {
		return nil, fmt.Errorf("daytona: sandbox %s: the answer names no toolboxProxyUrl", sb.ID)
	}
	target, err := url.Parse(pv.URL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") {
		return nil, fmt.Errorf("daytona: sandbox %s: preview URL for port %d is not http(s)", sb.ID, botdPort)
	}
	s := &session{p: p, id: sb.ID, done: make(chan struct{}), preview: pv, ports: map[int]*forwarder{}}
	s.tb = &toolbox{a: p.tb, base: strings.TrimRight(sb.ToolboxProxyURL, "/") + "/" + url.PathEscape(sb.ID), hold: s.hold}
	rt := &previewHeaders{next: p.o.Transport, token: pv.Token}
	s.fwd = newForwarder(target, rt, s.explain)
	p.sessions[sb.ID] = s
	go s.refresh()
	return s, nil
}

// hold keeps the sandbox in use until the returned func is called.
func (s *session) hold() func() { return s.act.Hold() }

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
		s.portMu.Lock()
		close(s.done)
		ports, desk := s.ports, s.desk
		s.ports, s.desk = map[int]*forwarder{}, nil
		s.portMu.Unlock()
		if desk != nil {
			_ = desk.Close()
		}
		for _, f := range ports {
			f.close()
		}
		s.fwd.close()
	})
}

// refresh marks the sandbox active while the computer is in use (a
// request to botd or a toolbox call within the last period, or an open
// agent or viewer connection), so auto-stop never stops it under its
// user; an idle sandbox is left to stop. It ends with the session, or when
// the sandbox is gone.
func (s *session) refresh() {
	every := s.p.o.ActivityEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			if !s.inUse(now, every) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := s.p.api.touch(ctx, s.id)
			cancel()
			switch {
			case errors.Is(err, ErrNotFound):
				s.p.log.Warn().Str("sandbox", s.id).Msg("the sandbox is gone; it is no longer marked active")
				s.p.drop(s.id)
				return
			case err != nil:
				s.p.log.Warn().Str("sandbox", s.id).Err(err).Msg("mark the sandbox active")
			}
		}
	}
}

// explain says why botd did not answer through the forwarder; known when
// the sandbox is not started. One answer is reused for 2 s.
func (s *session) explain(ctx context.Context) (int, string, bool) {
	s.explMu.Lock()
	defer s.explMu.Unlock()
	if time.Since(s.explAt) < 2*time.Second {
		return s.expl.status, s.expl.msg, s.expl.known
	}
	d, err := s.p.api.get(ctx, s.id)
	e := explained{status: http.StatusBadGateway, msg: "botd in the Daytona sandbox does not answer (the sandbox is started)"}
	switch {
	case errors.Is(err, ErrNotFound):
		e = explained{http.StatusBadGateway, "the Daytona sandbox is gone (deleted): start the computer again for a replacement", true}
	case err != nil:
		e.msg = "botd in the Daytona sandbox does not answer, and the Daytona API could not say why"
	case d.State == "stopped" || d.State == "archived":
		e = explained{http.StatusServiceUnavailable, fmt.Sprintf("the Daytona sandbox is %s (stopped, or idle past its auto-stop interval): start the computer again to resume it", d.State), true}
	case d.State == "error":
		e = explained{http.StatusServiceUnavailable, "the Daytona sandbox is in error (" + d.ErrorReason + "): start the computer again to recover it", true}
	}
	s.expl, s.explAt = e, time.Now()
	return e.status, e.msg, e.known
}

type explained struct {
	status int
	msg    string
	known  bool
}

// botdRunning reports whether the botd this adapter started is alive.
func (s *session) botdRunning(ctx context.Context) (bool, error) {
	// The pid file outlives a stop (it is on the sandbox's disk) and pids
	// are reused after a start: the pid must still be botd's.
	r, err := s.tb.sh(ctx, `p=$(cat `+botdPIDFile+` 2>/dev/null) && [ -n "$p" ] && tr '\0' ' ' < /proc/"$p"/cmdline 2>/dev/null | grep -q '^`+botdBin+` ' && echo yes || echo no`, nil, 30*time.Second)
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(r.Result) == "yes", nil
}

// startBotd writes botd's token and the model key as root-only files and
// starts botd as root in the background, its pid in botdPIDFile.
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
	if r, err := s.tb.sh(ctx, "install -d -m 0700 -o root -g root "+secretsDir, nil, 30*time.Second); err != nil {
		return fmt.Errorf("make %s: %w", secretsDir, err)
	} else if r.ExitCode != 0 {
		return fmt.Errorf("make %s: exit %d: %s", secretsDir, r.ExitCode, tail(r.Result))
	}
	files := []string{tokenPath}
	if err := s.tb.upload(ctx, tokenPath, []byte(token)); err != nil {
		return err
	}
	if modelKey != "" {
		if err := s.tb.upload(ctx, modelKeyPath, []byte(modelKey)); err != nil {
			return err
		}
		files = append(files, modelKeyPath)
		envs["MODEL_API_KEY_FILE"] = modelKeyPath
	}
	r, err := s.tb.sh(ctx, "chmod 0600 "+strings.Join(files, " "), nil, 30*time.Second)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, tail(r.Result))
	}
	if err != nil {
		return fmt.Errorf("chmod the secrets: %w", err)
	}
	// Detached (its own session, output to a file): process/execute
	// returns as the shell does.
	r, err = s.tb.sh(ctx, `setsid `+botdBin+` </dev/null >>`+botdLog+` 2>&1 & echo $! > `+botdPIDFile, envs, 30*time.Second)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, tail(r.Result))
	}
	if err != nil {
		return fmt.Errorf("start botd: %w", err)
	}
	return nil
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = "…" + s[len(s)-300:]
	}
	return s
}

// machineName is a fresh name for one incarnation of a computer.
func machineName(computerID string) string {
	var b [4]byte
	_, _ = cryptorand.Read(b[:])
	return computerID + "-" + hex.EncodeToString(b[:])
}

// Package emulator is a second implementation of E2B's published API (../spec):
// the control plane (sandboxes: create, list, get, kill, pause, connect,
// timeout, refreshes) and, per sandbox, envd (HTTP /health and /files, the
// process.Process and filesystem.Filesystem Connect-RPC services generated in
// ../envd) plus the vendor's port routing. Each sandbox is a container on the
// local Docker engine from the image its template maps to; envd is served on
// the host through the engine's exec API (nothing runs inside the container
// for it), and any other sandbox port is reverse-proxied to the container's
// port at its address on the engine's bridge (emukit: nothing published).
//
// Sandbox traffic is told from control-plane traffic the way the vendor's
// proxy does: by the Host `{port}-{sandboxID}.{domain}`, or by the
// `E2b-Sandbox-Id`/`E2b-Sandbox-Port` headers that clients send when
// E2B_SANDBOX_URL points them at one address. One listener serves all of it.
package emulator

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dockerclient "github.com/moby/moby/client"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
)

// Template is what a templateID maps to.
type Template struct {
	// Image is the container image.
	Image string
	// User is envd's default user (no Basic user given); "" is root.
	User string
	// ImageEntrypoint runs the image's own entrypoint and command as the
	// sandbox's keeper (an image made as a sandbox template, e.g. the
	// e2b-desktop stand-in); otherwise a shell that only keeps the sandbox
	// alive replaces them (the computer image's own starts botd, which the
	// adapter starts through envd instead).
	ImageEntrypoint bool
}

// Config configures an Emulator.
type Config struct {
	// APIKey is the only X-API-Key the control plane accepts.
	APIKey string
	// Domain is the sandbox domain answered in `domain` and matched in
	// `{port}-{sandboxID}.{domain}` hosts (default "e2b.localhost").
	Domain string
	// Templates maps templateIDs (and aliases) to images.
	Templates map[string]Template
	// Ports are the container ports the vendor's port routing reaches
	// (DefaultPorts when empty); others cannot be reached.
	Ports []int
	// Docker is the engine client.
	Docker *dockerclient.Client
	// EnvdVersion is the envd version answered (default DefaultEnvdVersion).
	EnvdVersion string
	// Logf logs one line (nil: silent). Tokens are never logged.
	Logf func(format string, args ...any)
}

// DefaultEnvdVersion is the envd version the emulator claims: new enough
// that the JS SDK uses every feature served here (no username default,
// stdin closing, octet-stream uploads).
const DefaultEnvdVersion = "0.5.7"

// EnvdPort is envd's port in a sandbox.
const EnvdPort = 49983

// Label marks the emulator's containers (its value is the sandbox ID).
const Label = "open-bot.e2b-emulator.sandbox"

// Emulator serves the control plane and every sandbox's envd and ports.
type Emulator struct {
	cfg   Config
	mu    sync.Mutex
	boxes map[string]*sandbox
	cp    *http.ServeMux
	envd  http.Handler
}

type sandbox struct {
	id, templateID, alias string
	container             string
	metadata              map[string]string
	envdToken             string
	trafficToken          string // "" when public
	startedAt, endAt      time.Time
	state                 string // running | paused
	autoPause             bool
	gen                   int // bumps when the timer is re-armed or the sandbox goes
	timer                 *time.Timer
	ports                 map[int]string // container port → containerIP:port
	defaultUser           string
	allowInternet         *bool
	procs                 *procTable
	users                 map[string]userInfo
	// life serialises the sandbox's pause, resume and kill: a connect
	// that arrives while the timeout's stop is under way waits for the
	// container to have stopped before it starts it again (otherwise the
	// "resumed" sandbox's container dies under it).
	life sync.Mutex
}

// New makes an emulator; it holds no sandbox until one is created.
func New(cfg Config) (*Emulator, error) {
	if cfg.Docker == nil {
		return nil, errors.New("e2b emulator: no Docker client")
	}
	if cfg.APIKey == "" {
		return nil, errors.New("e2b emulator: no API key")
	}
	if cfg.Domain == "" {
		cfg.Domain = "e2b.localhost"
	}
	if len(cfg.Ports) == 0 {
		cfg.Ports = emukit.DefaultPorts()
	}
	if cfg.EnvdVersion == "" {
		cfg.EnvdVersion = DefaultEnvdVersion
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	e := &Emulator{cfg: cfg, boxes: map[string]*sandbox{}}
	e.routes()
	e.envd = e.envdHandler()
	return e, nil
}

// Domain is the sandbox domain.
func (e *Emulator) Domain() string { return e.cfg.Domain }

// Close kills every sandbox (removes its container).
func (e *Emulator) Close(ctx context.Context) error {
	e.mu.Lock()
	var ids []string
	for id, b := range e.boxes {
		b.gen++
		if b.timer != nil {
			b.timer.Stop()
		}
		ids = append(ids, b.container)
		b.procs.closeAll()
		delete(e.boxes, id)
	}
	e.mu.Unlock()
	return emukit.RemoveAll(ctx, e.cfg.Docker, ids)
}

// ServeHTTP routes sandbox traffic (by Host or E2b-Sandbox-* headers) to
// envd or the port proxy, the rest to the control plane.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if port, id, ok := e.sandboxTarget(r); ok {
		if port == EnvdPort {
			r = r.WithContext(context.WithValue(r.Context(), boxKey{}, id))
			e.envd.ServeHTTP(w, r)
			return
		}
		e.proxy(w, r, id, port)
		return
	}
	e.cp.ServeHTTP(w, r)
}

// sandboxTarget reads the sandbox and port a request is for.
func (e *Emulator) sandboxTarget(r *http.Request) (int, string, bool) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port, err := strconv.Atoi(r.Header.Get("E2b-Sandbox-Port"))
		if err != nil {
			port = EnvdPort
		}
		return port, id, true
	}
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	sub, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(e.cfg.Domain))
	if !ok {
		return 0, "", false
	}
	p, id, ok := strings.Cut(sub, "-")
	if !ok || id == "" || strings.Contains(id, ".") {
		return 0, "", false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return 0, "", false
	}
	return port, id, true
}

// ---- control plane ----

type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	emukit.WriteJSON(w, status, apiError{Code: status, Message: fmt.Sprintf(format, args...)})
}

func (e *Emulator) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !emukit.EqualSecret(r.Header.Get("X-API-Key"), e.cfg.APIKey) {
			writeError(w, http.StatusUnauthorized, "Invalid API key, it must start with 'e2b_' prefix and be followed by 40 hexadecimal characters")
			return
		}
		h(w, r)
	}
}

func (e *Emulator) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		emukit.WriteJSON(w, http.StatusOK, map[string]string{"message": "Health check successful"})
	})
	m.HandleFunc("POST /sandboxes", e.auth(e.create))
	// Not in the published description, but the JS SDK (2.x) creates
	// through it with the same body and answer.
	m.HandleFunc("POST /v2/sandboxes", e.auth(e.create))
	m.HandleFunc("GET /sandboxes", e.auth(e.listV1))
	m.HandleFunc("GET /v2/sandboxes", e.auth(e.listV2))
	m.HandleFunc("GET /sandboxes/{id}", e.auth(e.get))
	m.HandleFunc("DELETE /sandboxes/{id}", e.auth(e.kill))
	m.HandleFunc("POST /sandboxes/{id}/pause", e.auth(e.pause))
	m.HandleFunc("POST /sandboxes/{id}/connect", e.auth(e.connect))
	// Not published either; the JS SDK (2.x) connects through it, with an
	// optional timeout and a `memory` flag (resuming here always reboots).
	m.HandleFunc("POST /v2/sandboxes/{id}/connect", e.auth(e.connect))
	m.HandleFunc("POST /sandboxes/{id}/timeout", e.auth(e.setTimeout))
	m.HandleFunc("POST /sandboxes/{id}/refreshes", e.auth(e.refresh))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route %s %s in this emulator", r.Method, r.URL.Path)
	})
	e.cp = m
}

type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout"`
	AutoPause           bool              `json:"autoPause"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             *struct {
		AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	} `json:"network"`
}

type sandboxAnswer struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

type listedSandbox struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string  `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool   `json:"allowInternetAccess"`
	Domain              *string `json:"domain"`
	Lifecycle           struct {
		AutoResume bool   `json:"autoResume"`
		OnTimeout  string `json:"onTimeout"`
	} `json:"lifecycle"`
}

const clientID = "6532622b"

func (e *Emulator) answer(b *sandbox) sandboxAnswer {
	d := e.cfg.Domain
	a := sandboxAnswer{
		TemplateID: b.templateID, SandboxID: b.id, Alias: b.alias, ClientID: clientID,
		EnvdVersion: e.cfg.EnvdVersion, EnvdAccessToken: b.envdToken, Domain: &d,
	}
	if b.trafficToken != "" {
		t := b.trafficToken
		a.TrafficAccessToken = &t
	}
	return a
}

func (e *Emulator) listed(b *sandbox) listedSandbox {
	return listedSandbox{
		TemplateID: b.templateID, Alias: b.alias, SandboxID: b.id, ClientID: clientID,
		StartedAt: b.startedAt.UTC(), EndAt: b.endAt.UTC(), CPUCount: 2, MemoryMB: 1024, DiskSizeMB: 8192,
		Metadata: b.metadata, State: b.state, EnvdVersion: e.cfg.EnvdVersion,
	}
}

func readBody(r *http.Request, v any, required bool) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if required {
			return errors.New("request body is required")
		}
		return nil
	}
	return json.Unmarshal(data, v)
}

func (e *Emulator) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if err := readBody(r, &req, true); err != nil {
		writeError(w, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	if req.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	tpl, ok := e.cfg.Templates[req.TemplateID]
	if !ok {
		writeError(w, http.StatusBadRequest, "template '%s' not found", req.TemplateID)
		return
	}
	timeout := 15
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < 0 {
		writeError(w, http.StatusBadRequest, "timeout must be positive")
		return
	}
	b := &sandbox{
		id: newID(), templateID: req.TemplateID, metadata: req.Metadata,
		envdToken: emukit.RandomHex(32), state: "running", autoPause: req.AutoPause,
		defaultUser: tpl.User, allowInternet: req.AllowInternetAccess,
		procs: newProcTable(), users: map[string]userInfo{},
	}
	if req.TemplateID != tpl.Image {
		b.alias = req.TemplateID
	}
	if req.Network != nil && req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic {
		b.trafficToken = emukit.RandomHex(32)
	}
	env := []string{"E2B_SANDBOX=true", "E2B_SANDBOX_ID=" + b.id, "E2B_TEMPLATE_ID=" + req.TemplateID}
	keys := make([]string, 0, len(req.EnvVars))
	for k := range req.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+req.EnvVars[k])
	}
	id, err := e.startContainer(r.Context(), b, tpl, env)
	if err != nil {
		e.cfg.Logf("e2b emulator: create %s from %s: %v", b.id, req.TemplateID, err)
		writeError(w, http.StatusInternalServerError, "failed to create sandbox: %v", err)
		return
	}
	b.container = id
	now := time.Now()
	b.startedAt = now
	e.mu.Lock()
	e.boxes[b.id] = b
	e.armLocked(b, now.Add(time.Duration(timeout)*time.Second))
	a := e.answer(b)
	e.mu.Unlock()
	e.cfg.Logf("e2b emulator: created sandbox %s (template %s, container %.12s)", b.id, req.TemplateID, id)
	emukit.WriteJSON(w, http.StatusCreated, a)
}

// emukit.KeepAlive is the container's PID 1: the sandbox lives until killed, and
// orphans of exec'd processes are reaped.

func (e *Emulator) startContainer(ctx context.Context, b *sandbox, tpl Template, env []string) (string, error) {
	id, ports, err := emukit.Create(ctx, e.cfg.Docker, emukit.Container{
		Name: "e2b-emu-" + b.id, Image: tpl.Image, Hostname: "e2b", Env: env,
		Label: Label, ID: b.id, Ports: e.cfg.Ports, ImageEntrypoint: tpl.ImageEntrypoint,
	})
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	b.ports = ports
	e.mu.Unlock()
	return id, nil
}

// startAndMap starts the container and reads back where its ports are
// reached (the container's address may change at every start).
func (e *Emulator) startAndMap(ctx context.Context, b *sandbox, id string) error {
	ports, err := emukit.Start(ctx, e.cfg.Docker, id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	b.ports = ports
	e.mu.Unlock()
	return nil
}

// armLocked sets the sandbox's end and the timer that ends it.
func (e *Emulator) armLocked(b *sandbox, end time.Time) {
	b.endAt = end
	b.gen++
	gen := b.gen
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timer = time.AfterFunc(time.Until(end), func() { e.expire(b.id, gen) })
}

func (e *Emulator) expire(id string, gen int) {
	e.mu.Lock()
	b, ok := e.boxes[id]
	e.mu.Unlock()
	if !ok {
		return
	}
	b.life.Lock()
	defer b.life.Unlock()
	// Checked again under the sandbox's lock: a connect or a new timeout
	// may have re-armed it, or a pause or kill ended it, meanwhile.
	e.mu.Lock()
	cur, ok := e.boxes[id]
	if !ok || cur != b || b.gen != gen || b.state != "running" {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if b.autoPause {
		e.cfg.Logf("e2b emulator: sandbox %s timed out: pausing", id)
		_ = e.pauseHeld(ctx, b)
		return
	}
	e.cfg.Logf("e2b emulator: sandbox %s timed out: killing", id)
	_ = e.killHeld(ctx, b)
}

func (e *Emulator) lookup(w http.ResponseWriter, r *http.Request) (*sandbox, bool) {
	id := r.PathValue("id")
	e.mu.Lock()
	b, ok := e.boxes[id]
	e.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "sandbox \"%s\" doesn't exist or you don't have access to it", id)
		return nil, false
	}
	return b, true
}

// metadataFilter parses the `metadata` query ("k=v&k2=v2", each URL-encoded).
func metadataFilter(r *http.Request) (url.Values, error) {
	q := r.URL.Query().Get("metadata")
	if q == "" {
		return nil, nil
	}
	return url.ParseQuery(q)
}

func matches(b *sandbox, filter url.Values) bool {
	for k, vs := range filter {
		for _, v := range vs {
			if b.metadata[k] != v {
				return false
			}
		}
	}
	return true
}

func (e *Emulator) selectBoxes(filter url.Values, states map[string]bool) []listedSandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []listedSandbox{}
	for _, b := range e.boxes {
		if states[b.state] && matches(b, filter) {
			out = append(out, e.listed(b))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.After(out[j].StartedAt) })
	return out
}

func (e *Emulator) listV1(w http.ResponseWriter, r *http.Request) {
	filter, err := metadataFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid metadata filter: %v", err)
		return
	}
	emukit.WriteJSON(w, http.StatusOK, e.selectBoxes(filter, map[string]bool{"running": true}))
}

func (e *Emulator) listV2(w http.ResponseWriter, r *http.Request) {
	filter, err := metadataFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid metadata filter: %v", err)
		return
	}
	states := map[string]bool{"running": true, "paused": true}
	if s := r.URL.Query().Get("state"); s != "" {
		states = map[string]bool{}
		for _, st := range strings.Split(s, ",") {
			if st != "running" && st != "paused" {
				writeError(w, http.StatusBadRequest, "invalid state %q", st)
				return
			}
			states[st] = true
		}
	}
	out := e.selectBoxes(filter, states)
	if o := r.URL.Query().Get("order"); o == "asc" {
		sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	}
	emukit.WriteJSON(w, http.StatusOK, out)
}

func (e *Emulator) get(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	e.mu.Lock()
	d := sandboxDetail{listedSandbox: e.listed(b), EnvdAccessToken: b.envdToken, AllowInternetAccess: b.allowInternet}
	dom := e.cfg.Domain
	d.Domain = &dom
	d.Lifecycle.AutoResume = false
	d.Lifecycle.OnTimeout = "kill"
	if b.autoPause {
		d.Lifecycle.OnTimeout = "pause"
	}
	e.mu.Unlock()
	emukit.WriteJSON(w, http.StatusOK, d)
}

func (e *Emulator) doKill(ctx context.Context, b *sandbox) error {
	b.life.Lock()
	defer b.life.Unlock()
	return e.killHeld(ctx, b)
}

// killHeld is doKill with b.life held.
func (e *Emulator) killHeld(ctx context.Context, b *sandbox) error {
	e.mu.Lock()
	if cur, ok := e.boxes[b.id]; !ok || cur != b {
		e.mu.Unlock()
		return nil
	}
	delete(e.boxes, b.id)
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
	}
	e.mu.Unlock()
	b.procs.closeAll()
	_, err := e.cfg.Docker.ContainerRemove(ctx, b.container, dockerclient.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	return err
}

func (e *Emulator) kill(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	if err := e.doKill(r.Context(), b); err != nil {
		writeError(w, http.StatusInternalServerError, "killing sandbox: %v", err)
		return
	}
	e.cfg.Logf("e2b emulator: killed sandbox %s", b.id)
	w.WriteHeader(http.StatusNoContent)
}

// pauseHeld stops the container (its memory and processes go; its disk
// stays). b.life is held, so no resume starts the container before its
// stop has finished.
func (e *Emulator) pauseHeld(ctx context.Context, b *sandbox) error {
	e.mu.Lock()
	b.state = "paused"
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
	}
	e.mu.Unlock()
	b.procs.closeAll()
	timeout := 5
	_, err := e.cfg.Docker.ContainerStop(ctx, b.container, dockerclient.ContainerStopOptions{Timeout: &timeout})
	return err
}

func (e *Emulator) pause(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	var req struct {
		Memory *bool `json:"memory"`
	}
	if err := readBody(r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	b.life.Lock()
	defer b.life.Unlock()
	e.mu.Lock()
	paused := b.state == "paused"
	cur, live := e.boxes[b.id]
	e.mu.Unlock()
	if !live || cur != b {
		writeError(w, http.StatusNotFound, "sandbox \"%s\" doesn't exist or you don't have access to it", b.id)
		return
	}
	if paused {
		writeError(w, http.StatusConflict, "sandbox %s is already paused", b.id)
		return
	}
	if err := e.pauseHeld(r.Context(), b); err != nil {
		writeError(w, http.StatusInternalServerError, "pausing sandbox: %v", err)
		return
	}
	e.cfg.Logf("e2b emulator: paused sandbox %s", b.id)
	w.WriteHeader(http.StatusNoContent)
}

func (e *Emulator) connect(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	var req struct {
		Timeout *int `json:"timeout"`
	}
	v2 := strings.HasPrefix(r.URL.Path, "/v2/")
	if err := readBody(r, &req, !v2); err != nil || (req.Timeout == nil && !v2) || (req.Timeout != nil && *req.Timeout < 0) {
		writeError(w, http.StatusBadRequest, "invalid request body: timeout (seconds) is required")
		return
	}
	if req.Timeout == nil {
		d := 300
		req.Timeout = &d
	}
	// Under the sandbox's lock: a stop in progress (timeout or pause)
	// finishes before this reads the state, so a resume starts a stopped
	// container, never one that is still going down.
	b.life.Lock()
	defer b.life.Unlock()
	e.mu.Lock()
	paused := b.state == "paused"
	cur, live := e.boxes[b.id]
	e.mu.Unlock()
	if !live || cur != b {
		writeError(w, http.StatusNotFound, "sandbox \"%s\" doesn't exist or you don't have access to it", b.id)
		return
	}
	status := http.StatusOK
	if paused {
		if err := e.startAndMap(r.Context(), b, b.container); err != nil {
			writeError(w, http.StatusInternalServerError, "resuming sandbox: %v", err)
			return
		}
		status = http.StatusCreated
	}
	// The timeout counts from the answer (a resume that took a while does
	// not eat into it).
	end := time.Now().Add(time.Duration(*req.Timeout) * time.Second)
	if paused {
		e.mu.Lock()
		b.state = "running"
		b.procs = newProcTable()
		e.armLocked(b, end)
		e.mu.Unlock()
		e.cfg.Logf("e2b emulator: resumed sandbox %s", b.id)
	} else {
		e.mu.Lock()
		if end.After(b.endAt) { // connect only extends the TTL
			e.armLocked(b, end)
		}
		e.mu.Unlock()
	}
	e.mu.Lock()
	a := e.answer(b)
	e.mu.Unlock()
	emukit.WriteJSON(w, status, a)
}

func (e *Emulator) setTimeout(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := readBody(r, &req, true); err != nil || req.Timeout == nil || *req.Timeout < 0 {
		writeError(w, http.StatusBadRequest, "invalid request body: timeout (seconds) is required")
		return
	}
	e.mu.Lock()
	if b.state == "running" {
		e.armLocked(b, time.Now().Add(time.Duration(*req.Timeout)*time.Second))
	}
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (e *Emulator) refresh(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	var req struct {
		Duration *int `json:"duration"`
	}
	if err := readBody(r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	d := 15
	if req.Duration != nil {
		d = *req.Duration
	}
	if d < 0 || d > 3600 {
		writeError(w, http.StatusBadRequest, "duration must be between 0 and 3600 seconds")
		return
	}
	e.mu.Lock()
	if end := time.Now().Add(time.Duration(d) * time.Second); b.state == "running" && end.After(b.endAt) {
		e.armLocked(b, end)
	}
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// ---- helpers ----

func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	for i := range buf {
		buf[i] = alphabet[int(buf[i])%len(alphabet)]
	}
	return "i" + string(buf)
}

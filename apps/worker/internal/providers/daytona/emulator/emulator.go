// Package emulator is a second implementation of Daytona's published API
// (../spec): the API's sandbox lifecycle (create from a snapshot with
// labels, get, list by labels, start, stop, archive, recover, delete,
// auto-stop/-archive intervals, last activity, preview URLs) and, per
// sandbox, the toolbox (process/execute, files upload/download and their
// bulk forms, computer use where the sandbox has a display) reached at
// {toolboxProxyUrl}/{sandboxId}/… or under the API's
// /toolbox/{sandboxId}/toolbox/…. Each sandbox is a container on the local
// Docker engine from the image its snapshot maps to; toolbox calls run
// through the engine's exec API (nothing runs inside the container for
// them), and preview URLs reverse-proxy to the container's ports at its
// address on the engine's bridge (emukit: nothing published).
//
// One listener serves it all: the API at /, the toolbox proxy at
// /toolbox/ (toolboxProxyUrl is {base}/toolbox), previews at
// /preview/{sandboxId}/{port}/ (Daytona's own preview URLs are
// https://{port}-{sandboxId}.{proxyDomain}; a client takes the URL as
// answered, so a path-routed one reaches the same thing without DNS).
package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/spec"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
)

// Snapshot is what a snapshot name maps to.
type Snapshot struct {
	// Image is the container image.
	Image string
	// User is the sandbox's user (toolbox calls run as it); "" is root.
	User string
	// ImageEntrypoint runs the image's own entrypoint and command (a
	// desktop image that starts its display); otherwise a shell that only
	// keeps the sandbox alive replaces them.
	ImageEntrypoint bool
	// Geometry is the computer-use display's WxH (default 1024x768, the
	// vendor's computer-use default).
	Geometry string
}

// Config configures an Emulator.
type Config struct {
	// APIKey is the only bearer key the API and the toolbox accept.
	APIKey string
	// Snapshots maps snapshot names to images.
	Snapshots map[string]Snapshot
	// Ports are the container ports the previews reach (DefaultPorts
	// when empty); previews of others answer 502.
	Ports []int
	// Docker is the engine client.
	Docker *dockerclient.Client
	// Minute is how long a minute of autoStopInterval and
	// autoArchiveInterval lasts here (default a minute; tests shorten it).
	Minute time.Duration
	// Logf logs one line (nil: silent). Keys and tokens are never logged.
	Logf func(format string, args ...any)
}

// Label marks the emulator's containers (its value is the sandbox ID).
const Label = "open-bot.daytona-emulator.sandbox"

// Emulator serves the API, the toolbox and previews.
type Emulator struct {
	cfg   Config
	mu    sync.Mutex
	boxes map[string]*sandbox
	api   *http.ServeMux
	tb    *http.ServeMux
	done  chan struct{}
	once  sync.Once
	// base is the emulator's own URL as clients reach it (from the
	// request's Host when not set).
	base emukit.Base
}

// SetBase sets the URL clients reach the emulator at (toolboxProxyUrl and
// preview URLs are made from it).
func (e *Emulator) SetBase(u string) { e.base.Set(u) }

type sandbox struct {
	id, name, snapshot, user string
	container                string
	labels, env              map[string]string
	public                   bool
	state                    string // started | stopped | archived | error
	errorReason              string
	autoStop, autoArchive    int // minutes; autoStop 0 = never
	autoDelete               int
	createdAt, updatedAt     time.Time
	lastActivity, stoppedAt  time.Time
	ports                    map[int]string // container port → containerIP:port
	previewToken             string
	// life serialises the sandbox's start, stop and delete.
	life sync.Mutex
	// sessions are the toolbox's process sessions (guarded by the
	// emulator's mu).
	sessions map[string]*procSession
}

// New makes an emulator; it holds no sandbox until one is created.
func New(cfg Config) (*Emulator, error) {
	if cfg.Docker == nil {
		return nil, errors.New("daytona emulator: no Docker client")
	}
	if cfg.APIKey == "" {
		return nil, errors.New("daytona emulator: no API key")
	}
	if len(cfg.Ports) == 0 {
		cfg.Ports = emukit.DefaultPorts()
	}
	if cfg.Minute <= 0 {
		cfg.Minute = time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	e := &Emulator{cfg: cfg, boxes: map[string]*sandbox{}, done: make(chan struct{})}
	e.routes()
	e.toolboxRoutes()
	go e.reaper()
	return e, nil
}

// Close removes every sandbox's container.
func (e *Emulator) Close(ctx context.Context) error {
	e.once.Do(func() { close(e.done) })
	e.mu.Lock()
	var cs []string
	for id, b := range e.boxes {
		cs = append(cs, b.container)
		delete(e.boxes, id)
	}
	e.mu.Unlock()
	return emukit.RemoveAll(ctx, e.cfg.Docker, cs)
}

// ServeHTTP routes toolbox and preview traffic by path, the rest to the API.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/preview/"):
		e.preview(w, r)
	case strings.HasPrefix(r.URL.Path, "/toolbox/"):
		e.toolbox(w, r)
	default:
		e.api.ServeHTTP(w, r)
	}
}

// ---- answers ----

// writeError answers the API's error envelope (spec.ErrorBody).
func writeError(w http.ResponseWriter, r *http.Request, status int, format string, args ...any) {
	emukit.WriteJSON(w, status, spec.ErrorBody{
		StatusCode: status, Message: fmt.Sprintf(format, args...), Error: http.StatusText(status),
		Timestamp: time.Now().UTC().Format(time.RFC3339), Path: r.URL.Path, Method: r.Method,
	})
}

func (e *Emulator) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return false
	}
	return emukit.EqualSecret(strings.TrimSpace(h[7:]), e.cfg.APIKey)
}

func (e *Emulator) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !e.authorized(r) {
			writeError(w, r, http.StatusUnauthorized, "Invalid credentials")
			return
		}
		h(w, r)
	}
}

func (e *Emulator) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /sandbox", e.auth(e.create))
	m.HandleFunc("GET /sandbox", e.auth(e.list))
	m.HandleFunc("GET /sandbox/{id}", e.auth(e.get))
	m.HandleFunc("DELETE /sandbox/{id}", e.auth(e.delete))
	m.HandleFunc("POST /sandbox/{id}/start", e.auth(e.start))
	m.HandleFunc("POST /sandbox/{id}/stop", e.auth(e.stop))
	m.HandleFunc("POST /sandbox/{id}/archive", e.auth(e.archive))
	m.HandleFunc("POST /sandbox/{id}/recover", e.auth(e.recover))
	m.HandleFunc("POST /sandbox/{id}/autostop/{interval}", e.auth(e.setInterval("autostop")))
	m.HandleFunc("POST /sandbox/{id}/autoarchive/{interval}", e.auth(e.setInterval("autoarchive")))
	m.HandleFunc("POST /sandbox/{id}/last-activity", e.auth(e.lastActivity))
	m.HandleFunc("GET /sandbox/{id}/ports/{port}/preview-url", e.auth(e.previewURL))
	m.HandleFunc("GET /sandbox/{id}/toolbox-proxy-url", e.auth(e.toolboxProxyURL))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "Cannot %s %s", r.Method, r.URL.Path)
	})
	e.api = m
}

// sandboxAnswer is the spec's Sandbox (the fields this emulator has).
type sandboxAnswer struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot,omitempty"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	Target              string            `json:"target"`
	CPU                 float64           `json:"cpu"`
	GPU                 float64           `json:"gpu"`
	Memory              float64           `json:"memory"`
	Disk                float64           `json:"disk"`
	State               string            `json:"state"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Recoverable         *bool             `json:"recoverable,omitempty"`
	AutoStopInterval    float64           `json:"autoStopInterval"`
	AutoArchiveInterval float64           `json:"autoArchiveInterval"`
	AutoDeleteInterval  float64           `json:"autoDeleteInterval"`
	CreatedAt           string            `json:"createdAt"`
	UpdatedAt           string            `json:"updatedAt"`
	LastActivityAt      string            `json:"lastActivityAt"`
	SandboxClass        string            `json:"sandboxClass"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
}

const organization = "emulator-org"

func (e *Emulator) answer(r *http.Request, b *sandbox) sandboxAnswer {
	a := sandboxAnswer{
		ID: b.id, OrganizationID: organization, Name: b.name, Snapshot: b.snapshot, User: b.user,
		Env: map[string]string{}, Labels: map[string]string{}, Public: b.public, Target: "local",
		CPU: 2, Memory: 4, Disk: 10, State: b.state, ErrorReason: b.errorReason,
		AutoStopInterval: float64(b.autoStop), AutoArchiveInterval: float64(b.autoArchive), AutoDeleteInterval: float64(b.autoDelete),
		CreatedAt: stamp(b.createdAt), UpdatedAt: stamp(b.updatedAt), LastActivityAt: stamp(b.lastActivity),
		SandboxClass: "container", ToolboxProxyURL: e.base.For(r) + "/toolbox",
	}
	for k, v := range b.env {
		a.Env[k] = v
	}
	for k, v := range b.labels {
		a.Labels[k] = v
	}
	if b.state == "error" {
		t := true
		a.Recoverable = &t
	}
	return a
}

// listItem is the spec's SandboxListItem (no env).
type listItem struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot,omitempty"`
	User                string            `json:"user"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	Target              string            `json:"target"`
	CPU                 float64           `json:"cpu"`
	GPU                 float64           `json:"gpu"`
	Memory              float64           `json:"memory"`
	Disk                float64           `json:"disk"`
	State               string            `json:"state"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Recoverable         *bool             `json:"recoverable,omitempty"`
	AutoStopInterval    float64           `json:"autoStopInterval"`
	AutoArchiveInterval float64           `json:"autoArchiveInterval"`
	AutoDeleteInterval  float64           `json:"autoDeleteInterval"`
	CreatedAt           string            `json:"createdAt"`
	UpdatedAt           string            `json:"updatedAt"`
	LastActivityAt      string            `json:"lastActivityAt"`
	SandboxClass        string            `json:"sandboxClass"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
}

func (e *Emulator) item(r *http.Request, b *sandbox) listItem {
	a := e.answer(r, b)
	return listItem{ID: a.ID, OrganizationID: a.OrganizationID, Name: a.Name, Snapshot: a.Snapshot, User: a.User,
		Labels: a.Labels, Public: a.Public, Target: a.Target, CPU: a.CPU, GPU: a.GPU, Memory: a.Memory, Disk: a.Disk,
		State: a.State, ErrorReason: a.ErrorReason, Recoverable: a.Recoverable, AutoStopInterval: a.AutoStopInterval,
		AutoArchiveInterval: a.AutoArchiveInterval, AutoDeleteInterval: a.AutoDeleteInterval, CreatedAt: a.CreatedAt,
		UpdatedAt: a.UpdatedAt, LastActivityAt: a.LastActivityAt, SandboxClass: a.SandboxClass, ToolboxProxyURL: a.ToolboxProxyURL}
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// ---- lifecycle ----

type createReq struct {
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	Target              string            `json:"target"`
	AutoStopInterval    *int              `json:"autoStopInterval"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval"`
}

func (e *Emulator) create(w http.ResponseWriter, r *http.Request) {
	var req createReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	if req.Snapshot == "" {
		writeError(w, r, http.StatusBadRequest, "no snapshot given (this emulator makes sandboxes from snapshots only)")
		return
	}
	snap, ok := e.cfg.Snapshots[req.Snapshot]
	if !ok {
		writeError(w, r, http.StatusNotFound, "Snapshot %s not found. Did you add it through the Daytona Dashboard?", req.Snapshot)
		return
	}
	now := time.Now()
	b := &sandbox{
		id: newID(), snapshot: req.Snapshot, user: req.User, labels: req.Labels, env: req.Env, public: req.Public,
		state: "started", autoStop: 15, autoArchive: 7 * 24 * 60, autoDelete: -1,
		createdAt: now, updatedAt: now, lastActivity: now, previewToken: emukit.RandomHex(24),
	}
	b.name = req.Name
	if b.name == "" {
		b.name = b.id
	}
	if b.user == "" {
		b.user = snap.User
	}
	if b.user == "" {
		b.user = "root"
	}
	if b.labels == nil {
		b.labels = map[string]string{}
	}
	if req.AutoStopInterval != nil {
		b.autoStop = *req.AutoStopInterval
	}
	if req.AutoArchiveInterval != nil {
		b.autoArchive = *req.AutoArchiveInterval
	}
	if req.AutoDeleteInterval != nil {
		b.autoDelete = *req.AutoDeleteInterval
	}
	e.mu.Lock()
	for _, o := range e.boxes {
		if o.name == b.name {
			e.mu.Unlock()
			writeError(w, r, http.StatusConflict, "Sandbox with name %s already exists", b.name)
			return
		}
	}
	e.mu.Unlock()
	var env []string
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	id, err := e.startContainer(r.Context(), b, snap, env)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "Failed to create sandbox: %v", err)
		return
	}
	b.container = id
	e.mu.Lock()
	e.boxes[b.id] = b
	a := e.answer(r, b)
	e.mu.Unlock()
	e.cfg.Logf("daytona emulator: created sandbox %s from snapshot %s", b.id, b.snapshot)
	emukit.WriteJSON(w, http.StatusOK, a)
}

func (e *Emulator) startContainer(ctx context.Context, b *sandbox, snap Snapshot, env []string) (string, error) {
	id, ports, err := emukit.Create(ctx, e.cfg.Docker, emukit.Container{
		Name: "daytona-emu-" + b.id, Image: snap.Image, Hostname: "daytona", Env: env,
		Label: Label, ID: b.id, Ports: e.cfg.Ports, ImageEntrypoint: snap.ImageEntrypoint,
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
// reached.
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

// lookup finds a sandbox by ID or name and brings its state up to date: a
// started sandbox whose container is not running is in error (the machine
// was lost behind the API's back), recoverable.
func (e *Emulator) lookup(w http.ResponseWriter, r *http.Request) (*sandbox, bool) {
	key := r.PathValue("id")
	e.mu.Lock()
	b := e.boxes[key]
	if b == nil {
		for _, o := range e.boxes {
			if o.name == key {
				b = o
				break
			}
		}
	}
	e.mu.Unlock()
	if b == nil {
		writeError(w, r, http.StatusNotFound, "Sandbox with ID or name %s not found", key)
		return nil, false
	}
	e.sync(r.Context(), b)
	return b, true
}

func (e *Emulator) sync(ctx context.Context, b *sandbox) {
	e.mu.Lock()
	started := b.state == "started"
	e.mu.Unlock()
	if !started {
		return
	}
	c, err := e.cfg.Docker.ContainerInspect(ctx, b.container, dockerclient.ContainerInspectOptions{})
	running := err == nil && c.Container.State != nil && c.Container.State.Running
	if err != nil && ctx.Err() != nil {
		return
	}
	if !running {
		e.mu.Lock()
		if b.state == "started" {
			b.state, b.errorReason, b.updatedAt = "error", "the sandbox's container is not running", time.Now()
		}
		e.mu.Unlock()
	}
}

func (e *Emulator) get(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	e.mu.Lock()
	a := e.answer(r, b)
	e.mu.Unlock()
	emukit.WriteJSON(w, http.StatusOK, a)
}

func (e *Emulator) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var labels map[string]string
	if v := q.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &labels); err != nil {
			writeError(w, r, http.StatusBadRequest, "labels: invalid JSON: %v", err)
			return
		}
	}
	states := map[string]bool{}
	for _, s := range q["states"] {
		for _, x := range strings.Split(s, ",") {
			states[x] = true
		}
	}
	e.mu.Lock()
	var bs []*sandbox
	for _, b := range e.boxes {
		bs = append(bs, b)
	}
	e.mu.Unlock()
	items := []listItem{}
	sort.Slice(bs, func(i, j int) bool { return bs[i].createdAt.Before(bs[j].createdAt) })
	for _, b := range bs {
		e.sync(r.Context(), b)
		e.mu.Lock()
		ok := len(states) == 0 || states[b.state]
		for k, v := range labels {
			if b.labels[k] != v {
				ok = false
			}
		}
		if ok {
			items = append(items, e.item(r, b))
		}
		e.mu.Unlock()
	}
	// One page: nextCursor is null.
	emukit.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": nil})
}

func (e *Emulator) delete(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	b.life.Lock()
	defer b.life.Unlock()
	if err := emukit.Remove(r.Context(), e.cfg.Docker, b.container); err != nil {
		writeError(w, r, http.StatusInternalServerError, "Failed to delete sandbox: %v", err)
		return
	}
	e.mu.Lock()
	delete(e.boxes, b.id)
	b.state, b.updatedAt = "destroyed", time.Now()
	a := e.answer(r, b)
	e.mu.Unlock()
	e.cfg.Logf("daytona emulator: deleted sandbox %s", b.id)
	emukit.WriteJSON(w, http.StatusOK, a)
}

// startHeld starts a stopped or archived sandbox's container.
func (e *Emulator) startHeld(ctx context.Context, b *sandbox) error {
	if err := e.startAndMap(ctx, b, b.container); err != nil {
		return err
	}
	e.mu.Lock()
	now := time.Now()
	b.state, b.errorReason, b.updatedAt, b.lastActivity = "started", "", now, now
	e.mu.Unlock()
	return nil
}

func (e *Emulator) start(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	b.life.Lock()
	defer b.life.Unlock()
	e.mu.Lock()
	state := b.state
	e.mu.Unlock()
	switch state {
	case "started":
	case "stopped", "archived":
		if err := e.startHeld(r.Context(), b); err != nil {
			writeError(w, r, http.StatusInternalServerError, "Failed to start sandbox: %v", err)
			return
		}
		e.cfg.Logf("daytona emulator: started sandbox %s (was %s)", b.id, state)
	default:
		writeError(w, r, http.StatusBadRequest, "Sandbox is in %s state and cannot be started (recover it first)", state)
		return
	}
	e.mu.Lock()
	a := e.answer(r, b)
	e.mu.Unlock()
	emukit.WriteJSON(w, http.StatusOK, a)
}

func (e *Emulator) stopHeld(ctx context.Context, b *sandbox) error {
	timeout := 5
	if _, err := e.cfg.Docker.ContainerStop(ctx, b.container, dockerclient.ContainerStopOptions{Timeout: &timeout}); err != nil {
		return err
	}
	e.mu.Lock()
	now := time.Now()
	b.state, b.updatedAt, b.stoppedAt = "stopped", now, now
	e.mu.Unlock()
	return nil
}

func (e *Emulator) stop(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	b.life.Lock()
	defer b.life.Unlock()
	e.mu.Lock()
	state := b.state
	e.mu.Unlock()
	switch state {
	case "stopped", "archived":
	case "started", "error":
		if err := e.stopHeld(r.Context(), b); err != nil {
			writeError(w, r, http.StatusInternalServerError, "Failed to stop sandbox: %v", err)
			return
		}
	}
	e.mu.Lock()
	a := e.answer(r, b)
	e.mu.Unlock()
	emukit.WriteJSON(w, http.StatusOK, a)
}

func (e *Emulator) archive(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch b.state {
	case "stopped", "archived":
		b.state, b.updatedAt = "archived", time.Now()
		emukit.WriteJSON(w, http.StatusOK, e.answer(r, b))
	default:
		writeError(w, r, http.StatusBadRequest, "Sandbox is not stopped")
	}
}

func (e *Emulator) recover(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	b.life.Lock()
	defer b.life.Unlock()
	e.mu.Lock()
	state := b.state
	e.mu.Unlock()
	if state != "error" {
		writeError(w, r, http.StatusBadRequest, "Sandbox must be in error state to recover")
		return
	}
	if r.URL.Query().Get("skipStart") == "true" {
		e.mu.Lock()
		b.state, b.errorReason, b.updatedAt = "stopped", "", time.Now()
		e.mu.Unlock()
	} else if err := e.startHeld(r.Context(), b); err != nil {
		writeError(w, r, http.StatusInternalServerError, "Failed to recover sandbox: %v", err)
		return
	}
	e.cfg.Logf("daytona emulator: recovered sandbox %s", b.id)
	e.mu.Lock()
	a := e.answer(r, b)
	e.mu.Unlock()
	emukit.WriteJSON(w, http.StatusOK, a)
}

func (e *Emulator) setInterval(which string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := e.lookup(w, r)
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(r.PathValue("interval"), 64)
		if err != nil || f < 0 || f != float64(int(f)) {
			writeError(w, r, http.StatusBadRequest, "interval must be a whole number of minutes ≥ 0")
			return
		}
		e.mu.Lock()
		if which == "autostop" {
			b.autoStop = int(f)
		} else {
			b.autoArchive = int(f)
		}
		b.updatedAt = time.Now()
		a := e.answer(r, b)
		e.mu.Unlock()
		emukit.WriteJSON(w, http.StatusOK, a)
	}
}

func (e *Emulator) lastActivity(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	e.touch(b)
	w.WriteHeader(http.StatusCreated)
}

func (e *Emulator) touch(b *sandbox) {
	e.mu.Lock()
	if b.state == "started" {
		b.lastActivity = time.Now()
	}
	e.mu.Unlock()
}

func (e *Emulator) previewURL(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, http.StatusBadRequest, "invalid port")
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]string{
		"sandboxId": b.id, "url": e.base.For(r) + "/preview/" + b.id + "/" + strconv.Itoa(port),
		"token": b.previewToken,
	})
}

func (e *Emulator) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	if _, ok := e.lookup(w, r); !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]string{"url": e.base.For(r) + "/toolbox"})
}

// reaper stops started sandboxes idle past their autoStopInterval and
// archives stopped ones past their autoArchiveInterval.
func (e *Emulator) reaper() {
	every := e.cfg.Minute / 20
	if every < 50*time.Millisecond {
		every = 50 * time.Millisecond
	}
	if every > 5*time.Second {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case now := <-t.C:
			e.mu.Lock()
			var stop []*sandbox
			for _, b := range e.boxes {
				switch {
				case b.state == "started" && b.autoStop > 0 && now.Sub(b.lastActivity) > time.Duration(b.autoStop)*e.cfg.Minute:
					stop = append(stop, b)
				case b.state == "stopped" && b.autoArchive > 0 && now.Sub(b.stoppedAt) > time.Duration(b.autoArchive)*e.cfg.Minute:
					b.state, b.updatedAt = "archived", now
				}
			}
			e.mu.Unlock()
			for _, b := range stop {
				b.life.Lock()
				e.mu.Lock()
				still := b.state == "started" && now.Sub(b.lastActivity) > time.Duration(b.autoStop)*e.cfg.Minute
				e.mu.Unlock()
				if still {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					if err := e.stopHeld(ctx, b); err != nil {
						e.cfg.Logf("daytona emulator: auto-stop %s: %v", b.id, err)
					} else {
						e.cfg.Logf("daytona emulator: auto-stopped idle sandbox %s", b.id)
					}
					cancel()
				}
				b.life.Unlock()
			}
		}
	}
}

// ---- helpers ----

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

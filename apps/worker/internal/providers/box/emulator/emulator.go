// Package emulator is a second implementation of the Box API as
// ../spec/box-openapi.yaml writes it down: boxes with a TTL (create, get,
// list, stop = archive, resume under the same id, delete), shell commands
// of at most 60 s, and one desktop per box whose noVNC page sits behind a
// secret in its URL. Each box is a container on the local Docker engine
// (the stock desktop image, open-bot/e2b-desktop:dev by default), whose
// display :0 (Xvfb and XFCE) the emulator brings up when the box starts,
// as Box's boxes come with their desktop. Commands run with the engine's
// exec API: `timeout -s KILL N sh -s` with the API's command on its stdin
// (never in an argv); stop stops the container (its filesystem is kept),
// resume starts it again, delete removes it; a box whose TTL runs out is
// stopped the same way. The desktop is x11vnc on :0 behind websockify
// (noVNC's web files) on a container port reached at the container's
// bridge address (emukit: nothing published),
// reached at {base}/desktop/{id}/{secret}/.
//
// The account's dashboard secrets (Config.AccountEnv, AccountFiles) are
// applied as Box's docs say: to a box created or resumed without noEnv,
// its commands and desktop get the env vars and the files are written
// under the box user's home; a create or resume with noEnv: true applies
// none. Every create and resume is recorded as received (LifeCalls).
package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/moby/moby/api/pkg/stdcopy"
	dockerclient "github.com/moby/moby/client"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
)

// Base is the API's base path.
const Base = "/api/box/v1"

// Label marks the emulator's containers (its value is the box id).
const Label = "open-bot.box-emulator.box"

// DesktopPort is the container port of the desktop's websockify.
const DesktopPort = 6079

// Config configures an Emulator.
type Config struct {
	// APIKey is the only bearer key the API accepts (box_…).
	APIKey string
	// Image is every box's image (default open-bot/e2b-desktop:dev).
	Image string
	// User runs commands and the desktop (default "user").
	User string
	// Docker is the engine client.
	Docker *dockerclient.Client
	// Logf logs one line (nil: silent). Keys and secrets are never logged.
	Logf func(format string, args ...any)
	// AccountEnv is the account's dashboard environment variables: every
	// box created or resumed without noEnv has them in the environment of
	// its commands and of its desktop's processes.
	AccountEnv map[string]string
	// AccountFiles is the account's dashboard secret files (a path relative
	// to the box user's home → its contents), written into every box
	// created or resumed without noEnv.
	AccountFiles map[string]string
}

// LifeCall is one create or resume as the emulator received it.
type LifeCall struct {
	// Op is "create" or "resume".
	Op string
	// Box is the box's id.
	Box string
	// NoEnv is the body's noEnv (nil: the body had none).
	NoEnv *bool
}

// Emulator serves the API and the desktop pages.
type Emulator struct {
	cfg   Config
	mux   *http.ServeMux
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	boxes map[string]*box
	// fail: injected answers (status) for the next API requests.
	fail []int
	// commands counts the commands run (tests).
	commands int
	// life records every create and resume received (tests).
	life []LifeCall
	// base is the emulator's own URL as clients reach it.
	base emukit.Base
}

// SetBase sets the URL clients reach the emulator at (desktop URLs are
// made from it).
func (e *Emulator) SetBase(u string) { e.base.Set(u) }

type box struct {
	id             string
	container      string
	status         string // running | archived
	ttl            int
	expiresAt      time.Time
	createdAt      time.Time
	archivedReason string
	desktopPort    string // containerIP:port of the desktop's websockify
	desktopSecret  string
	desktopStarted bool
	// accountEnv: the account's secrets apply (the box's last create or
	// resume came without noEnv).
	accountEnv bool
	// life serialises the box's start, stop and delete.
	life sync.Mutex
}

// New makes an emulator; it holds no box until one is created.
func New(cfg Config) (*Emulator, error) {
	if cfg.Docker == nil {
		return nil, errors.New("box emulator: no Docker client")
	}
	if !strings.HasPrefix(cfg.APIKey, "box_") {
		return nil, errors.New("box emulator: the API key must be a box_ key")
	}
	if cfg.Image == "" {
		cfg.Image = "open-bot/e2b-desktop:dev"
	}
	if cfg.User == "" {
		cfg.User = "user"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	e := &Emulator{cfg: cfg, boxes: map[string]*box{}, done: make(chan struct{}), mux: http.NewServeMux()}
	e.routes()
	go e.reaper()
	return e, nil
}

// FailNext makes the next len(statuses) API requests (after their key is
// checked) answer those statuses with the error envelope: 429 with
// Retry-After, 5xx as an outage.
func (e *Emulator) FailNext(statuses ...int) {
	e.mu.Lock()
	e.fail = append(e.fail, statuses...)
	e.mu.Unlock()
}

// Commands is how many commands ran.
func (e *Emulator) Commands() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.commands
}

// LifeCalls lists every create and resume received, in order.
func (e *Emulator) LifeCalls() []LifeCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]LifeCall(nil), e.life...)
}

func (e *Emulator) recordLife(op, id string, noEnv *bool) {
	e.mu.Lock()
	e.life = append(e.life, LifeCall{Op: op, Box: id, NoEnv: noEnv})
	e.mu.Unlock()
}

// Container is the container of box id ("" when there is none).
func (e *Emulator) Container(id string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.boxes[id]; b != nil {
		return b.container
	}
	return ""
}

// Expire makes box id's TTL run out now (the reaper archives it).
func (e *Emulator) Expire(id string) {
	e.mu.Lock()
	if b := e.boxes[id]; b != nil && b.status == "running" {
		b.expiresAt = time.Now().Add(-time.Millisecond)
	}
	e.mu.Unlock()
}

// ExpiresAt is box id's TTL end (zero when archived or unknown).
func (e *Emulator) ExpiresAt(id string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.boxes[id]; b != nil && b.status == "running" {
		return b.expiresAt
	}
	return time.Time{}
}

// Close removes every box's container.
func (e *Emulator) Close(ctx context.Context) error {
	e.once.Do(func() { close(e.done) })
	e.mu.Lock()
	var cs []string
	for _, b := range e.boxes {
		cs = append(cs, b.container)
	}
	e.boxes = map[string]*box{}
	e.mu.Unlock()
	return emukit.RemoveAll(ctx, e.cfg.Docker, cs)
}

// ServeHTTP implements http.Handler.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.mux.ServeHTTP(w, r) }

func (e *Emulator) routes() {
	a := func(h http.HandlerFunc) http.HandlerFunc { return e.auth(h) }
	e.mux.HandleFunc("GET "+Base+"/boxes", a(e.list))
	e.mux.HandleFunc("POST "+Base+"/boxes", a(e.create))
	e.mux.HandleFunc("GET "+Base+"/boxes/{id}", a(e.get))
	e.mux.HandleFunc("DELETE "+Base+"/boxes/{id}", a(e.delete))
	e.mux.HandleFunc("POST "+Base+"/boxes/{id}/stop", a(e.stop))
	e.mux.HandleFunc("POST "+Base+"/boxes/{id}/resume", a(e.resume))
	e.mux.HandleFunc("POST "+Base+"/boxes/{id}/commands", a(e.command))
	e.mux.HandleFunc("POST "+Base+"/boxes/{id}/desktop", a(e.desktop))
	e.mux.HandleFunc(Base+"/", a(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "box_not_found", "no such route: %s %s", r.Method, r.URL.Path)
	}))
	e.mux.HandleFunc("/desktop/{id}/{secret}/", e.desktopPage)
}

// ---- envelope ----

func requestID() string { return "req_" + emukit.RandomHex(16) }

func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	emukit.WriteJSON(w, status, map[string]any{"ok": false, "type": "box.error", "status": status, "code": code,
		"message": fmt.Sprintf(format, args...), "requestId": requestID()})
}

func (e *Emulator) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(e.cfg.APIKey)) != 1 {
			writeError(w, http.StatusUnauthorized, "unauthorized", "invalid or missing API key")
			return
		}
		e.mu.Lock()
		var status int
		if len(e.fail) > 0 {
			status, e.fail = e.fail[0], e.fail[1:]
		}
		e.mu.Unlock()
		switch {
		case status == http.StatusTooManyRequests:
			w.Header().Set("Retry-After", "1")
			writeError(w, status, "rate_limited", "too many requests; retry after 1 s")
			return
		case status == http.StatusServiceUnavailable:
			writeError(w, status, "unavailable", "the service is unavailable")
			return
		case status >= 500:
			writeError(w, status, "internal", "internal error")
			return
		}
		h(w, r)
	}
}

type boxJSON struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	TTLSeconds     int    `json:"ttlSeconds"`
	ExpiresAt      string `json:"expiresAt,omitempty"`
	CreatedAt      string `json:"createdAt"`
	ArchivedReason string `json:"archivedReason,omitempty"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (e *Emulator) view(b *box) boxJSON {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := boxJSON{ID: b.id, Status: b.status, TTLSeconds: b.ttl, CreatedAt: stamp(b.createdAt)}
	if b.status == "running" {
		v.ExpiresAt = stamp(b.expiresAt)
	} else {
		v.ArchivedReason = b.archivedReason
	}
	return v
}

func (e *Emulator) answer(w http.ResponseWriter, status int, b *box) {
	emukit.WriteJSON(w, status, map[string]any{"ok": true, "type": "box", "box": e.view(b)})
}

// ---- bodies ----

// decode reads a JSON object into v, refusing unknown fields (an empty
// body is the empty object).
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// lifeOf reads a create's or a resume's body: the TTL (default 3600) and
// noEnv (nil when absent: false).
func lifeOf(w http.ResponseWriter, r *http.Request) (int, *bool, bool) {
	var body struct {
		TTLSeconds *int  `json:"ttlSeconds"`
		NoEnv      *bool `json:"noEnv"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "body: %v", err)
		return 0, nil, false
	}
	ttl := 3600
	if body.TTLSeconds != nil {
		ttl = *body.TTLSeconds
	}
	if ttl < 60 || ttl > 86400 {
		writeError(w, http.StatusBadRequest, "invalid_request", "ttlSeconds must be 60..86400")
		return 0, nil, false
	}
	return ttl, body.NoEnv, true
}

// ---- lifecycle ----

func (e *Emulator) lookup(w http.ResponseWriter, r *http.Request) (*box, bool) {
	id := r.PathValue("id")
	e.mu.Lock()
	b := e.boxes[id]
	e.mu.Unlock()
	if b == nil {
		writeError(w, http.StatusNotFound, "box_not_found", "box %s not found", id)
		return nil, false
	}
	return b, true
}

func (e *Emulator) list(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	bs := make([]*box, 0, len(e.boxes))
	for _, b := range e.boxes {
		bs = append(bs, b)
	}
	e.mu.Unlock()
	sort.Slice(bs, func(i, j int) bool { return bs[i].createdAt.Before(bs[j].createdAt) })
	out := make([]boxJSON, 0, len(bs))
	for _, b := range bs {
		out = append(out, e.view(b))
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "type": "box.list", "boxes": out})
}

func (e *Emulator) get(w http.ResponseWriter, r *http.Request) {
	if b, ok := e.lookup(w, r); ok {
		e.answer(w, http.StatusOK, b)
	}
}

func (e *Emulator) create(w http.ResponseWriter, r *http.Request) {
	ttl, noEnv, ok := lifeOf(w, r)
	if !ok {
		return
	}
	now := time.Now()
	b := &box{id: newID(), status: "running", ttl: ttl, createdAt: now, expiresAt: now.Add(time.Duration(ttl) * time.Second),
		accountEnv: noEnv == nil || !*noEnv}
	e.recordLife("create", b.id, noEnv)
	b.life.Lock()
	defer b.life.Unlock()
	c, err := e.startContainer(r.Context(), b)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "start the box: %v", err)
		return
	}
	b.container = c
	e.mu.Lock()
	b.expiresAt = time.Now().Add(time.Duration(ttl) * time.Second)
	e.boxes[b.id] = b
	e.mu.Unlock()
	e.cfg.Logf("box emulator: created %s", b.id)
	e.answer(w, http.StatusCreated, b)
}

// emukit.KeepAlive is the box's main process when the image's own is not used.
func (e *Emulator) startContainer(ctx context.Context, b *box) (string, error) {
	id, ports, err := emukit.Create(ctx, e.cfg.Docker, emukit.Container{
		Name: "box-emu-" + b.id, Image: e.cfg.Image, Hostname: "box",
		Label: Label, ID: b.id, Ports: []int{DesktopPort}, ImageEntrypoint: true,
	})
	if err != nil {
		return "", err
	}
	if err := e.boot(ctx, b, id, ports); err != nil {
		_ = emukit.Remove(context.WithoutCancel(ctx), e.cfg.Docker, id)
		return "", err
	}
	if err := e.writeAccountFiles(ctx, b, id); err != nil {
		_ = emukit.Remove(context.WithoutCancel(ctx), e.cfg.Docker, id)
		return "", err
	}
	return id, nil
}

// envOf is the environment the account's secrets give b's processes:
// AccountEnv unless b's last create or resume came with noEnv.
func (e *Emulator) envOf(b *box) []string {
	e.mu.Lock()
	apply := b.accountEnv
	e.mu.Unlock()
	if !apply || len(e.cfg.AccountEnv) == 0 {
		return nil
	}
	env := make([]string, 0, len(e.cfg.AccountEnv))
	for k, v := range e.cfg.AccountEnv {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// writeAccountFiles writes AccountFiles under the box user's home in
// container id, unless b's last create or resume came with noEnv.
func (e *Emulator) writeAccountFiles(ctx context.Context, b *box, id string) error {
	e.mu.Lock()
	apply := b.accountEnv
	e.mu.Unlock()
	if !apply || len(e.cfg.AccountFiles) == 0 {
		return nil
	}
	paths := make([]string, 0, len(e.cfg.AccountFiles))
	for p := range e.cfg.AccountFiles {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var script strings.Builder
	script.WriteString("set -e; umask 077\n")
	for _, p := range paths {
		if p == "" || strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..") {
			return fmt.Errorf("account file %q: not a path under the home", p)
		}
		f := `"$HOME"/` + shq(p)
		fmt.Fprintf(&script, "mkdir -p \"$(dirname %s)\"; printf '%%s' %s >%s\n", f, shq(e.cfg.AccountFiles[p]), f)
	}
	res, err := e.exec(ctx, id, nil, script.String(), "", 20)
	if err == nil && res.code != 0 {
		err = fmt.Errorf("exit %d: %s", res.code, res.stderr)
	}
	if err != nil {
		return fmt.Errorf("the account's secret files: %w", err)
	}
	return nil
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// desktopBoot brings display :0 up (Xvfb and an XFCE session), waiting
// until the window manager manages the panel and the desktop.
const desktopBoot = `set -u
dir=/tmp/box-desktop; mkdir -p "$dir"
up() { xdpyinfo -display :0 >/dev/null 2>&1; }
if ! up; then
  rm -f /tmp/.X0-lock /tmp/.X11-unix/X0 2>/dev/null
  setsid Xvfb :0 -ac -screen 0 1280x800x24 -retro -dpi 96 -nolisten tcp >"$dir/xvfb.log" 2>&1 </dev/null &
  i=0; while ! up; do i=$((i+1)); [ $i -gt 150 ] && { echo "Xvfb :0 did not come up" >&2; exit 1; }; sleep 0.1; done
  date -u +%s%N >"$dir/booted"
  DISPLAY=:0 setsid startxfce4 >"$dir/xfce.log" 2>&1 </dev/null &
  i=0; while [ "$(DISPLAY=:0 xprop -root _NET_CLIENT_LIST 2>/dev/null | tr ',' '\n' | grep -c 0x)" -lt 2 ]; do i=$((i+1)); [ $i -gt 300 ] && break; sleep 0.1; done
fi`

// boot brings :0 up in the started container id (ports: where its
// ports are reached) and records the desktop port.
func (e *Emulator) boot(ctx context.Context, b *box, id string, ports map[int]string) error {
	hostPort := ports[DesktopPort]
	if hostPort == "" {
		return errors.New("the container's desktop port cannot be reached")
	}
	res, err := e.exec(ctx, id, e.envOf(b), desktopBoot, "", 60)
	if err != nil {
		return err
	}
	if res.code != 0 {
		return fmt.Errorf("desktop :0: exit %d: %s", res.code, res.stderr)
	}
	e.mu.Lock()
	b.desktopPort, b.desktopSecret, b.desktopStarted = hostPort, emukit.RandomHex(32), false
	e.mu.Unlock()
	return nil
}

// archive stops b's container (its filesystem is kept); b.life is held.
func (e *Emulator) archive(ctx context.Context, b *box, reason string) error {
	timeout := 5
	if _, err := e.cfg.Docker.ContainerStop(ctx, b.container, dockerclient.ContainerStopOptions{Timeout: &timeout}); err != nil && !strings.Contains(err.Error(), "No such container") {
		return err
	}
	e.mu.Lock()
	b.status, b.archivedReason, b.desktopStarted, b.desktopSecret = "archived", reason, false, ""
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
	running := b.status == "running"
	e.mu.Unlock()
	if running {
		// The snapshot is the container's own filesystem, kept by stop.
		if err := e.archive(r.Context(), b, "stopped"); err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "stop: %v", err)
			return
		}
		e.cfg.Logf("box emulator: archived %s", b.id)
	}
	e.answer(w, http.StatusOK, b)
}

func (e *Emulator) resume(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	ttl, noEnv, ok := lifeOf(w, r)
	if !ok {
		return
	}
	e.recordLife("resume", b.id, noEnv)
	b.life.Lock()
	defer b.life.Unlock()
	e.mu.Lock()
	archived := b.status == "archived"
	b.accountEnv = noEnv == nil || !*noEnv
	e.mu.Unlock()
	if archived {
		ports, err := emukit.Start(r.Context(), e.cfg.Docker, b.container)
		if err == nil {
			err = e.boot(r.Context(), b, b.container, ports)
		}
		if err == nil {
			err = e.writeAccountFiles(r.Context(), b, b.container)
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "resume: %v", err)
			return
		}
		e.cfg.Logf("box emulator: resumed %s", b.id)
	}
	e.mu.Lock()
	b.status, b.archivedReason, b.ttl = "running", "", ttl
	b.expiresAt = time.Now().Add(time.Duration(ttl) * time.Second)
	e.mu.Unlock()
	e.answer(w, http.StatusOK, b)
}

func (e *Emulator) delete(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	b.life.Lock()
	defer b.life.Unlock()
	if err := emukit.Remove(r.Context(), e.cfg.Docker, b.container); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "delete: %v", err)
		return
	}
	e.mu.Lock()
	delete(e.boxes, b.id)
	e.mu.Unlock()
	e.cfg.Logf("box emulator: deleted %s", b.id)
	emukit.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "type": "box.deleted", "id": b.id})
}

// reaper archives running boxes whose TTL ran out.
func (e *Emulator) reaper() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case now := <-t.C:
			e.mu.Lock()
			var due []*box
			for _, b := range e.boxes {
				if b.status == "running" && now.After(b.expiresAt) {
					due = append(due, b)
				}
			}
			e.mu.Unlock()
			for _, b := range due {
				b.life.Lock()
				e.mu.Lock()
				still := b.status == "running" && time.Now().After(b.expiresAt)
				e.mu.Unlock()
				if still {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					if err := e.archive(ctx, b, "ttl_expired"); err != nil {
						e.cfg.Logf("box emulator: expire %s: %v", b.id, err)
					} else {
						e.cfg.Logf("box emulator: %s's TTL ran out: archived", b.id)
					}
					cancel()
				}
				b.life.Unlock()
			}
		}
	}
}

// running answers 409 unless b runs.
func (e *Emulator) running(w http.ResponseWriter, b *box) bool {
	e.mu.Lock()
	st, why := b.status, b.archivedReason
	e.mu.Unlock()
	if st != "running" {
		writeError(w, http.StatusConflict, "box_not_running", "box %s is archived (%s): resume it first", b.id, why)
		return false
	}
	return true
}

// ---- commands ----

// MaxOutput is the most of stdout and of stderr a command answer carries.
const MaxOutput = 16 << 20

type execResult struct {
	code           int
	stdout, stderr string
	timedOut       bool
}

// capWriter keeps at most max bytes.
type capWriter struct {
	buf bytes.Buffer
	max int
}

func (c *capWriter) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// exec runs command (sh) in container id as the box's user, with env
// added to the container's environment, killed (its process group) after
// timeout seconds.
func (e *Emulator) exec(ctx context.Context, id string, env []string, command, cwd string, timeout int) (execResult, error) {
	if cwd == "" {
		cwd = "/home/" + e.cfg.User
	}
	r, err := e.cfg.Docker.ExecCreate(ctx, id, dockerclient.ExecCreateOptions{
		User: e.cfg.User, WorkingDir: cwd, Env: env, Cmd: []string{"timeout", "-s", "KILL", strconv.Itoa(timeout), "sh", "-s"},
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return execResult{}, err
	}
	att, err := e.cfg.Docker.ExecAttach(ctx, r.ID, dockerclient.ExecAttachOptions{})
	if err != nil {
		return execResult{}, err
	}
	defer att.Close()
	start := time.Now()
	go func() {
		_, _ = io.Copy(att.Conn, strings.NewReader(command+"\n"))
		_ = att.CloseWrite()
	}()
	out, errb := &capWriter{max: MaxOutput}, &capWriter{max: MaxOutput}
	if _, err := stdcopy.StdCopy(out, errb, att.Reader); err != nil {
		return execResult{}, err
	}
	var code int
	for i := 0; ; i++ {
		ins, err := e.cfg.Docker.ExecInspect(ctx, r.ID, dockerclient.ExecInspectOptions{})
		if err != nil {
			return execResult{}, err
		}
		if !ins.Running {
			code = ins.ExitCode
			break
		}
		if i > 500 {
			return execResult{}, errors.New("the command's output ended but it still runs")
		}
		time.Sleep(10 * time.Millisecond)
	}
	timedOut := code == 137 && time.Since(start) >= time.Duration(timeout)*time.Second
	return execResult{code: code, stdout: strings.ToValidUTF8(out.buf.String(), string(utf8.RuneError)),
		stderr: strings.ToValidUTF8(errb.buf.String(), string(utf8.RuneError)), timedOut: timedOut}, nil
}

func (e *Emulator) command(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	var body struct {
		Command        *string `json:"command"`
		Cwd            string  `json:"cwd"`
		TimeoutSeconds *int    `json:"timeoutSeconds"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "body: %v", err)
		return
	}
	timeout := 60
	if body.TimeoutSeconds != nil {
		timeout = *body.TimeoutSeconds
	}
	switch {
	case body.Command == nil || *body.Command == "":
		writeError(w, http.StatusBadRequest, "invalid_request", "command is required")
		return
	case len(*body.Command) > 1<<20:
		writeError(w, http.StatusBadRequest, "invalid_request", "command is longer than 1 MiB")
		return
	case timeout < 1 || timeout > 60:
		writeError(w, http.StatusBadRequest, "invalid_request", "timeoutSeconds must be 1..60")
		return
	case body.Cwd != "" && !strings.HasPrefix(body.Cwd, "/"):
		writeError(w, http.StatusBadRequest, "invalid_request", "cwd must be an absolute path")
		return
	}
	if !e.running(w, b) {
		return
	}
	e.mu.Lock()
	e.commands++
	e.mu.Unlock()
	res, err := e.exec(r.Context(), b.container, e.envOf(b), *body.Command, body.Cwd, timeout)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "run the command: %v", err)
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "type": "box.command", "exitCode": res.code,
		"stdout": res.stdout, "stderr": res.stderr, "timedOut": res.timedOut})
}

// ---- desktop ----

// desktopStart runs x11vnc on :0 behind websockify (noVNC's web files).
var desktopStart = `dir=/tmp/box-desktop; mkdir -p "$dir"
web=/usr/share/novnc; [ -d "$web" ] || web=/opt/noVNC
setsid x11vnc -display :0 -rfbport 5999 -localhost -shared -forever -nopw -noxdamage -quiet >"$dir/x11vnc.log" 2>&1 </dev/null &
setsid websockify --web "$web" ` + strconv.Itoa(DesktopPort) + ` localhost:5999 >"$dir/websockify.log" 2>&1 </dev/null &
exit 0`

func (e *Emulator) desktop(w http.ResponseWriter, r *http.Request) {
	b, ok := e.lookup(w, r)
	if !ok {
		return
	}
	if r.URL.Query().Get("vnc") != "1" {
		writeError(w, http.StatusBadRequest, "invalid_request", "vnc=1 is required")
		return
	}
	if !e.running(w, b) {
		return
	}
	e.mu.Lock()
	started, port, secret := b.desktopStarted, b.desktopPort, b.desktopSecret
	b.desktopStarted = true
	e.mu.Unlock()
	if !started {
		if res, err := e.exec(r.Context(), b.container, e.envOf(b), desktopStart, "", 10); err != nil || res.code != 0 {
			e.mu.Lock()
			b.desktopStarted = false
			e.mu.Unlock()
			writeError(w, http.StatusInternalServerError, "internal", "start the desktop: %v %s", err, res.stderr)
			return
		}
	}
	// Provisioning until websockify answers its page.
	ready := false
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+port+"/vnc.html", nil); err == nil {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	out := map[string]any{"ok": true, "type": "box.desktop", "provisioning": !ready}
	if ready {
		out["desktopUrl"] = e.base.For(r) + "/desktop/" + b.id + "/" + secret + "/vnc.html"
	}
	emukit.WriteJSON(w, http.StatusOK, out)
}

// desktopPage proxies the box's noVNC page and its websocket to the
// container's websockify, for the box's current secret only.
func (e *Emulator) desktopPage(w http.ResponseWriter, r *http.Request) {
	id, secret := r.PathValue("id"), r.PathValue("secret")
	e.mu.Lock()
	b := e.boxes[id]
	var port, want string
	var up bool
	if b != nil {
		port, want, up = b.desktopPort, b.desktopSecret, b.status == "running" && b.desktopStarted
	}
	e.mu.Unlock()
	if b == nil || want == "" || subtle.ConstantTimeCompare([]byte(secret), []byte(want)) != 1 || !up {
		http.Error(w, "no such desktop", http.StatusNotFound)
		return
	}
	target := &url.URL{Scheme: "http", Host: port}
	prefix := "/desktop/" + id + "/" + secret
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
		pr.Out.URL.RawPath = ""
		pr.Out.Host = target.Host
	}, FlushInterval: -1}
	rp.ServeHTTP(w, r)
}

// ---- helpers ----

const idChars = "abcdefghijklmnopqrstuvwxyz0123456789"

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idChars[int(b[i])%len(idChars)]
	}
	return "bx_" + string(b)
}

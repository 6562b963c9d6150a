// Package osworld serves OSWorld's guest API (issue 34) for a bot's screen
// of an evaluation computer: the routes OSWorld's PythonController and
// SetupController call on a guest's port 5000, under
// /v1/computers/{id}/bots/{bot}/osworld/…, each mapped onto the machine's
// observe, elements, exec, files, launch and window actions. The shapes
// are OSWorld's (desktop_env/controllers/python.py and its guest server):
// a screenshot is a PNG body, the accessibility tree is {"AT": xml}, an
// execute answers {status, output, error, returncode}.
//
// execute runs the code as the bot. OSWorld sends Python calling pyautogui;
// botd gives such a command an act channel to the bot's screen (package
// actchan in botd): every pyautogui call becomes an ordered act under the
// screen's lease, so the code never reaches the display itself. That is
// still a way for code to act on the screen, which the threat model keeps
// from the bot, so only an evaluation computer (created with evaluation:
// true) serves these routes.
//
// Paths: the guest's home is the bot's workspace: "~/x", "$HOME/x",
// "/home/user/x" (OSWorld's user) and the workspace's own absolute path
// name the workspace file x; any other absolute path is refused.
package osworld

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	_ "image/jpeg" // observations are JPEG

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/agentlease"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Limits.
const (
	// ExecTimeout is an execute's time limit (OSWorld's guest: 120 s).
	ExecTimeout = 120 * time.Second
	// MaxUpload bounds a /setup/upload file.
	MaxUpload = 256 << 20
	// MaxFile bounds a /file download.
	MaxFile = 256 << 20
	// leaseTTL is the guest's agent lease's life without use.
	leaseTTL = 120 * time.Second
)

// Options configures the service.
type Options struct {
	Computers *computers.Service
	// Leases is shared with the CDP endpoint (nil: the service's own).
	Leases *agentlease.Registry
	Log    zerolog.Logger
}

// Service is the guest API.
type Service struct {
	o Options

	// mu guards started, shots, homes and recs.
	mu      sync.Mutex
	recs    map[string]string // computer/screen → the recording in progress
	started map[string]bool   // computer/screen → started by this service
	shots   map[string][]byte // computer/screen → the last PNG
	homes   map[string]string // computer → the workspace's absolute path
}

// New returns the service.
func New(o Options) *Service {
	if o.Leases == nil {
		o.Leases = agentlease.New()
	}
	return &Service{o: o, started: map[string]bool{}, shots: map[string][]byte{}, homes: map[string]string{}, recs: map[string]string{}}
}

// Prefix is where the routes live; the OSWorld route follows it.
const Prefix = "/v1/computers/{id}/bots/{bot}/osworld/"

// Mount adds the routes; gate is the capability check.
func Mount(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc, s *Service) {
	route := func(method, p string, h func(*call) error) {
		mux.HandleFunc(method+" "+Prefix+p, gate(s.serve(h)))
	}
	route("GET", "screenshot", s.screenshot)
	route("HEAD", "screenshot", s.screenshot)
	route("GET", "accessibility", s.accessibility)
	route("GET", "terminal", s.terminal)
	route("GET", "platform", func(c *call) error { return c.text(http.StatusOK, "Linux") })
	route("GET", "cursor_position", s.cursor)
	route("POST", "screen_size", s.screenSize)
	route("POST", "window_size", s.windowSize)
	route("POST", "desktop_path", s.desktopPath)
	route("POST", "list_directory", s.listDirectory)
	route("POST", "execute", s.execute)
	route("POST", "setup/execute", s.execute)
	route("POST", "run_python", s.runPython)
	route("POST", "run_bash_script", s.runBash)
	route("POST", "file", s.file)
	route("POST", "setup/upload", s.upload)
	route("POST", "setup/launch", s.launch)
	route("POST", "setup/open_file", s.openFile)
	route("POST", "setup/activate_window", s.window(shared.ActionFocusWindow))
	route("POST", "setup/close_window", s.window(shared.ActionCloseWindow))
	route("POST", "start_recording", s.startRecording)
	route("POST", "end_recording", s.endRecording)
}

// call is one request's context: the computer's machine, the bot's screen.
type call struct {
	w        http.ResponseWriter
	r        *http.Request
	ctx      context.Context
	computer string
	bot      string
	screen   string
	m        machines.Machine
}

func (c *call) json(status int, v any) error {
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(status)
	return json.NewEncoder(c.w).Encode(v)
}

func (c *call) text(status int, s string) error {
	c.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	c.w.WriteHeader(status)
	_, err := io.WriteString(c.w, s)
	return err
}

// guestErr is an answer in the guest's own error shape.
type guestErr struct {
	status int
	body   any
}

func (e *guestErr) Error() string { return fmt.Sprint(e.body) }

func gerr(status int, msg string) error {
	return &guestErr{status: status, body: map[string]string{"status": "error", "message": msg}}
}

// serve resolves the computer, the bot and its screen, then runs h.
func (s *Service) serve(h func(*call) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		id, bot := r.PathValue("id"), r.PathValue("bot")
		c, err := s.o.Computers.HasBot(ctx, id, bot)
		if err != nil {
			writeErr(w, err)
			return
		}
		if !c.Evaluation {
			writeErr(w, shared.Errorf(http.StatusForbidden, shared.CodeForbidden,
				"OSWorld's guest API is served only for an evaluation computer (POST /v1/computers with evaluation: true): its execute runs code that acts on the bot's screen"))
			return
		}
		screen := r.URL.Query().Get("screen")
		if screen == "" {
			screen = bot
		}
		if !tools.InNamespace(bot, screen) {
			writeErr(w, shared.Errorf(http.StatusForbidden, shared.CodeForbidden, "screen %q is not bot %s's", screen, bot))
			return
		}
		m, err := s.o.Computers.Machine(ctx, id)
		if err != nil {
			writeErr(w, err)
			return
		}
		cl := &call{w: w, r: r, ctx: ctx, computer: id, bot: bot, screen: screen, m: m}
		if err := h(cl); err != nil {
			var ge *guestErr
			if errors.As(err, &ge) {
				_ = cl.json(ge.status, ge.body)
				return
			}
			writeErr(w, err)
		}
	}
}

// writeErr answers err as the worker's error envelope.
func writeErr(w http.ResponseWriter, err error) {
	status, code, msg := http.StatusInternalServerError, shared.CodeInternal, "internal error"
	var ae *shared.APIError
	var ce *client.Error
	switch {
	case errors.As(err, &ae):
		status, code, msg = ae.Status, ae.Code, ae.Message
	case errors.As(err, &ce):
		status, code, msg = ce.Status, ce.Code, ce.Message
	case errors.Is(err, computers.ErrNotFound):
		status, code, msg = http.StatusNotFound, shared.CodeNotFound, "not found"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(shared.ErrorEnvelope{Error: shared.ErrorBody{Code: code, Message: msg}})
}

// withLease runs fn under the screen's agent lease, shared with the
// bot's CDP sessions (package agentlease: holder cdp-<bot>) and held only
// for the call; once more with a new lease when botd says it is gone. The
// screen is started on a computer's first call.
func (s *Service) withLease(c *call, fn func(lease string) error) error {
	key := c.computer + "/" + c.screen
	s.mu.Lock()
	started := s.started[key]
	s.mu.Unlock()
	if !started {
		if _, err := c.m.StartScreen(c.ctx, c.screen); err != nil {
			return err
		}
		s.mu.Lock()
		s.started[key] = true
		s.mu.Unlock()
	}
	holder := agentlease.Holder(c.bot)
	id, release, err := s.o.Leases.Hold(c.ctx, c.m, c.computer, c.screen, holder, leaseTTL, false, false)
	if err != nil {
		return err
	}
	defer release()
	err = fn(id)
	switch client.CodeOf(err) {
	case shared.CodeLeaseRequired:
		id, again, herr := s.o.Leases.Hold(c.ctx, c.m, c.computer, c.screen, holder, leaseTTL, true, false)
		if herr != nil {
			return herr
		}
		defer again()
		err = fn(id)
	case shared.CodeScreenUnavailable, shared.CodeNotFound:
		s.mu.Lock()
		delete(s.started, key)
		s.mu.Unlock()
	}
	return err
}

// observe is the screen's observation as a decoded image.
func (s *Service) observe(c *call, elements bool) (client.Observation, error) {
	var obs client.Observation
	err := s.withLease(c, func(lease string) error {
		var err error
		if elements {
			em := machines.ElementsOf(c.m)
			if em == nil {
				return shared.Errorf(http.StatusNotImplemented, shared.CodeUnavailable, "this machine has no element list")
			}
			obs, err = em.ObserveElements(c.ctx, c.screen, lease)
		} else {
			obs, err = c.m.Observe(c.ctx, c.screen, lease)
		}
		return err
	})
	return obs, err
}

// screenshot is GET /screenshot: the screen (pointer drawn in) as PNG.
// An observation that comes back unchanged (a lease this service already
// observed through, shared with a CDP session) is answered with the PNG
// kept from the last one; with none kept (a worker restart), the lease is
// given back and a new one sees the whole frame.
func (s *Service) screenshot(c *call) error {
	key := c.computer + "/" + c.screen
	var pngb []byte
	var obs client.Observation
	err := s.withLease(c, func(lease string) error {
		var err error
		if obs, err = c.m.Observe(c.ctx, c.screen, lease); err != nil {
			return err
		}
		if !obs.Unchanged && obs.Image != "" {
			return nil
		}
		s.mu.Lock()
		pngb = s.shots[key]
		s.mu.Unlock()
		if pngb != nil {
			return nil
		}
		_ = c.m.ReleaseLease(c.ctx, c.screen, lease)
		return shared.Errorf(http.StatusConflict, shared.CodeLeaseRequired, "observe again under a new lease")
	})
	if err != nil {
		return err
	}
	if pngb == nil {
		raw, err := base64.StdEncoding.DecodeString(obs.Image)
		if err != nil {
			return fmt.Errorf("observation image: %w", err)
		}
		img, _, err := image.Decode(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("observation image: %w", err)
		}
		var buf bytes.Buffer
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		if err := enc.Encode(&buf, img); err != nil {
			return err
		}
		pngb = buf.Bytes()
		s.mu.Lock()
		s.shots[key] = pngb
		s.mu.Unlock()
	}
	c.w.Header().Set("Content-Type", "image/png")
	c.w.Header().Set("Content-Length", fmt.Sprint(len(pngb)))
	c.w.WriteHeader(http.StatusOK)
	if c.r.Method == http.MethodHead {
		return nil
	}
	_, err = c.w.Write(pngb)
	return err
}

// cursor is GET /cursor_position: [x, y].
func (s *Service) cursor(c *call) error {
	obs, err := s.observe(c, false)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, []int{obs.Pointer.X, obs.Pointer.Y})
}

// screenSize is POST /screen_size: {width, height}.
func (s *Service) screenSize(c *call) error {
	obs, err := s.observe(c, false)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, map[string]int{"width": obs.Width, "height": obs.Height})
}

// windows is the screen's window list.
func (s *Service) windows(c *call) ([]shared.Window, error) {
	var ws []shared.Window
	err := s.withLease(c, func(lease string) error {
		var err error
		ws, err = c.m.Windows(c.ctx, c.screen, lease)
		return err
	})
	return ws, err
}

// windowSize is POST /window_size (form app_class_name): the first window
// whose application matches, case-insensitively.
func (s *Service) windowSize(c *call) error {
	name := c.r.PostFormValue("app_class_name")
	if name == "" {
		return &guestErr{status: http.StatusBadRequest, body: map[string]string{"error": "App class name is required"}}
	}
	ws, err := s.windows(c)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if strings.EqualFold(w.App, name) || strings.Contains(strings.ToLower(w.App), strings.ToLower(name)) {
			return c.json(http.StatusOK, map[string]int{"width": w.Box.W, "height": w.Box.H})
		}
	}
	return gerr(http.StatusNotFound, "no window of "+name)
}

// window is /setup/activate_window and /setup/close_window: {window_name,
// strict, by_class}; wmctrl's matching (a title containing the name,
// case-insensitively; strict: equal; by_class: the application).
func (s *Service) window(action string) func(*call) error {
	return func(c *call) error {
		var req struct {
			Name    string `json:"window_name"`
			Strict  bool   `json:"strict"`
			ByClass bool   `json:"by_class"`
		}
		if err := decode(c, &req); err != nil {
			return err
		}
		if req.Name == "" {
			return gerr(http.StatusBadRequest, "window_name required")
		}
		ws, err := s.windows(c)
		if err != nil {
			return err
		}
		for i := len(ws) - 1; i >= 0; i-- {
			w := ws[i]
			of := w.Title
			if req.ByClass {
				of = w.App
			}
			if (req.Strict && of == req.Name) || (!req.Strict && strings.Contains(strings.ToLower(of), strings.ToLower(req.Name))) {
				err := s.withLease(c, func(lease string) error {
					_, err := c.m.Act(c.ctx, c.screen, lease, []shared.Action{{Type: action, Window: w.ID}})
					return err
				})
				if err != nil {
					return err
				}
				return c.text(http.StatusOK, "Window "+req.Name+" done")
			}
		}
		return gerr(http.StatusNotFound, "no window matches "+req.Name)
	}
}

// decode reads a JSON body (at most 1 MiB).
func decode(c *call, v any) error {
	b, err := io.ReadAll(io.LimitReader(c.r.Body, 1<<20+1))
	if err != nil {
		return gerr(http.StatusBadRequest, "the body could not be read")
	}
	if len(b) > 1<<20 {
		return gerr(http.StatusRequestEntityTooLarge, "the body is over 1 MiB")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return gerr(http.StatusBadRequest, "the body is not the JSON this route takes")
	}
	return nil
}

// home is the bot's workspace's absolute path (the guest's $HOME).
func (s *Service) home(c *call) (string, error) {
	s.mu.Lock()
	h := s.homes[c.computer]
	s.mu.Unlock()
	if h != "" {
		return h, nil
	}
	res, err := c.m.Exec(c.ctx, client.ExecRequest{Argv: []string{"sh", "-c", `printf %s "$HOME"`}, TimeoutMs: 10000})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "/") {
		return "", fmt.Errorf("the workspace's path: exit %d", res.ExitCode)
	}
	s.mu.Lock()
	s.homes[c.computer] = res.Stdout
	s.mu.Unlock()
	return res.Stdout, nil
}

// GuestUserHome is OSWorld's guest user's home, read as the workspace.
const GuestUserHome = "/home/user"

// relPath maps a guest path onto a workspace path (see the package doc).
func (s *Service) relPath(c *call, p string) (string, error) {
	p = strings.TrimSpace(p)
	h, err := s.home(c)
	if err != nil {
		return "", err
	}
	for _, pre := range []string{"~", "$HOME", "${HOME}", GuestUserHome, h} {
		if p == pre {
			return ".", nil
		}
		if rest, ok := strings.CutPrefix(p, pre+"/"); ok {
			return path.Clean(rest), nil
		}
	}
	if strings.HasPrefix(p, "/") {
		return "", shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied,
			"%s is outside the bot's workspace: the guest's home (~, %s, %s) is the workspace, and only it is reachable", p, GuestUserHome, h)
	}
	return path.Clean(p), nil
}

// expandArg is an argument with a leading "~/" made the workspace's path,
// as OSWorld's guest does.
func (s *Service) expandArg(c *call, a string) (string, error) {
	if rest, ok := strings.CutPrefix(a, "~/"); ok {
		h, err := s.home(c)
		if err != nil {
			return "", err
		}
		return h + "/" + rest, nil
	}
	return a, nil
}

// commandArgv is OSWorld's {command, shell}: a list, a string split like
// shlex (shell false), or a string for /bin/sh -c (shell true). Its
// interpreter "python" is python3 (Debian has no python).
func (s *Service) commandArgv(c *call, command json.RawMessage, shell bool) ([]string, error) {
	var argv []string
	var str string
	switch {
	case json.Unmarshal(command, &argv) == nil && len(argv) > 0:
		if shell {
			argv = []string{"/bin/sh", "-c", strings.Join(argv, " ")}
		}
	case json.Unmarshal(command, &str) == nil && str != "":
		if shell {
			argv = []string{"/bin/sh", "-c", str}
		} else {
			var err error
			if argv, err = shared.SplitWords(str); err != nil {
				return nil, gerr(http.StatusBadRequest, err.Error())
			}
		}
	default:
		return nil, gerr(http.StatusBadRequest, "command must be a non-empty list of strings or a string")
	}
	if len(argv) == 0 {
		return nil, gerr(http.StatusBadRequest, "command is empty")
	}
	for i, a := range argv {
		e, err := s.expandArg(c, a)
		if err != nil {
			return nil, err
		}
		argv[i] = e
	}
	if argv[0] == "python" {
		argv[0] = "python3"
	}
	return argv, nil
}

// run runs argv as the bot with the screen's act channel.
func (s *Service) run(c *call, argv []string, timeout time.Duration) (client.ExecResult, error) {
	var res client.ExecResult
	err := s.withLease(c, func(lease string) error {
		var err error
		res, err = c.m.Exec(c.ctx, client.ExecRequest{Argv: argv, TimeoutMs: int(timeout.Milliseconds()), ActScreen: c.screen, LeaseID: lease})
		return err
	})
	return res, err
}

// execute is /execute and /setup/execute: {command, shell} → {status,
// output, error, returncode} (a timeout or a failure to run: 500 {status:
// "error", message}).
func (s *Service) execute(c *call) error {
	var req struct {
		Command json.RawMessage `json:"command"`
		Shell   bool            `json:"shell"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	argv, err := s.commandArgv(c, req.Command, req.Shell)
	if err != nil {
		return err
	}
	res, err := s.run(c, argv, ExecTimeout)
	if err != nil {
		return err
	}
	if res.TimedOut {
		return gerr(http.StatusInternalServerError, fmt.Sprintf("Command timed out after %d seconds", int(ExecTimeout.Seconds())))
	}
	return c.json(http.StatusOK, map[string]any{"status": "success", "output": res.Stdout, "error": res.Stderr, "returncode": res.ExitCode})
}

// runPython is /run_python {code}: the code as a python3 program.
func (s *Service) runPython(c *call) error {
	var req struct {
		Code string `json:"code"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Code == "" {
		return &guestErr{status: http.StatusBadRequest, body: map[string]string{"status": "error", "message": "Code is required"}}
	}
	res, err := s.run(c, []string{"python3", "-c", req.Code}, 30*time.Second)
	if err != nil {
		return err
	}
	if res.TimedOut {
		return &guestErr{status: http.StatusInternalServerError, body: map[string]any{"status": "error", "message": "Execution timeout", "error": "TimeoutExpired", "need_more": false, "output": nil}}
	}
	status := "success"
	if res.ExitCode != 0 {
		status = "error"
	}
	return c.json(http.StatusOK, map[string]any{"status": status, "message": res.Stdout + res.Stderr, "need_more": false,
		"output": res.Stdout, "error": res.Stderr, "return_code": res.ExitCode})
}

// runBash is /run_bash_script {script, timeout, working_dir}: stderr into
// stdout, as the guest does.
func (s *Service) runBash(c *call) error {
	var req struct {
		Script     string  `json:"script"`
		Timeout    int     `json:"timeout"`
		WorkingDir *string `json:"working_dir"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Script == "" {
		return &guestErr{status: http.StatusBadRequest, body: map[string]any{"status": "error", "output": "Script is required", "error": "", "returncode": -1}}
	}
	if req.Timeout <= 0 {
		req.Timeout = 100
	}
	script := req.Script
	if req.WorkingDir != nil && *req.WorkingDir != "" {
		dir, err := s.expandArg(c, *req.WorkingDir)
		if err != nil {
			return err
		}
		script = "cd " + shellQuote(dir) + " || exit 1\n" + script
	}
	timeout := min(time.Duration(req.Timeout)*time.Second, 30*time.Minute)
	res, err := s.run(c, []string{"/bin/bash", "-c", "exec 2>&1\n" + script}, timeout)
	if err != nil {
		return err
	}
	if res.TimedOut {
		return &guestErr{status: http.StatusInternalServerError, body: map[string]any{"status": "error", "output": fmt.Sprintf("Script execution timed out after %d seconds", req.Timeout), "error": "", "returncode": -1}}
	}
	status := "success"
	if res.ExitCode != 0 {
		status = "error"
	}
	return c.json(http.StatusOK, map[string]any{"status": status, "output": res.Stdout, "error": "", "returncode": res.ExitCode})
}

// file is POST /file (form file_path): the file's bytes, 404 when absent.
func (s *Service) file(c *call) error {
	p := c.r.PostFormValue("file_path")
	if p == "" {
		return &guestErr{status: http.StatusBadRequest, body: map[string]string{"error": "file_path is required"}}
	}
	rel, err := s.relPath(c, p)
	if err != nil {
		return err
	}
	b, err := c.m.ReadFile(c.ctx, rel, MaxFile)
	if err != nil {
		if client.CodeOf(err) == shared.CodeNotFound {
			return &guestErr{status: http.StatusNotFound, body: map[string]string{"error": "File not found"}}
		}
		return err
	}
	c.w.Header().Set("Content-Type", contentType(p))
	c.w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	c.w.WriteHeader(http.StatusOK)
	_, err = c.w.Write(b)
	return err
}

func contentType(p string) string {
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// upload is POST /setup/upload (multipart file_path, file_data).
func (s *Service) upload(c *call) error {
	c.r.Body = http.MaxBytesReader(c.w, c.r.Body, MaxUpload+1<<20)
	if err := c.r.ParseMultipartForm(32 << 20); err != nil {
		return gerr(http.StatusBadRequest, "file_path and file_data are required (multipart/form-data, at most 256 MiB)")
	}
	p := c.r.FormValue("file_path")
	f, _, err := c.r.FormFile("file_data")
	if p == "" || err != nil {
		return gerr(http.StatusBadRequest, "file_path and file_data are required")
	}
	defer f.Close()
	rel, err := s.relPath(c, p)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxUpload+1))
	if err != nil {
		return gerr(http.StatusBadRequest, "file_data could not be read")
	}
	if len(b) > MaxUpload {
		return gerr(http.StatusRequestEntityTooLarge, "file_data is over 256 MiB")
	}
	if dir := path.Dir(rel); dir != "." {
		res, err := c.m.Exec(c.ctx, client.ExecRequest{Argv: []string{"mkdir", "-p", "--", dir}, TimeoutMs: 10000})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return gerr(http.StatusInternalServerError, "the file's directory could not be made")
		}
	}
	if err := c.m.WriteFile(c.ctx, rel, b); err != nil {
		return err
	}
	return c.text(http.StatusOK, fmt.Sprintf("File Uploaded: %d bytes", len(b)))
}

// launch is /setup/launch {command, shell}: Chrome or Chromium starts the
// screen's browser (the one the bot's tools and the CDP endpoint use);
// socat is answered without running (the chromium port is the provider's
// relay to the CDP endpoint); anything else is refused, naming what
// launches.
func (s *Service) launch(c *call) error {
	var req struct {
		Command json.RawMessage `json:"command"`
		Shell   bool            `json:"shell"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	argv, err := s.commandArgv(c, req.Command, false)
	if err != nil {
		return err
	}
	prog := path.Base(argv[0])
	switch prog {
	case "google-chrome", "google-chrome-stable", "chromium", "chromium-browser", "chrome":
		err := s.withLease(c, func(lease string) error {
			_, err := c.m.Launch(c.ctx, c.screen, lease, "browser")
			return err
		})
		if err != nil {
			return err
		}
		return c.text(http.StatusOK, prog+" launched successfully (the screen's browser)")
	case "socat":
		return c.text(http.StatusOK, "socat not needed: the chromium port is the open-bot CDP endpoint")
	}
	return gerr(http.StatusNotImplemented, fmt.Sprintf("%s does not launch here: an open-bot screen launches its browser (google-chrome or chromium); run other programs with /execute", prog))
}

// openFile is /setup/open_file {path}: the workspace file in the screen's
// browser (open_path), or a URL.
func (s *Service) openFile(c *call) error {
	var req struct {
		Path string `json:"path"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Path == "" {
		return gerr(http.StatusBadRequest, "Path required")
	}
	target := req.Path
	if !strings.HasPrefix(target, "http://") && !strings.HasPrefix(target, "https://") {
		rel, err := s.relPath(c, req.Path)
		if err != nil {
			return err
		}
		target = rel
	}
	err := s.withLease(c, func(lease string) error {
		_, err := c.m.Open(c.ctx, c.screen, lease, target)
		return err
	})
	if err != nil {
		if client.CodeOf(err) == shared.CodeNotFound {
			return gerr(http.StatusNotFound, "File not found: "+req.Path)
		}
		return err
	}
	return c.text(http.StatusOK, "File opened successfully")
}

// desktopPath is POST /desktop_path.
func (s *Service) desktopPath(c *call) error {
	h, err := s.home(c)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, map[string]string{"desktop_path": h + "/Desktop"})
}

// listDirectory is POST /list_directory {path}: the tree, at most 10,000
// entries (deeper ones are left out).
func (s *Service) listDirectory(c *call) error {
	var req struct {
		Path string `json:"path"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Path == "" {
		return &guestErr{status: http.StatusBadRequest, body: map[string]string{"error": "Missing 'path' parameter"}}
	}
	rel, err := s.relPath(c, req.Path)
	if err != nil {
		return err
	}
	budget := 10000
	tree, err := s.tree(c, rel, path.Base(req.Path), &budget, 0)
	if err != nil {
		if client.CodeOf(err) == shared.CodeNotFound {
			return &guestErr{status: http.StatusBadRequest, body: map[string]string{"error": "Directory not found: " + req.Path}}
		}
		return err
	}
	return c.json(http.StatusOK, map[string]any{"directory_tree": tree})
}

func (s *Service) tree(c *call, rel, name string, budget *int, depth int) (map[string]any, error) {
	raw, err := c.m.ListFiles(c.ctx, rel)
	if err != nil {
		return nil, err
	}
	var l struct {
		Entries []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, err
	}
	children := []map[string]any{}
	for _, e := range l.Entries {
		if *budget <= 0 {
			break
		}
		*budget--
		if e.Type == "dir" && depth < 32 {
			sub, err := s.tree(c, path.Join(rel, e.Name), e.Name, budget, depth+1)
			if err != nil {
				children = append(children, map[string]any{"type": "directory", "name": e.Name, "error": "not readable"})
				continue
			}
			children = append(children, sub)
			continue
		}
		children = append(children, map[string]any{"type": "file", "name": e.Name})
	}
	return map[string]any{"type": "directory", "name": name, "children": children}, nil
}

// terminal is GET /terminal: the text of a focused terminal among the
// screen's elements, or null.
func (s *Service) terminal(c *call) error {
	obs, err := s.observe(c, true)
	if err != nil {
		return err
	}
	var els []shared.Element
	_ = json.Unmarshal(obs.Elements, &els)
	var out any
	for _, e := range els {
		if e.Role == "terminal" && e.Value != nil {
			out = strings.TrimRight(*e.Value, " \n")
			if hasState(e, "focused") {
				break
			}
		}
	}
	return c.json(http.StatusOK, map[string]any{"output": out, "status": "success"})
}

func hasState(e shared.Element, st string) bool {
	for _, s := range e.States {
		if s == st {
			return true
		}
	}
	return false
}

// recorder is the call's machine's recorder (501 for one that records no
// screens).
func recorder(c *call) (machines.Recorder, error) {
	if rec := machines.RecorderOf(c.m); rec != nil {
		return rec, nil
	}
	return nil, gerr(http.StatusNotImplemented, "this machine does not record its screens")
}

// startRecording is POST /start_recording: a recording of the screen
// (botd's, H.264 MP4; at most an hour), 400 when one is in progress.
func (s *Service) startRecording(c *call) error {
	rec, err := recorder(c)
	if err != nil {
		return err
	}
	key := c.computer + "/" + c.screen
	s.mu.Lock()
	busy := s.recs[key] != ""
	s.mu.Unlock()
	if busy {
		return gerr(http.StatusBadRequest, "Recording is already in progress.")
	}
	var r shared.Recording
	err = s.withLease(c, func(lease string) error {
		var err error
		r, err = rec.StartRecording(c.ctx, c.screen, shared.RecordingStart{LeaseID: lease})
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.recs[key] = r.ID
	s.mu.Unlock()
	return c.json(http.StatusOK, map[string]string{"status": "success", "message": "Started recording."})
}

// endRecording is POST /end_recording: stops the recording and answers
// its MP4 (the machine's bytes, the worker's headers); 400 when none is in
// progress.
func (s *Service) endRecording(c *call) error {
	rec, err := recorder(c)
	if err != nil {
		return err
	}
	key := c.computer + "/" + c.screen
	s.mu.Lock()
	id := s.recs[key]
	delete(s.recs, key)
	s.mu.Unlock()
	if id == "" {
		return gerr(http.StatusBadRequest, "No recording in progress to stop.")
	}
	r, err := rec.StopRecording(c.ctx, c.screen, id)
	if err != nil && client.CodeOf(err) != shared.CodeRecordingEnded {
		return err
	}
	if err == nil && r.Bytes == 0 {
		return gerr(http.StatusInternalServerError, "Recording failed. The output file is missing or empty.")
	}
	return machines.ServeRecordingVideo(c.w, c.r, rec, c.screen, id)
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

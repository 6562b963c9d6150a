// Package execsvc runs teammates' commands as the bot user: POST /exec (one
// argv, no shell unless argv names one) and ws /terminal (an interactive pty
// shell).
//
// # POST /exec
//
// Request {argv, cwd, env, timeoutMs}; answer {exitCode, stdout, stderr,
// truncated, timedOut, durationMs}. argv is passed to execve as is, so
// ["echo","$(id)"] prints $(id). cwd is workspace-relative and validated
// like file paths (os.Root); the command itself runs as bot and may go
// wherever bot may, so cwd is a convenience, not a boundary. The environment
// is BaseEnv's allow-list (HOME=the workspace, USER, LOGNAME, SHELL, PATH,
// LANG) plus the caller's additions, which may override those (names must be
// [A-Za-z_][A-Za-z0-9_]*, values without NUL); nothing of botd's own
// environment leaks. Each of stdout and stderr keeps its first
// MaxOutputBytes; the rest is read and dropped (so a flooding command never
// blocks or grows botd) and truncated is true. Output travels as JSON
// strings: bytes that are not UTF-8 become U+FFFD. The timeout SIGKILLs the
// command's whole process group (timedOut, exitCode -1). A program that
// cannot be found is exit code 127, one that cannot be executed 126. The
// command is not tied to the HTTP request: a caller that goes away does not
// kill it, its timeout does. When the command exits, background children it
// left in its group may keep running; their output is no longer read. At
// most MaxConcurrent commands run at once (503 beyond), and Close (botd's
// shutdown) kills them all.
//
// # ws /terminal?cwd=&cols=&rows=
//
// A login bash as bot on a new pty, in its own session, started in cwd
// (workspace-relative, default the workspace) with the window cols×rows
// (default 80×24, each 1..1000). Browsers authenticate with ?token=. A bad
// cwd or size is refused before the upgrade, as a JSON error. Messages:
//
//	client → botd, binary: bytes typed into the terminal.
//	client → botd, text:   JSON {"type":"input","data":"…"} (same as binary)
//	                       or {"type":"resize","cols":N,"rows":M}.
//	botd → client, binary: terminal output, as the pty produced it.
//	botd → client, text:   {"type":"exit","exitCode":N} once the shell ended,
//	                       then a normal close.
//
// Input is queued (at most 1024 messages of at most 1 MiB) while the
// program on the terminal is not reading; beyond that botd closes the socket
// with 1008 (policy violation). When the socket closes (or the shell exits)
// every process left in the shell's session is killed — background jobs
// included, since bash puts them in their own process groups within the
// session. Only a process that left the session (setsid) survives.
package execsvc

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/files"
	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/pkg/shared"
)

// Defaults for Options' zero values.
const (
	DefaultMaxOutputBytes = 1 << 20
	DefaultTimeout        = 60 * time.Second
	DefaultMaxTimeout     = 30 * time.Minute
	DefaultMaxConcurrent  = 32
	DefaultMaxTerminals   = 16
)

// Options configures the service.
type Options struct {
	// Runner starts every child (runner.Exec{} when nil).
	Runner runner.Runner
	// User is who commands run as (bot).
	User osuser.User
	// Workspace is $BOTD_HOME/bot: cwd is relative to it and it is HOME.
	Workspace string
	// MaxOutputBytes caps each of stdout and stderr.
	MaxOutputBytes int
	// DefaultTimeout applies when a request gives none; MaxTimeout bounds it.
	DefaultTimeout, MaxTimeout time.Duration
	// MaxConcurrent caps commands running at once (503 beyond).
	MaxConcurrent int
	// MaxTerminals caps open terminals (503 beyond).
	MaxTerminals int
	Log          zerolog.Logger
	// ActChannel, when set, serves requests with ActScreen; without it
	// they are refused.
	ActChannel ActChannel
}

// Service implements /exec and /terminal.
type Service struct {
	o     Options
	slots chan struct{}
	terms chan struct{}
	// wg counts running commands and terminals, for Close.
	wg sync.WaitGroup
	// mu guards live and closed.
	mu sync.Mutex
	// live holds a kill function per running command or terminal.
	live   map[*int]func()
	closed bool
}

// New returns the service with defaults filled in.
func New(o Options) *Service {
	if o.Runner == nil {
		o.Runner = runner.Exec{}
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = DefaultTimeout
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxTerminals <= 0 {
		o.MaxTerminals = DefaultMaxTerminals
	}
	return &Service{o: o, slots: make(chan struct{}, o.MaxConcurrent), terms: make(chan struct{}, o.MaxTerminals), live: map[*int]func(){}}
}

// Register adds the routes to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /exec", s.exec)
	mux.HandleFunc("GET /terminal", s.terminal)
}

// Request is the body of POST /exec.
type Request struct {
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	TimeoutMs int64             `json:"timeoutMs"`
	// ActScreen gives the command an act channel to that screen under
	// LeaseID (package actchan): an evaluation screen's OSWorld execute.
	ActScreen string `json:"actScreen,omitempty"`
	LeaseID   string `json:"leaseId,omitempty"`
}

// ActChannel opens a command's act channel to screen under leaseID: child
// becomes the command's fd 3, env is added to its environment, stop ends
// the channel once the command is done.
type ActChannel func(ctx context.Context, screen, leaseID string) (child *os.File, env []string, stop func(), err error)

// Result is the answer of POST /exec.
type Result struct {
	// ExitCode is the command's exit status; -1 when a signal ended it.
	ExitCode  int    `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timedOut,omitempty"`
	// DurationMs is the command's wall time.
	DurationMs int64 `json:"durationMs"`
}

const (
	maxArgs     = 4096
	maxEnv      = 256
	maxEnvValue = 128 << 10
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validate checks r and returns the timeout to use.
func (s *Service) validate(r *Request) (time.Duration, error) {
	bad := func(format string, args ...any) error {
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, format, args...)
	}
	switch {
	case len(r.Argv) == 0:
		return 0, bad("argv must have at least one element")
	case r.Argv[0] == "":
		return 0, bad("argv[0] must name a program")
	case len(r.Argv) > maxArgs:
		return 0, bad("argv has more than %d elements", maxArgs)
	}
	for i, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return 0, bad("argv[%d] contains a NUL byte", i)
		}
	}
	if len(r.Env) > maxEnv {
		return 0, bad("env has more than %d variables", maxEnv)
	}
	for k, v := range r.Env {
		if !envName.MatchString(k) {
			return 0, bad("env: %q is not a valid variable name", truncate(k, 64))
		}
		if strings.IndexByte(v, 0) >= 0 || len(v) > maxEnvValue {
			return 0, bad("env: the value of %s contains a NUL byte or is too long", k)
		}
	}
	switch {
	case r.TimeoutMs < 0:
		return 0, bad("timeoutMs must not be negative")
	case r.TimeoutMs == 0:
		return s.o.DefaultTimeout, nil
	case time.Duration(r.TimeoutMs)*time.Millisecond > s.o.MaxTimeout:
		return 0, bad("timeoutMs must be at most %d", s.o.MaxTimeout.Milliseconds())
	}
	return time.Duration(r.TimeoutMs) * time.Millisecond, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ResolveCwd checks a workspace-relative directory with os.Root and returns
// its absolute path.
func ResolveCwd(workspace, cwd string) (string, error) {
	rel, err := files.CheckPath(cwd, true)
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return "", err
	}
	defer root.Close()
	fi, err := root.Stat(rel)
	if err != nil {
		return "", files.MapError(err)
	}
	if !fi.IsDir() {
		return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "cwd is not a directory")
	}
	return filepath.Join(workspace, rel), nil
}

// env is the child's environment: the runner's allow-list with HOME at the
// workspace, then the caller's additions in a stable order.
func (s *Service) env(extra map[string]string, more ...string) []string {
	out := []string{"HOME=" + s.o.Workspace}
	out = append(out, more...)
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+extra[k])
	}
	return out
}

func (s *Service) exec(w http.ResponseWriter, r *http.Request) {
	var req Request
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		httpx.WriteErr(w, err)
		return
	}
	timeout, err := s.validate(&req)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	dir, err := ResolveCwd(s.o.Workspace, req.Cwd)
	if err != nil {
		s.fail(w, err)
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		httpx.WriteError(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "too many commands are running; try again")
		return
	}
	defer func() { <-s.slots }()
	env := s.env(req.Env)
	var extra []*os.File
	if req.ActScreen != "" {
		if s.o.ActChannel == nil {
			httpx.WriteError(w, http.StatusConflict, shared.CodeUnavailable, "this machine gives commands no act channel")
			return
		}
		child, more, stop, err := s.o.ActChannel(r.Context(), req.ActScreen, req.LeaseID)
		if err != nil {
			s.fail(w, err)
			return
		}
		defer stop()
		extra = []*os.File{child}
		env = append(env, more...)
	}
	res, err := s.RunWith(req.Argv, dir, env, timeout, extra)
	if err != nil {
		s.fail(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, res)
}

func (s *Service) fail(w http.ResponseWriter, err error) {
	var ae *shared.APIError
	if !errors.As(err, &ae) {
		s.o.Log.Error().Err(err).Msg("exec failed")
	}
	httpx.WriteErr(w, err)
}

// Run runs argv as the service's user in dir and collects its output. A
// program that cannot be found or executed is an exit code (127 or 126)
// with a message on stderr, as a shell would report it.
func (s *Service) Run(argv []string, dir string, env []string, timeout time.Duration) (Result, error) {
	return s.RunWith(argv, dir, env, timeout, nil)
}

// RunWith is Run with extra files as the child's fds 3, 4, …; it closes
// them once the child started (or could not).
func (s *Service) RunWith(argv []string, dir string, env []string, timeout time.Duration, extra []*os.File) (Result, error) {
	defer func() {
		for _, f := range extra {
			_ = f.Close()
		}
	}()
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return Result{}, err
	}
	start := time.Now()
	u := s.o.User
	p, err := s.o.Runner.Start(runner.Spec{Argv: argv, User: &u, Env: env, Dir: dir, Stdout: outW, Stderr: errW, ExtraFiles: extra})
	outW.Close()
	errW.Close()
	for _, f := range extra {
		_ = f.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = 127
		}
		msg := "botd: " + truncate(argv[0], 256) + ": "
		if code == 127 {
			msg += "command not found\n"
		} else {
			msg += "cannot execute\n"
		}
		return Result{ExitCode: code, Stderr: msg, DurationMs: time.Since(start).Milliseconds()}, nil
	}
	untrack, ok := s.track(func() { _ = p.SignalGroup(syscall.SIGKILL) })
	if !ok {
		_ = p.SignalGroup(syscall.SIGKILL)
	} else {
		defer untrack()
	}
	stdout := &capped{max: s.o.MaxOutputBytes}
	stderr := &capped{max: s.o.MaxOutputBytes}
	var readers sync.WaitGroup
	readers.Add(2)
	go drain(&readers, outR, stdout)
	go drain(&readers, errR, stderr)

	var timedOut bool
	var tmu sync.Mutex
	timer := time.AfterFunc(timeout, func() {
		tmu.Lock()
		timedOut = true
		tmu.Unlock()
		_ = p.SignalGroup(syscall.SIGKILL)
	})
	code, werr := p.Wait()
	timer.Stop()
	// Output still buffered in the pipes arrives within moments; a background
	// child that keeps the pipes open must not hold the answer back.
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
		outR.Close()
		errR.Close()
		<-done
	}
	outR.Close()
	errR.Close()
	if werr != nil {
		return Result{}, werr
	}
	tmu.Lock()
	defer tmu.Unlock()
	return Result{
		ExitCode:   code,
		Stdout:     stdout.String(),
		Stderr:     stderr.String(),
		Truncated:  stdout.over || stderr.over,
		TimedOut:   timedOut,
		DurationMs: time.Since(start).Milliseconds(),
	}, nil
}

// drain reads f to the end (or until it is closed) into c.
func drain(wg *sync.WaitGroup, f *os.File, c *capped) {
	defer wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		c.write(buf[:n])
		if err != nil {
			return
		}
	}
}

// capped keeps the first max bytes written to it and counts the rest.
// Only its drain goroutine writes; String is read after drain ended.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) write(p []byte) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.over = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return
	}
	c.buf.Write(p)
}

func (c *capped) String() string { return c.buf.String() }

// track registers kill for Close; the returned func unregisters it. ok is
// false once the service is closed.
func (s *Service) track(kill func()) (untrack func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	key := new(int)
	s.live[key] = kill
	s.wg.Add(1)
	return func() {
		s.mu.Lock()
		delete(s.live, key)
		s.mu.Unlock()
		s.wg.Done()
	}, true
}

// Close kills every running command's process group and every terminal's
// session, and waits until they are reaped. The kernel drops Pdeathsig when
// a child changes user, so botd has to end them itself. Safe to call twice.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	kills := make([]func(), 0, len(s.live))
	for _, k := range s.live {
		kills = append(kills, k)
	}
	s.mu.Unlock()
	for _, k := range kills {
		k()
	}
	s.wg.Wait()
}

// Package runner is the one way botd starts a process. Domain code builds a
// Spec and hands it to a Runner; tests inject a recording fake or use the real
// one against real binaries.
package runner

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
)

// Spec describes one child process.
type Spec struct {
	// Argv is the program and its arguments; never a shell string.
	Argv []string
	// User runs the child as this account (with its supplementary groups);
	// nil means root (botd's own identity).
	User *osuser.User
	// Env is the child's whole environment besides HOME/USER/LOGNAME/SHELL/PATH,
	// which are set from User unless Env sets them.
	Env []string
	// Dir is the working directory ("" = the user's home).
	Dir    string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// ExtraFiles become fds 3, 4, … in the child.
	ExtraFiles []*os.File
	// Setctty/Setsid are for pty children (a new session is also a new group).
	Setsid  bool
	Setctty bool
	Ctty    int
}

// Process is a started child. It leads its own process group.
type Process interface {
	Pid() int
	// Wait blocks until the child exits; it returns the exit code (-1 when
	// killed by a signal) and an error only when waiting itself failed.
	Wait() (int, error)
	// SignalGroup sends sig to the child's whole process group.
	SignalGroup(sig syscall.Signal) error
}

// Runner starts processes.
type Runner interface {
	Start(spec Spec) (Process, error)
}

// Exec is the real Runner.
type Exec struct{}

// DefaultPath is the PATH every child gets unless its Spec overrides it.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Start implements Runner.
func (Exec) Start(s Spec) (Process, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return nil, errors.New("runner: empty argv")
	}
	prog := s.Argv[0]
	// A relative name with a slash ("./build.sh") means relative to the
	// child's directory, not botd's.
	if strings.Contains(prog, "/") && !filepath.IsAbs(prog) && s.Dir != "" {
		prog = filepath.Join(s.Dir, prog)
	}
	u := osuser.Root
	if s.User != nil {
		u = *s.User
	}
	env := BaseEnv(u, s.Env)
	// The program is found on the child's PATH, not botd's (root's PATH
	// may name directories the child cannot use).
	path, err := lookPath(prog, envValue(env, "PATH"))
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	cmd := &exec.Cmd{Path: path, Args: s.Argv, Dir: s.Dir, Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr, ExtraFiles: s.ExtraFiles}
	if cmd.Dir == "" {
		cmd.Dir = u.Home
		if _, err := os.Stat(cmd.Dir); err != nil {
			cmd.Dir = "/"
		}
	}
	cmd.Env = env
	attr := &syscall.SysProcAttr{Setpgid: !s.Setsid, Setsid: s.Setsid, Setctty: s.Setctty, Ctty: s.Ctty}
	if s.User != nil && s.User.UID != 0 {
		attr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	// Children die with botd when they can; the kernel clears this across a
	// setuid, so SIGTERM handling in botd remains the real guarantee.
	attr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("runner: start %s: %w", s.Argv[0], err)
	}
	return &proc{cmd: cmd}, nil
}

// envValue is the last value of name in env ("" when unset).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// lookPath is exec.LookPath on the given PATH: a name with a slash is used
// as is; otherwise the first regular, executable file of that name in
// PATH's directories (empty entries are skipped, never ".").
func lookPath(prog, path string) (string, error) {
	if strings.Contains(prog, "/") {
		return exec.LookPath(prog)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: prog, Err: exec.ErrNotFound}
}

// BaseEnv is the environment of a child running as u: identity variables and
// PATH first, then extra (which may override them).
func BaseEnv(u osuser.User, extra []string) []string {
	env := []string{
		"HOME=" + u.Home,
		"USER=" + u.Name,
		"LOGNAME=" + u.Name,
		"SHELL=/bin/bash",
		"PATH=" + DefaultPath,
		"LANG=C.UTF-8",
	}
	return append(env, extra...)
}

type proc struct{ cmd *exec.Cmd }

func (p *proc) Pid() int { return p.cmd.Process.Pid }

func (p *proc) Wait() (int, error) {
	err := p.cmd.Wait()
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return -1, err
}

func (p *proc) SignalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

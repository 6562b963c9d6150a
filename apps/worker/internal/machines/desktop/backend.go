package desktop

import (
	"context"
	"io"
	"net/http"
)

// Backend is what the desktop machine needs from a sandbox: its command
// API, its file API and the address of a port inside it. The vendor desktop
// SDKs drive their sandboxes through exactly these (E2B's envd: process
// start with streamed output and stdin, /files, and the port routing);
// DockerBackend is the one this repository tests with.
//
// A Backend is one trust domain: whatever runs in the sandbox as User can
// reach everything the machine starts there (X, x11vnc, the workspace).
type Backend interface {
	// Exec runs cmd to completion and returns its exit code and output.
	// A non-zero exit is a Result, not an error; err is for a backend that
	// could not run the command at all.
	Exec(ctx context.Context, cmd Cmd) (Result, error)
	// Start starts a long-lived process whose stdin and stdout stream.
	Start(ctx context.Context, cmd Cmd) (Process, error)
	// ReadFile reads an absolute path inside the sandbox, at most max
	// bytes. A missing file is an error wrapping fs.ErrNotExist.
	ReadFile(ctx context.Context, path string, max int64) ([]byte, error)
	// WriteFile writes data to an absolute path inside the sandbox, owned
	// by user (the parent directory must exist).
	WriteFile(ctx context.Context, path, user string, data []byte) error
	// PortURL is the base URL ("http://127.0.0.1:32768") at which this
	// worker reaches TCP port inside the sandbox, and the HTTP client (no
	// timeout; also a websocket dial's) that reaches it: nil for any
	// client, else the only one that does (a vendor's in-process
	// forwarder, which opens no local port for others to borrow).
	PortURL(ctx context.Context, port int) (string, *http.Client, error)
	// MaxScreens is how many screens the sandbox may run (1: a
	// single-screen sandbox; the machine then answers
	// MULTI_SCREEN_UNAVAILABLE for any second screen and starts nothing).
	MaxScreens() int
}

// Cmd is one command inside the sandbox.
type Cmd struct {
	// Argv is the program and its arguments (no shell).
	Argv []string
	// Env is added to the sandbox's environment.
	Env map[string]string
	// Cwd is an absolute directory ("" : the user's home).
	Cwd string
	// User runs the command ("" : the backend's default user).
	User string
	// Stdin feeds Exec's standard input (nil: none). Start ignores it and
	// gives the Process's Stdin instead.
	Stdin io.Reader
	// MaxOutput caps what Exec keeps of stdout and of stderr (≤ 0: 1 MiB);
	// the rest is read and dropped, and Result.Truncated says so.
	MaxOutput int
}

// Result is a finished command.
type Result struct {
	ExitCode  int
	Stdout    []byte
	Stderr    []byte
	Truncated bool
}

// Process is a started command.
type Process interface {
	// Stdin is the process's standard input; Close sends EOF.
	Stdin() io.WriteCloser
	// Stdout streams the process's standard output.
	Stdout() io.Reader
	// Stderr is what the process wrote to standard error so far (capped).
	Stderr() []byte
	// Wait waits for the process to end and returns its exit code.
	Wait() (int, error)
	// Close kills the process (if it still runs) and releases the stream.
	Close() error
}

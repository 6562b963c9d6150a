package main

// The operator's credential (CONTROL-PLANE.md, "Three credentials"): the
// operator socket, DATA_DIR/operator.sock (mode 0600 in a 0700 DATA_DIR,
// every connection's peer checked with SO_PEERCRED: root or the worker's
// own user), or WORKER_OPERATOR_TOKEN(_FILE) over TCP. Operator actions —
// adopt, dashboard sign-in links, attach — need one of them; WORKER_TOKEN,
// the callers' token, never suffices.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/worker/internal/httpapi"
)

// operatorSocket is the operator socket's path under dataDir.
func operatorSocket(dataDir string) string { return filepath.Join(dataDir, "operator.sock") }

// checkSecretFile refuses a token file (named by env var name) that is not
// a regular file owned by the worker's user with mode 0600 or stricter,
// saying how to fix it.
func checkSecretFile(name, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	uid := os.Geteuid()
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s %s is not a regular file", name, path)
	case sys == nil || int(sys.Uid) != uid:
		owner := -1
		if sys != nil {
			owner = int(sys.Uid)
		}
		return fmt.Errorf("%s %s is owned by uid %d, not by the worker's user (uid %d): a token file must be the worker's own, mode 0600; fix: chown %d %s && chmod 600 %s",
			name, path, owner, uid, uid, path, path)
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s %s is mode %04o: a token file must be mode 0600 (or stricter), readable by the worker's user only; fix: chmod 600 %s",
			name, path, st.Mode().Perm(), path)
	}
	return nil
}

// serverSecret reads the worker's own secret name from the env, or from the
// file named by name_FILE, which checkSecretFile must accept.
func serverSecret(name string) (val, file string, err error) {
	if v := os.Getenv(name); v != "" {
		return v, "", nil
	}
	f := os.Getenv(name + "_FILE")
	if f == "" {
		return "", "", nil
	}
	if err := checkSecretFile(name+"_FILE", f); err != nil {
		return "", "", err
	}
	return secretEnv(name)
}

// operatorToken returns WORKER_OPERATOR_TOKEN(_FILE), or "" when neither is
// set (then the operator socket is the only operator credential).
func operatorToken(workerToken string) (string, error) {
	tok, _, err := serverSecret("WORKER_OPERATOR_TOKEN")
	switch {
	case err != nil:
		return "", err
	case tok == "":
		return "", nil
	case len(tok) < 16:
		return "", errors.New("WORKER_OPERATOR_TOKEN (or WORKER_OPERATOR_TOKEN_FILE) must be at least 16 characters")
	case tok == workerToken:
		return "", errors.New("WORKER_OPERATOR_TOKEN must differ from WORKER_TOKEN: the callers' token never acts as the operator")
	}
	return tok, nil
}

// peerListener admits only connections whose peer (SO_PEERCRED) is root or
// the worker's own user; any other is closed unserved.
type peerListener struct {
	*net.UnixListener
	log zerolog.Logger
}

func (l peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && (uid == 0 || uid == os.Geteuid()) {
			return c, nil
		}
		l.log.Warn().Int("uid", uid).Msg("operator socket: refused a connection from another user")
		c.Close()
	}
}

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

// listenOperator binds the operator socket at path: its directory made
// 0700 (unless keepDirMode: the machines directory lies inside it and must
// stay traversable; the socket's mode and the peer check still hold), a
// stale socket of a previous worker replaced, the socket 0600. A socket
// another worker still answers on fails the start.
func listenOperator(path string, keepDirMode bool, log zerolog.Logger) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if keepDirMode {
		log.Warn().Str("dir", dir).Msg("operator socket: its directory holds the machines directory, so it is not made 0700")
	} else if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("operator socket: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("operator socket: %s exists and is not a socket; move it away", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("operator socket: %s is served by another worker (one worker per DATA_DIR)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("operator socket: remove the stale %s: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("operator socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("operator socket: %w", err)
	}
	return peerListener{UnixListener: ln, log: log}, nil
}

// serveOperator serves h to the operator on the socket at path until ctx
// ends or the returned stop is called. Every request on it is the
// operator's (httpapi.AsOperator), and its Host is the worker's TCP
// address base (http://host:port), so links it mints are ones a browser
// can open.
func serveOperator(ctx context.Context, path, base string, keepDirMode bool, h http.Handler, log zerolog.Logger) (stop func(), err error) {
	ln, err := listenOperator(path, keepDirMode, log)
	if err != nil {
		return nil, err
	}
	host := ""
	if u, err := url.Parse(base); err == nil {
		host = u.Host
	}
	op := httpapi.AsOperator(h)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host != "" {
			r.Host = host
		}
		op.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			_ = os.Remove(path)
		})
	}
	context.AfterFunc(ctx, stop)
	return stop, nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

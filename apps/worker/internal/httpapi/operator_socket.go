package httpapi

// The operator socket (CONTROL-PLANE.md, "Three credentials"):
// DATA_DIR/operator.sock, mode 0600 in a 0700 DATA_DIR, every connection's
// peer checked with SO_PEERCRED (root or the worker's own user). Every
// request on it is the operator's (AsOperator).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// OperatorSocket is the operator socket's path under dataDir.
func OperatorSocket(dataDir string) string { return filepath.Join(dataDir, "operator.sock") }

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

// ServeOperator serves h to the operator on the socket at path until ctx
// ends or the returned stop is called. Every request on it is the
// operator's (AsOperator), and its Host is the worker's TCP
// address base (http://host:port), so links it mints are ones a browser
// can open.
func ServeOperator(ctx context.Context, path, base string, keepDirMode bool, h http.Handler, log zerolog.Logger) (stop func(), err error) {
	ln, err := listenOperator(path, keepDirMode, log)
	if err != nil {
		return nil, err
	}
	host := ""
	if u, err := url.Parse(base); err == nil {
		host = u.Host
	}
	op := AsOperator(h)
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

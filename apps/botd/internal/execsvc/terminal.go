package execsvc

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/pkg/shared"
)

// ShellArgv is the terminal's shell.
var ShellArgv = []string{"/bin/bash", "-l"}

// ControlMessage is a text message on the terminal socket (see the package
// comment for the protocol).
type ControlMessage struct {
	// Type is "input" or "resize" (client → botd), or "exit" (botd → client).
	Type     string `json:"type"`
	Data     string `json:"data,omitempty"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
}

const maxTermSize = 1000

func termSize(q string, def int) (int, bool) {
	if q == "" {
		return def, true
	}
	n, err := strconv.Atoi(q)
	return n, err == nil && n >= 1 && n <= maxTermSize
}

func (s *Service) terminal(w http.ResponseWriter, r *http.Request) {
	// Every refusal happens before the upgrade, as a JSON error.
	dir, err := ResolveCwd(s.o.Workspace, r.URL.Query().Get("cwd"))
	if err != nil {
		s.fail(w, err)
		return
	}
	cols, ok1 := termSize(r.URL.Query().Get("cols"), 80)
	rows, ok2 := termSize(r.URL.Query().Get("rows"), 24)
	if !ok1 || !ok2 {
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "cols and rows must be 1..1000")
		return
	}
	select {
	case s.terms <- struct{}{}:
	default:
		httpx.WriteError(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "too many terminals are open")
		return
	}
	defer func() { <-s.terms }()

	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)

	ptmx, tty, err := openPty()
	if err != nil {
		s.o.Log.Error().Err(err).Msg("open pty")
		c.Close(websocket.StatusInternalError, "cannot open a pty")
		return
	}
	defer ptmx.Close()
	_ = setSize(ptmx, cols, rows)
	u := s.o.User
	p, err := s.o.Runner.Start(runner.Spec{
		Argv: ShellArgv, User: &u, Dir: dir,
		Env:   s.env(nil, "TERM=xterm-256color"),
		Stdin: tty, Stdout: tty, Stderr: tty,
		Setsid: true, Setctty: true, Ctty: 0,
	})
	tty.Close()
	if err != nil {
		s.o.Log.Error().Err(err).Msg("start terminal shell")
		c.Close(websocket.StatusInternalError, "cannot start the shell")
		return
	}
	sid := p.Pid() // the shell leads its own session
	log := s.o.Log.With().Int("pid", sid).Logger()
	log.Info().Msg("terminal opened")
	untrack, ok := s.track(func() { killSession(sid) })
	if !ok {
		killSession(sid)
	} else {
		defer untrack()
	}

	// Not r.Context(): the socket's life is the terminal's life, ended below.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		code, _ := p.Wait()
		exited <- code
	}()
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(buf)
			if n > 0 {
				if werr := c.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return // EIO once the last holder of the tty is gone: EOF
			}
		}
	}()
	// Input: the socket reader never blocks on the pty (a program that does
	// not read its input would otherwise keep us from seeing the socket
	// close); a writer goroutine feeds the pty from a bounded queue.
	inq := make(chan []byte, 1024)
	inWriterDone := make(chan struct{})
	go func() {
		defer close(inWriterDone)
		for data := range inq {
			if _, err := ptmx.Write(data); err != nil {
				for range inq { // drain until the reader stops
				}
				return
			}
		}
	}()
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		defer close(inq)
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageText {
				var m ControlMessage
				if json.Unmarshal(data, &m) != nil {
					continue
				}
				switch m.Type {
				case "resize":
					if m.Cols >= 1 && m.Cols <= maxTermSize && m.Rows >= 1 && m.Rows <= maxTermSize {
						_ = setSize(ptmx, m.Cols, m.Rows)
					}
					continue
				case "input":
					data = []byte(m.Data)
				default:
					continue
				}
			}
			select {
			case inq <- data:
			default:
				c.Close(websocket.StatusPolicyViolation, "the terminal is not reading its input")
				return
			}
		}
	}()

	select {
	case code := <-exited:
		// The shell ended by itself: end what it left behind, flush the
		// last output, say how it ended, close normally.
		killSession(sid)
		select {
		case <-outDone:
		case <-time.After(2 * time.Second):
		}
		b, _ := json.Marshal(ControlMessage{Type: "exit", ExitCode: &code})
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_ = c.Write(wctx, websocket.MessageText, b)
		wcancel()
		c.Close(websocket.StatusNormalClosure, "shell exited")
		log.Info().Int("exit_code", code).Msg("terminal shell exited")
	case <-inDone:
		// The socket closed: the shell and all its jobs end with it.
		killSession(sid)
		<-exited
		log.Info().Msg("terminal closed by client")
	}
	cancel()
	ptmx.Close() // a non-blocking descriptor: this unblocks both pumps
	<-outDone
	<-inDone
	<-inWriterDone
}

// openPty opens a pty pair whose master is non-blocking and in Go's poller,
// so Close interrupts a pending Read or Write. creack/pty's master is in
// blocking mode (its ioctls call Fd()), and a Write blocked on a full pty
// would never return, even after the session is killed.
func openPty() (master, tty *os.File, err error) {
	p, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	// F_DUPFD_CLOEXEC: atomically close-on-exec, so a child started by a
	// concurrent /exec between a dup and a CloseOnExec cannot inherit the
	// terminal's master.
	fd, err := unix.FcntlInt(p.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		tty.Close()
		return nil, nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		tty.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

// setSize sets the window size without Fd(), which would make the
// descriptor blocking again.
func setSize(master *os.File, cols, rows int) error {
	sc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
	if err != nil {
		return err
	}
	return ierr
}

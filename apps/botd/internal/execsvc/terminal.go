package execsvc

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

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

	ptmx, tty, err := pty.Open()
	if err != nil {
		s.o.Log.Error().Err(err).Msg("open pty")
		c.Close(websocket.StatusInternalError, "cannot open a pty")
		return
	}
	defer ptmx.Close()
	_ = pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
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
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
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
						_ = pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(m.Cols), Rows: uint16(m.Rows)})
					}
					continue
				case "input":
					data = []byte(m.Data)
				default:
					continue
				}
			}
			if _, err := ptmx.Write(data); err != nil {
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
	ptmx.Close()
	select {
	case <-outDone:
	case <-time.After(2 * time.Second):
		log.Warn().Msg("terminal output pump did not stop")
	}
}

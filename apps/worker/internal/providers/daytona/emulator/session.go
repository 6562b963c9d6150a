package emulator

// The toolbox's process sessions (POST /process/session, …/exec with
// runAsync, …/command/{id}/logs and /input, DELETE): each command runs as
// `sh -c command` through the engine's exec API as the sandbox's user, its
// stdin a pipe the input route writes to (the daemon gives a session's
// command no end of input: it ends when the session is deleted), its
// stdout and stderr kept whole for the logs route. Deleting the session
// kills what its commands started.

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	dockerclient "github.com/moby/moby/client"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
)

type procSession struct {
	id   string
	mu   sync.Mutex
	cmds []*procCmd
}

type procCmd struct {
	id, command string
	stdin       *io.PipeWriter
	cancel      context.CancelFunc
	done        chan struct{}

	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	exit           *int
}

// lockedWriter appends to one of a command's buffers.
type lockedWriter struct {
	c   *procCmd
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.buf.Write(p)
}

func (c *procCmd) view() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := map[string]any{"id": c.id, "command": c.command}
	if c.exit != nil {
		v["exitCode"] = *c.exit
	}
	return v
}

func (e *Emulator) session(w http.ResponseWriter, r *http.Request) (*procSession, bool) {
	b := boxOf(r)
	sid := r.PathValue("sid")
	e.mu.Lock()
	s := b.sessions[sid]
	e.mu.Unlock()
	if s == nil {
		writeError(w, r, http.StatusNotFound, "session %s not found", sid)
		return nil, false
	}
	return s, true
}

func (e *Emulator) command(w http.ResponseWriter, r *http.Request) (*procCmd, bool) {
	s, ok := e.session(w, r)
	if !ok {
		return nil, false
	}
	cid := r.PathValue("cid")
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cmds {
		if c.id == cid {
			return c, true
		}
	}
	writeError(w, r, http.StatusNotFound, "command %s not found", cid)
	return nil, false
}

func (s *procSession) view() map[string]any {
	s.mu.Lock()
	cmds := append([]*procCmd(nil), s.cmds...)
	s.mu.Unlock()
	out := make([]map[string]any, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, c.view())
	}
	return map[string]any{"sessionId": s.id, "commands": out}
}

func (e *Emulator) listSessions(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r)
	e.mu.Lock()
	ss := make([]*procSession, 0, len(b.sessions))
	for _, s := range b.sessions {
		ss = append(ss, s)
	}
	e.mu.Unlock()
	out := make([]map[string]any, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.view())
	}
	emukit.WriteJSON(w, http.StatusOK, out)
}

func (e *Emulator) createSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SessionID == "" {
		writeError(w, r, http.StatusBadRequest, "sessionId is required")
		return
	}
	b := boxOf(r)
	e.mu.Lock()
	defer e.mu.Unlock()
	if b.sessions == nil {
		b.sessions = map[string]*procSession{}
	}
	if b.sessions[req.SessionID] != nil {
		writeError(w, r, http.StatusConflict, "session %s already exists", req.SessionID)
		return
	}
	b.sessions[req.SessionID] = &procSession{id: req.SessionID}
	w.WriteHeader(http.StatusCreated)
}

func (e *Emulator) getSession(w http.ResponseWriter, r *http.Request) {
	if s, ok := e.session(w, r); ok {
		emukit.WriteJSON(w, http.StatusOK, s.view())
	}
}

func (e *Emulator) deleteSession(w http.ResponseWriter, r *http.Request) {
	s, ok := e.session(w, r)
	if !ok {
		return
	}
	b := boxOf(r)
	e.mu.Lock()
	delete(b.sessions, s.id)
	e.mu.Unlock()
	s.mu.Lock()
	cmds := append([]*procCmd(nil), s.cmds...)
	s.mu.Unlock()
	for _, c := range cmds {
		c.cancel()
		_ = c.stdin.Close()
	}
	for _, c := range cmds {
		<-c.done
	}
	w.WriteHeader(http.StatusNoContent)
}

func (e *Emulator) sessionExec(w http.ResponseWriter, r *http.Request) {
	s, ok := e.session(w, r)
	if !ok {
		return
	}
	var req struct {
		Command  string `json:"command"`
		RunAsync bool   `json:"runAsync"`
		Async    bool   `json:"async"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		writeError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	b := boxOf(r)
	idb := make([]byte, 8)
	_, _ = cryptorand.Read(idb)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	c := &procCmd{id: hex.EncodeToString(idb), command: req.Command, stdin: pw, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.cmds = append(s.cmds, c)
	s.mu.Unlock()
	go func() {
		defer close(c.done)
		defer cancel()
		code, err := e.runTree(ctx, b, []string{"/bin/sh", "-c", req.Command}, pr, lockedWriter{c, &c.stdout}, lockedWriter{c, &c.stderr})
		if err != nil && ctx.Err() == nil {
			lockedWriter{c, &c.stderr}.Write([]byte(err.Error()))
		}
		if err != nil {
			code = -1
			if ctx.Err() != nil {
				code = 137
			}
		}
		_ = pr.Close()
		c.mu.Lock()
		c.exit = &code
		c.mu.Unlock()
	}()
	if req.RunAsync || req.Async {
		emukit.WriteJSON(w, http.StatusAccepted, map[string]any{"cmdId": c.id})
		return
	}
	select {
	case <-c.done:
	case <-r.Context().Done():
		return
	}
	c.mu.Lock()
	out := map[string]any{"cmdId": c.id, "output": c.stdout.String() + c.stderr.String(),
		"stdout": c.stdout.String(), "stderr": c.stderr.String(), "exitCode": *c.exit}
	c.mu.Unlock()
	emukit.WriteJSON(w, http.StatusOK, out)
}

func (e *Emulator) sessionCommand(w http.ResponseWriter, r *http.Request) {
	if c, ok := e.command(w, r); ok {
		emukit.WriteJSON(w, http.StatusOK, c.view())
	}
}

func (e *Emulator) sessionLogs(w http.ResponseWriter, r *http.Request) {
	c, ok := e.command(w, r)
	if !ok {
		return
	}
	if r.URL.Query().Get("follow") == "true" {
		writeError(w, r, http.StatusBadRequest, "follow needs a WebSocket (not served by the emulator)")
		return
	}
	c.mu.Lock()
	out := map[string]string{"output": c.stdout.String() + c.stderr.String(), "stdout": c.stdout.String(), "stderr": c.stderr.String()}
	c.mu.Unlock()
	emukit.WriteJSON(w, http.StatusOK, out)
}

func (e *Emulator) sessionInput(w http.ResponseWriter, r *http.Request) {
	c, ok := e.command(w, r)
	if !ok {
		return
	}
	var req struct {
		Data *string `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Data == nil {
		writeError(w, r, http.StatusBadRequest, "data is required")
		return
	}
	c.mu.Lock()
	ended := c.exit != nil
	c.mu.Unlock()
	if ended {
		writeError(w, r, http.StatusBadRequest, "command %s has ended", c.id)
		return
	}
	// The process may stop reading: bound the write.
	done := make(chan error, 1)
	go func() { _, err := io.WriteString(c.stdin, *req.Data); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "command %s does not take input: %v", c.id, err)
			return
		}
	case <-time.After(30 * time.Second):
		writeError(w, r, http.StatusRequestTimeout, "command %s did not read its input", c.id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// runTree is run for a session's command: when ctx ends, everything the
// command started is killed too (by host pid: the engine runs on this
// host), not only its shell.
func (e *Emulator) runTree(ctx context.Context, b *sandbox, argv []string, stdin io.Reader, out, errw io.Writer) (int, error) {
	cli := e.cfg.Docker
	ex, err := cli.ExecCreate(ctx, b.container, dockerclient.ExecCreateOptions{
		User: b.user, Cmd: argv, AttachStdout: true, AttachStderr: true, AttachStdin: true,
	})
	if err != nil {
		return -1, err
	}
	stop := context.AfterFunc(ctx, func() {
		if in, err := cli.ExecInspect(context.Background(), ex.ID, dockerclient.ExecInspectOptions{}); err == nil && in.PID > 0 {
			killTree(in.PID)
		}
	})
	defer stop()
	return e.attach(ctx, ex.ID, stdin, out, errw)
}

// attach runs the created exec id to its end.
func (e *Emulator) attach(ctx context.Context, id string, stdin io.Reader, out, errw io.Writer) (int, error) {
	cli := e.cfg.Docker
	att, err := cli.ExecAttach(ctx, id, dockerclient.ExecAttachOptions{})
	if err != nil {
		return -1, err
	}
	defer att.Close()
	go func() {
		_, _ = io.Copy(att.Conn, stdin)
		_ = att.CloseWrite()
	}()
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, errw, att.Reader)
		copied <- err
	}()
	select {
	case err := <-copied:
		if err != nil {
			return -1, err
		}
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	for {
		in, err := cli.ExecInspect(context.WithoutCancel(ctx), id, dockerclient.ExecInspectOptions{})
		if err != nil {
			return -1, err
		}
		if !in.Running {
			return in.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killTree kills pid and its descendants (read from the host's /proc).
func killTree(pid int) {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so after the last ')'.
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var all []int
	var walk func(int)
	walk = func(p int) {
		all = append(all, p)
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	for _, p := range all {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

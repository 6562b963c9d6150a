package emulator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/moby/moby/api/pkg/stdcopy"
	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process/processconnect"
)

// procTable holds a sandbox's processes started through envd.
type procTable struct {
	mu     sync.Mutex
	procs  map[uint32]*proc
	synth  uint32
	closed bool
}

func newProcTable() *procTable { return &procTable{procs: map[uint32]*proc{}, synth: 1 << 22} }

// closeAll drops the processes (their container stopped or went).
func (t *procTable) closeAll() {
	t.mu.Lock()
	procs := t.procs
	t.procs = map[uint32]*proc{}
	t.closed = true
	t.mu.Unlock()
	for _, p := range procs {
		p.att.Close()
	}
}

func (t *procTable) find(sel *process.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		if p, ok := t.procs[s.Pid]; ok {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", s.Pid))
	case *process.ProcessSelector_Tag:
		for _, p := range t.procs {
			if p.tag != nil && *p.tag == s.Tag {
				return p, nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", s.Tag))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("invalid process selector"))
}

type proc struct {
	pid     uint32
	hostPID int
	tag     *string
	cfg     *process.ProcessConfig
	tty     bool
	execID  string
	att     dockerclient.HijackedResponse
	stdinMu sync.Mutex

	mu       sync.Mutex
	subs     map[*subscriber]struct{}
	ended    *process.ProcessEvent
	signaled syscall.Signal
}

// subscriber is one stream's unbounded queue of events.
type subscriber struct {
	mu    sync.Mutex
	queue []*process.ProcessEvent
	wake  chan struct{}
}

func newSubscriber() *subscriber { return &subscriber{wake: make(chan struct{}, 1)} }

func (s *subscriber) push(ev *process.ProcessEvent) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) drain() []*process.ProcessEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

func (p *proc) subscribe() (*subscriber, *process.ProcessEvent) {
	s := newSubscriber()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != nil {
		return s, p.ended
	}
	p.subs[s] = struct{}{}
	return s, nil
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

func (p *proc) publish(ev *process.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, end := ev.GetEvent().(*process.ProcessEvent_End); end {
		p.ended = ev
	}
	for s := range p.subs {
		s.push(ev)
	}
}

// eventWriter turns an output stream into data events.
type eventWriter struct {
	p    *proc
	kind int // 1 stdout, 2 stderr, 3 pty
}

func (w eventWriter) Write(b []byte) (int, error) {
	data := append([]byte(nil), b...)
	var out process.ProcessEvent_DataEvent
	switch w.kind {
	case 1:
		out.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: data}
	case 2:
		out.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: data}
	default:
		out.Output = &process.ProcessEvent_DataEvent_Pty{Pty: data}
	}
	w.p.publish(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: &out}})
	return len(b), nil
}

type processService struct {
	processconnect.UnimplementedProcessHandler
	e *Emulator
}

// rpcUser resolves the Basic user of an RPC.
func (s *processService) rpcUser(ctx context.Context, h interface{ Get(string) string }) (*sandbox, userInfo, error) {
	b := boxOf(ctx)
	name := ""
	if a := h.Get("Authorization"); a != "" {
		name = basicUser(map[string][]string{"Authorization": {a}})
	}
	u, err := s.e.user(ctx, b, name)
	if err != nil {
		return nil, userInfo{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return b, u, nil
}

func (s *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	b := boxOf(ctx)
	b.procs.mu.Lock()
	var out []*process.ProcessInfo
	for _, p := range b.procs.procs {
		out = append(out, &process.ProcessInfo{Config: p.cfg, Pid: p.pid, Tag: p.tag})
	}
	b.procs.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return connect.NewResponse(&process.ListResponse{Processes: out}), nil
}

func (s *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	b, u, err := s.rpcUser(ctx, req.Header())
	if err != nil {
		return err
	}
	cfg := req.Msg.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd := u.cwd
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cwd = resolve(*cfg.Cwd, u)
	}
	keys := make([]string, 0, len(cfg.GetEnvs()))
	for k := range cfg.GetEnvs() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := []string{"HOME=" + u.home, "USER=" + u.name, "LOGNAME=" + u.name}
	for _, k := range keys {
		env = append(env, k+"="+cfg.GetEnvs()[k])
	}
	pty := req.Msg.GetPty()
	opts := dockerclient.ExecCreateOptions{
		User: u.name, Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: env, WorkingDir: cwd,
		AttachStdin: true, AttachStdout: true, AttachStderr: true, TTY: pty != nil,
	}
	if pty != nil {
		env = append(env, "TERM=xterm-256color")
		opts.Env = env
		opts.ConsoleSize = dockerclient.ConsoleSize{Height: uint(pty.GetSize().GetRows()), Width: uint(pty.GetSize().GetCols())}
	}
	cli := s.e.cfg.Docker
	ex, err := cli.ExecCreate(ctx, b.container, opts)
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("error starting process: %w", err))
	}
	// The process outlives this stream (as envd's do): it is not bound to
	// the request's context.
	bg := context.WithoutCancel(ctx)
	att, err := cli.ExecAttach(bg, ex.ID, dockerclient.ExecAttachOptions{TTY: pty != nil, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("error starting process: %w", err))
	}
	p := &proc{cfg: cfg, tag: req.Msg.Tag, tty: pty != nil, execID: ex.ID, att: att.HijackedResponse, subs: map[*subscriber]struct{}{}}
	p.hostPID, p.pid = s.e.pids(bg, ex.ID)
	b.procs.mu.Lock()
	if p.pid == 0 {
		b.procs.synth++
		p.pid = b.procs.synth
	}
	if b.procs.closed {
		b.procs.mu.Unlock()
		att.Close()
		return connect.NewError(connect.CodeUnavailable, errors.New("the sandbox is stopping"))
	}
	b.procs.procs[p.pid] = p
	b.procs.mu.Unlock()
	if req.Msg.Stdin != nil && !*req.Msg.Stdin && pty == nil {
		_ = att.CloseWrite()
	}
	sub, _ := p.subscribe()
	defer p.unsubscribe(sub)
	go s.e.pump(bg, b, p)
	start := &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: p.pid}}}
	if err := stream.Send(&process.StartResponse{Event: start}); err != nil {
		return err
	}
	return follow(ctx, req.Header().Get("Keepalive-Ping-Interval"), sub, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
}

// follow sends a subscriber's events until the end event (or the client
// goes), with keepalives at the interval (seconds) the client asked for.
func follow(ctx context.Context, interval string, sub *subscriber, send func(*process.ProcessEvent) error) error {
	var tick <-chan time.Time
	if n, err := strconv.Atoi(interval); err == nil && n > 0 {
		t := time.NewTicker(time.Duration(n) * time.Second)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-sub.wake:
			for _, ev := range sub.drain() {
				if err := send(ev); err != nil {
					return err
				}
				if _, end := ev.GetEvent().(*process.ProcessEvent_End); end {
					return nil
				}
			}
		}
	}
}

// pids reads the exec's host PID and its PID in the container (NSpid in
// /proc, when the engine runs on this host); 0 when unknown.
func (e *Emulator) pids(ctx context.Context, execID string) (int, uint32) {
	var host int
	for i := 0; i < 200; i++ {
		in, err := e.cfg.Docker.ExecInspect(ctx, execID, dockerclient.ExecInspectOptions{})
		if err != nil {
			return 0, 0
		}
		if in.PID != 0 {
			host = in.PID
			break
		}
		if !in.Running && i > 0 {
			return 0, 0
		}
		time.Sleep(5 * time.Millisecond)
	}
	if host == 0 {
		return 0, 0
	}
	f, err := os.Open("/proc/" + strconv.Itoa(host) + "/status")
	if err != nil {
		return host, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			fields := strings.Fields(rest)
			if n, err := strconv.ParseUint(fields[len(fields)-1], 10, 32); err == nil && len(fields) > 1 {
				return host, uint32(n)
			}
		}
	}
	return host, 0
}

// pump streams a process's output as events and ends with its exit.
func (e *Emulator) pump(ctx context.Context, b *sandbox, p *proc) {
	if p.tty {
		buf := make([]byte, 32<<10)
		w := eventWriter{p: p, kind: 3}
		for {
			n, err := p.att.Reader.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
			}
			if err != nil {
				break
			}
		}
	} else {
		_, _ = stdcopy.StdCopy(eventWriter{p: p, kind: 1}, eventWriter{p: p, kind: 2}, p.att.Reader)
	}
	p.att.Close()
	end := &process.ProcessEvent_EndEvent{}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	code, err := e.exitCode(ictx, p.execID)
	cancel()
	p.mu.Lock()
	sig := p.signaled
	p.mu.Unlock()
	switch {
	case err != nil:
		msg := err.Error()
		end.ExitCode, end.Status, end.Error = -1, "unknown", &msg
	case sig != 0 && code == 128+int(sig):
		end.ExitCode, end.Exited, end.Status = -1, false, "signal: "+sig.String()
	default:
		end.ExitCode, end.Exited, end.Status = int32(code), true, fmt.Sprintf("exit status %d", code)
	}
	b.procs.mu.Lock()
	if b.procs.procs[p.pid] == p {
		delete(b.procs.procs, p.pid)
	}
	b.procs.mu.Unlock()
	p.publish(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}})
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	b := boxOf(ctx)
	p, err := b.procs.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub, ended := p.subscribe()
	defer p.unsubscribe(sub)
	if ended != nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", p.pid))
	}
	start := &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: p.pid}}}
	if err := stream.Send(&process.ConnectResponse{Event: start}); err != nil {
		return err
	}
	return follow(ctx, req.Header().Get("Keepalive-Ping-Interval"), sub, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	p, err := boxOf(ctx).procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var data []byte
	switch in := req.Msg.GetInput().GetInput().(type) {
	case *process.ProcessInput_Stdin:
		if p.tty {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the process has a pty: send pty input"))
		}
		data = in.Stdin
	case *process.ProcessInput_Pty:
		if !p.tty {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the process has no pty"))
		}
		data = in.Pty
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no input"))
	}
	p.stdinMu.Lock()
	_, err = p.att.Conn.Write(data)
	p.stdinMu.Unlock()
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("error writing to stdin: %w", err))
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	p, err := boxOf(ctx).procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.tty {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("cannot close stdin of a pty process: send Ctrl+D"))
	}
	p.stdinMu.Lock()
	err = p.att.CloseWrite()
	p.stdinMu.Unlock()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	b := boxOf(ctx)
	p, err := b.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case process.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("unsupported signal"))
	}
	p.mu.Lock()
	p.signaled = sig
	p.mu.Unlock()
	// The engine on this host: signal the process directly; otherwise kill
	// it from inside by its PID there.
	if p.hostPID != 0 && syscall.Kill(p.hostPID, sig) == nil {
		return connect.NewResponse(&process.SendSignalResponse{}), nil
	}
	_, errOut, code, err := s.e.run(ctx, b, "root", []string{"kill", "-s", strings.TrimPrefix(sigName(sig), "SIG"), strconv.Itoa(int(p.pid))}, nil)
	if err != nil || code != 0 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error sending signal: %v %s", err, errOut))
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func sigName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

func (s *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	p, err := boxOf(ctx).procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if !p.tty {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the process has no pty"))
		}
		if _, err := s.e.cfg.Docker.ExecResize(ctx, p.execID, dockerclient.ExecResizeOptions{Height: uint(size.GetRows()), Width: uint(size.GetCols())}); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

package desktop

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/network"
	dockerclient "github.com/moby/moby/client"
)

// DockerBackend drives one container of a desktop image through the
// Docker engine's exec and archive APIs, the way a vendor SDK drives its
// sandbox through envd: commands with streamed output, files, and ports
// published on 127.0.0.1.
type DockerBackend struct {
	cli       *dockerclient.Client
	container string
	screens   int

	mu   sync.Mutex
	uids map[string][2]int
}

// NewDockerBackend returns the backend of container (id or name) on the
// engine cli talks to; screens is how many screens it may run (its
// published view/control ports decide: 0 means 1).
func NewDockerBackend(cli *dockerclient.Client, container string, screens int) *DockerBackend {
	if screens <= 0 {
		screens = 1
	}
	return &DockerBackend{cli: cli, container: container, screens: screens, uids: map[string][2]int{}}
}

// MaxScreens is what the backend was made with.
func (d *DockerBackend) MaxScreens() int { return d.screens }

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (d *DockerBackend) create(ctx context.Context, cmd Cmd, stdin bool) (string, error) {
	if len(cmd.Argv) == 0 {
		return "", errors.New("docker backend: empty argv")
	}
	r, err := d.cli.ExecCreate(ctx, d.container, dockerclient.ExecCreateOptions{
		User: cmd.User, Cmd: cmd.Argv, Env: envList(cmd.Env), WorkingDir: cmd.Cwd,
		AttachStdin: stdin, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return "", fmt.Errorf("docker backend: exec %s: %w", cmd.Argv[0], err)
	}
	return r.ID, nil
}

// capped keeps at most max bytes and counts what it dropped.
type capped struct {
	buf     bytes.Buffer
	max     int
	dropped bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if room >= len(p) {
		return c.buf.Write(p)
	}
	if room > 0 {
		c.buf.Write(p[:room])
	}
	c.dropped = true
	return len(p), nil
}

// Exec runs cmd to completion.
func (d *DockerBackend) Exec(ctx context.Context, cmd Cmd) (Result, error) {
	id, err := d.create(ctx, cmd, cmd.Stdin != nil)
	if err != nil {
		return Result{}, err
	}
	att, err := d.cli.ExecAttach(ctx, id, dockerclient.ExecAttachOptions{})
	if err != nil {
		return Result{}, fmt.Errorf("docker backend: attach %s: %w", cmd.Argv[0], err)
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, func() { att.Close() })
	defer stop()
	if cmd.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, cmd.Stdin)
			_ = att.CloseWrite()
		}()
	}
	max := cmd.MaxOutput
	if max <= 0 {
		max = 1 << 20
	}
	out, errb := &capped{max: max}, &capped{max: max}
	if _, err := stdcopy.StdCopy(out, errb, att.Reader); err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return Result{}, fmt.Errorf("docker backend: read %s: %w", cmd.Argv[0], err)
	}
	code, err := d.exitCode(ctx, id)
	if err != nil {
		return Result{}, err
	}
	return Result{ExitCode: code, Stdout: out.buf.Bytes(), Stderr: errb.buf.Bytes(), Truncated: out.dropped || errb.dropped}, nil
}

// exitCode waits (briefly) for the engine to record the exec's end.
func (d *DockerBackend) exitCode(ctx context.Context, id string) (int, error) {
	for i := 0; ; i++ {
		r, err := d.cli.ExecInspect(ctx, id, dockerclient.ExecInspectOptions{})
		if err != nil {
			return 0, fmt.Errorf("docker backend: inspect exec: %w", err)
		}
		if !r.Running {
			return r.ExitCode, nil
		}
		if i > 200 {
			return 0, errors.New("docker backend: the exec's output ended but it still runs")
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// Start starts cmd with its stdin and stdout streaming. The process
// records its pid in a file inside the container, so Close can kill it
// there (the engine's exec pid is the host's).
func (d *DockerBackend) Start(ctx context.Context, cmd Cmd) (Process, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	pidFile := "/tmp/.open-bot-proc-" + hex.EncodeToString(rnd[:]) + ".pid"
	if len(cmd.Argv) == 0 {
		return nil, errors.New("docker backend: empty argv")
	}
	cmd.Argv = append([]string{"sh", "-c", `echo $$ >"$0"; exec "$@"`, pidFile}, cmd.Argv...)
	id, err := d.create(ctx, cmd, true)
	if err != nil {
		return nil, err
	}
	att, err := d.cli.ExecAttach(ctx, id, dockerclient.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("docker backend: attach %s: %w", cmd.Argv[0], err)
	}
	pr, pw := io.Pipe()
	p := &dockerProc{d: d, id: id, pidFile: pidFile, att: att, stdout: pr, errb: &capped{max: 64 << 10}, done: make(chan struct{})}
	go func() {
		_, err := stdcopy.StdCopy(pw, &lockedWriter{w: p.errb, mu: &p.mu}, att.Reader)
		pw.CloseWithError(err)
		close(p.done)
	}()
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	p.stop = stop
	return p, nil
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

type dockerProc struct {
	d       *DockerBackend
	id      string
	pidFile string
	att     dockerclient.ExecAttachResult
	stdout  *io.PipeReader
	done    chan struct{}
	stop    func() bool

	mu     sync.Mutex
	errb   *capped
	closed bool
}

type stdinWriter struct{ p *dockerProc }

func (s stdinWriter) Write(b []byte) (int, error) { return s.p.att.Conn.Write(b) }
func (s stdinWriter) Close() error                { return s.p.att.CloseWrite() }

func (p *dockerProc) Stdin() io.WriteCloser { return stdinWriter{p} }
func (p *dockerProc) Stdout() io.Reader     { return p.stdout }

func (p *dockerProc) Stderr() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.errb.buf.Bytes()...)
}

// Wait waits for the output to end and returns the exit code.
func (p *dockerProc) Wait() (int, error) {
	<-p.done
	return p.d.exitCode(context.Background(), p.id)
}

// Close ends the stream; a process still running is killed (SIGKILL to
// its pid inside the container).
func (p *dockerProc) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	if p.stop != nil {
		p.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := p.d.cli.ExecInspect(ctx, p.id, dockerclient.ExecInspectOptions{}); err == nil && r.Running {
		_, _ = p.d.Exec(ctx, Cmd{Argv: []string{"sh", "-c", `p="$(cat "$1" 2>/dev/null)" && kill -KILL "$p" 2>/dev/null; rm -f "$1"`, "sh", p.pidFile}})
	} else {
		_, _ = p.d.Exec(ctx, Cmd{Argv: []string{"rm", "-f", p.pidFile}})
	}
	p.att.Close()
	_ = p.stdout.Close()
	return nil
}

func (d *DockerBackend) ids(ctx context.Context, user string) (int, int, error) {
	d.mu.Lock()
	v, ok := d.uids[user]
	d.mu.Unlock()
	if ok {
		return v[0], v[1], nil
	}
	r, err := d.Exec(ctx, Cmd{Argv: []string{"sh", "-c", `id -u "$1"; id -g "$1"`, "sh", user}})
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(r.Stdout))
	if r.ExitCode != 0 || len(f) != 2 {
		return 0, 0, fmt.Errorf("docker backend: no user %q in the container", user)
	}
	uid, _ := strconv.Atoi(f[0])
	gid, _ := strconv.Atoi(f[1])
	d.mu.Lock()
	d.uids[user] = [2]int{uid, gid}
	d.mu.Unlock()
	return uid, gid, nil
}

// ReadFile reads path through the archive API.
func (d *DockerBackend) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	r, err := d.cli.CopyFromContainer(ctx, d.container, dockerclient.CopyFromContainerOptions{SourcePath: p})
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("docker backend: %s: %w", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("docker backend: read %s: %w", p, err)
	}
	defer r.Content.Close()
	tr := tar.NewReader(r.Content)
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("docker backend: read %s: %w", p, err)
	}
	if h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("docker backend: %s is not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(tr, max))
}

// WriteFile writes path through the archive API, owned by user.
func (d *DockerBackend) WriteFile(ctx context.Context, p, user string, data []byte) error {
	uid, gid := 0, 0
	if user != "" {
		var err error
		if uid, gid, err = d.ids(ctx, user); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: path.Base(p), Mode: 0o644, Size: int64(len(data)), Uid: uid, Gid: gid, ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	_, err := d.cli.CopyToContainer(ctx, d.container, dockerclient.CopyToContainerOptions{DestinationPath: path.Dir(p), Content: &buf})
	if err != nil {
		return fmt.Errorf("docker backend: write %s: %w", p, err)
	}
	return nil
}

// PortURL is where the engine published port on 127.0.0.1 (any client).
func (d *DockerBackend) PortURL(ctx context.Context, port int) (string, *http.Client, error) {
	r, err := d.cli.ContainerInspect(ctx, d.container, dockerclient.ContainerInspectOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("docker backend: inspect: %w", err)
	}
	c := r.Container
	if c.NetworkSettings != nil {
		for _, b := range c.NetworkSettings.Ports[network.MustParsePort(strconv.Itoa(port)+"/tcp")] {
			if b.HostIP.IsLoopback() && b.HostPort != "" {
				return "http://" + net.JoinHostPort("127.0.0.1", b.HostPort), nil, nil
			}
		}
	}
	return "", nil, fmt.Errorf("docker backend: port %d of the container is not published on 127.0.0.1", port)
}

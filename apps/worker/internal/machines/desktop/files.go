package desktop

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Exec limits (botd's).
const (
	DefaultExecTimeout = 60 * time.Second
	MaxExecTimeout     = 30 * time.Minute
	MaxExecOutput      = 1 << 20
	maxListEntries     = 10000
)

// checkPath validates a workspace-relative path as botd does (400 for
// malformed, 403 FS_SANDBOX_DENIED for absolute or ".."). In a sandbox
// that is one trust domain this gives clear errors, not a boundary: the
// bot's own commands run as the same user.
func checkPath(p string, allowRoot bool) (string, error) {
	switch {
	case len(p) > 4096:
		return "", apiErr(http.StatusBadRequest, shared.CodeBadRequest, "path is longer than 4096 bytes")
	case strings.IndexByte(p, 0) >= 0:
		return "", apiErr(http.StatusBadRequest, shared.CodeBadRequest, "path contains a NUL byte")
	case !utf8.ValidString(p):
		return "", apiErr(http.StatusBadRequest, shared.CodeBadRequest, "path is not valid UTF-8")
	case p == "" || p == ".":
		if !allowRoot {
			return "", apiErr(http.StatusBadRequest, shared.CodeBadRequest, "path is required")
		}
		return ".", nil
	case strings.HasPrefix(p, "/"):
		return "", apiErr(http.StatusForbidden, shared.CodeFSSandboxDenied, "absolute paths are not allowed: paths are relative to the workspace")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", apiErr(http.StatusForbidden, shared.CodeFSSandboxDenied, "\"..\" is not allowed in workspace paths")
		}
	}
	return path.Clean(p), nil
}

func (m *Machine) abs(rel string) string { return path.Join(m.o.Workspace, rel) }

// ensureWorkspace makes the workspace directory (as the user), once per
// machine (again after a command could not start in it).
func (m *Machine) ensureWorkspace(ctx context.Context) error {
	m.mu.Lock()
	ready := m.wsReady
	m.mu.Unlock()
	if ready {
		return nil
	}
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"mkdir", "-p", "--", m.o.Workspace}, User: m.o.User, Cwd: m.o.Home})
	if err != nil {
		return err
	}
	if r.ExitCode != 0 {
		return fmt.Errorf("desktop machine: make the workspace %s: %s", m.o.Workspace, firstLine(r.Stderr))
	}
	m.mu.Lock()
	m.wsReady = true
	m.mu.Unlock()
	return nil
}

// Exec runs argv as the user in the workspace (HOME is the workspace, as
// botd's), killed after the timeout by coreutils' timeout in the sandbox.
func (m *Machine) Exec(ctx context.Context, req client.ExecRequest) (client.ExecResult, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return client.ExecResult{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "argv is required")
	}
	if req.ActScreen != "" {
		return client.ExecResult{}, apiErr(http.StatusNotImplemented, shared.CodeUnavailable, "an act channel (OSWorld's pyautogui) needs botd; this backend's desktop has none")
	}
	timeout := DefaultExecTimeout
	switch {
	case req.TimeoutMs < 0:
		return client.ExecResult{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "timeoutMs must not be negative")
	case req.TimeoutMs > 0:
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
		if timeout > MaxExecTimeout {
			return client.ExecResult{}, apiErr(http.StatusBadRequest, shared.CodeBadRequest, "timeoutMs must be at most %d", MaxExecTimeout.Milliseconds())
		}
	}
	cwd, err := checkPath(req.Cwd, true)
	if err != nil {
		return client.ExecResult{}, err
	}
	if err := m.ensureWorkspace(ctx); err != nil {
		return client.ExecResult{}, err
	}
	env := map[string]string{}
	for k, v := range req.Env {
		env[k] = v
	}
	env["HOME"] = m.o.Workspace
	secs := strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64)
	argv := append([]string{"timeout", "--kill-after=2", secs}, req.Argv...)
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	r, err := m.b.Exec(cctx, Cmd{Argv: argv, Env: env, Cwd: m.abs(cwd), User: m.o.User, MaxOutput: MaxExecOutput})
	if err != nil {
		m.mu.Lock()
		m.wsReady = false
		m.mu.Unlock()
		return client.ExecResult{}, err
	}
	out := client.ExecResult{ExitCode: r.ExitCode, Stdout: string(r.Stdout), Stderr: string(r.Stderr), Truncated: r.Truncated}
	if (r.ExitCode == 124 || r.ExitCode == 137) && time.Since(start) >= timeout {
		out.TimedOut = true
	}
	return out, nil
}

// ReadFile reads a workspace file (at most max bytes).
func (m *Machine) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	rel, err := checkPath(p, false)
	if err != nil {
		return nil, err
	}
	b, err := m.b.ReadFile(ctx, m.abs(rel), max)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, apiErr(http.StatusNotFound, shared.CodeNotFound, "no such file: %s", rel)
	}
	return b, err
}

// WriteFile writes a workspace file, making its parent directories.
func (m *Machine) WriteFile(ctx context.Context, p string, data []byte) error {
	rel, err := checkPath(p, false)
	if err != nil {
		return err
	}
	dir := path.Dir(m.abs(rel))
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"mkdir", "-p", "--", dir}, User: m.o.User, Cwd: m.o.Home})
	if err != nil {
		return err
	}
	if r.ExitCode != 0 {
		return apiErr(http.StatusBadRequest, shared.CodeBadRequest, "cannot make the directory of %s: %s", rel, firstLine(r.Stderr))
	}
	return m.b.WriteFile(ctx, m.abs(rel), m.o.User, data)
}

type listEntry struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"modTime"`
	Target  string    `json:"target,omitempty"`
}

type listing struct {
	Path      string      `json:"path"`
	Entries   []listEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}

// ListFiles lists a workspace directory in botd's shape.
func (m *Machine) ListFiles(ctx context.Context, p string) (json.RawMessage, error) {
	rel, err := checkPath(p, true)
	if err != nil {
		return nil, err
	}
	if err := m.ensureWorkspace(ctx); err != nil {
		return nil, err
	}
	script := `[ -d "$1" ] || { echo "not a directory" >&2; exit 2; }
find "$1" -mindepth 1 -maxdepth 1 -printf '%y\0%s\0%T@\0%M\0%l\0%f\0' | head -c 4000000`
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", script, "sh", m.abs(rel)}, User: m.o.User, Cwd: m.o.Home, MaxOutput: 8 << 20})
	if err != nil {
		return nil, err
	}
	if r.ExitCode == 2 {
		return nil, apiErr(http.StatusNotFound, shared.CodeNotFound, "no such directory: %s", rel)
	}
	if r.ExitCode != 0 {
		return nil, fmt.Errorf("desktop machine: list %s: %s", rel, firstLine(r.Stderr))
	}
	f := strings.Split(string(r.Stdout), "\x00")
	out := listing{Path: rel, Entries: []listEntry{}}
	for i := 0; i+6 <= len(f); i += 6 {
		e := listEntry{Name: f[i+5], Mode: f[i+3]}
		e.Size, _ = strconv.ParseInt(f[i+1], 10, 64)
		if sec, err := strconv.ParseFloat(f[i+2], 64); err == nil {
			e.ModTime = time.Unix(0, int64(sec*1e9)).UTC()
		}
		switch f[i] {
		case "d":
			e.Type = "dir"
		case "f":
			e.Type = "file"
		case "l":
			e.Type, e.Target = "symlink", f[i+4]
			e.Mode = "L" + strings.TrimPrefix(e.Mode, "l")
		default:
			e.Type = "other"
		}
		out.Entries = append(out.Entries, e)
	}
	if len(out.Entries) > maxListEntries {
		out.Entries, out.Truncated = out.Entries[:maxListEntries], true
	}
	sortEntries(out.Entries)
	return json.Marshal(out)
}

func sortEntries(es []listEntry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Name < es[j-1].Name; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// errXferBusy: one workspace transfer at a time, as botd.
func errXferBusy() error {
	return apiErr(http.StatusConflict, shared.CodeConflict, "another workspace export or import is running")
}

// ExportWorkspace streams the workspace as a tar (exportScript: find and
// tar as the user, in the workspace). First every screen's browser is
// closed cleanly (quiesceBrowsers: its cookies and session on disk, its
// locks released); the transient files inside the browser profiles
// (pkg/shared/transient, botd's list) are left out, nothing else; once tar
// is done each browser starts again on the same tabs; an entry removed
// between the listing and tar is left out (exportScript). The reader ends
// with io.EOF only when the script finished with status 0; a tar that
// failed, or an
// export past maxBytes, ends with an error (client.ErrExportIncomplete,
// client.ErrExportRefused), so a partial archive is never taken for a
// whole one.
func (m *Machine) ExportWorkspace(ctx context.Context, maxBytes int64) (io.ReadCloser, error) {
	if !m.xferMu.TryLock() {
		return nil, errXferBusy()
	}
	if err := m.ensureWorkspace(ctx); err != nil {
		m.xferMu.Unlock()
		return nil, err
	}
	resume, err := m.quiesceBrowsers(ctx)
	if err != nil {
		m.xferMu.Unlock()
		return nil, err
	}
	argv := append([]string{"sh", "-c", exportScript, "sh", m.o.Workspace}, exportFind()...)
	p, err := m.b.Start(ctx, Cmd{Argv: argv, User: m.o.User, Cwd: m.o.Workspace})
	if err != nil {
		resume()
		m.xferMu.Unlock()
		return nil, err
	}
	_ = p.Stdin().Close()
	return &exportReader{p: p, max: maxBytes, resume: resume, unlock: m.xferMu.Unlock}, nil
}

type exportReader struct {
	p   Process
	max int64
	n   int64
	err error
	// resume starts the quiesced browsers again: once tar has ended (its
	// output read to the end) or at Close, whichever is first.
	resume  func()
	resumed bool
	unlock  func()
	closed  bool
}

func (e *exportReader) resumeOnce() {
	if !e.resumed {
		e.resumed = true
		e.resume()
	}
}

func (e *exportReader) Read(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.p.Stdout().Read(b)
	e.n += int64(n)
	if e.max > 0 && e.n > e.max {
		e.err = fmt.Errorf("%w: the workspace is larger than %d bytes", client.ErrExportRefused, e.max)
		_ = e.p.Close()
		return n, e.err
	}
	if err == io.EOF {
		code, werr := e.p.Wait()
		switch {
		case werr != nil:
			e.err = fmt.Errorf("%w: %v", client.ErrExportIncomplete, werr)
		case code != 0:
			e.err = fmt.Errorf("%w: tar exited %d: %s", client.ErrExportIncomplete, code, firstLine(e.p.Stderr()))
		default:
			e.err = io.EOF
		}
		e.resumeOnce()
		return n, e.err
	}
	if err != nil {
		e.err = fmt.Errorf("%w: %v", client.ErrExportIncomplete, err)
		return n, e.err
	}
	return n, nil
}

func (e *exportReader) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.p.Close()
	e.resumeOnce()
	e.unlock()
	return err
}

// importWriteBuffer is what one write to the import's tar carries at most.
const importWriteBuffer = 256 << 10

// ImportWorkspace streams a tar into the workspace (`tar -xf -` as the
// user) and counts what it carried. Entries that are absolute or hold ".."
// are refused (403 FS_SANDBOX_DENIED) before tar sees them; links and
// special files are refused too (400), since the export makes none that an
// import needs beyond files, directories and symlinks inside. Browsers that
// run are closed first (a profile is never written under a live browser)
// and start again afterwards, on the imported profile's last session.
func (m *Machine) ImportWorkspace(ctx context.Context, r io.Reader) (client.WorkspaceSummary, error) {
	var sum client.WorkspaceSummary
	if !m.xferMu.TryLock() {
		return sum, errXferBusy()
	}
	defer m.xferMu.Unlock()
	if err := m.ensureWorkspace(ctx); err != nil {
		return sum, err
	}
	resume, err := m.quiesceBrowsers(ctx)
	if err != nil {
		return sum, err
	}
	defer resume()
	p, err := m.b.Start(ctx, Cmd{Argv: []string{"tar", "-C", m.o.Workspace, "--no-same-owner", "--no-same-permissions", "-xf", "-"}, User: m.o.User, Cwd: m.o.Workspace})
	if err != nil {
		return sum, err
	}
	defer p.Close()
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	in := p.Stdin()
	// The tar reader reads in pieces of 512 bytes to a few KiB; on a
	// backend whose every write is a vendor call (Box: ~170 ms each) a
	// checkpoint of a few MB took minutes. Buffered, a write carries up
	// to importWriteBuffer bytes.
	bin := bufio.NewWriterSize(in, importWriteBuffer)
	tee := io.TeeReader(r, bin)
	tr := tar.NewReader(tee)
	var ferr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			ferr = apiErr(http.StatusBadRequest, shared.CodeBadRequest, "not a tar archive, or a truncated one: %v", err)
			break
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name != "" && name != "." {
			if _, err := checkPath(strings.TrimSuffix(name, "/"), false); err != nil {
				ferr = apiErr(http.StatusForbidden, shared.CodeFSSandboxDenied, "archive entry %q: %s", h.Name, client.CodeOf(err))
				break
			}
		}
		switch h.Typeflag {
		case tar.TypeReg:
			sum.Files++
			sum.Bytes += h.Size
		case tar.TypeDir:
			sum.Dirs++
		case tar.TypeSymlink:
			if strings.HasPrefix(h.Linkname, "/") || strings.Contains("/"+h.Linkname+"/", "/../") {
				ferr = apiErr(http.StatusForbidden, shared.CodeFSSandboxDenied, "archive entry %q links outside the workspace", h.Name)
			}
			sum.Symlinks++
		case tar.TypeLink:
			if _, err := checkPath(h.Linkname, false); err != nil {
				ferr = apiErr(http.StatusForbidden, shared.CodeFSSandboxDenied, "archive entry %q links outside the workspace", h.Name)
			}
			sum.Links++
		default:
			ferr = apiErr(http.StatusBadRequest, shared.CodeBadRequest, "archive entry %q is a special file", h.Name)
		}
		if ferr != nil {
			break
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			ferr = apiErr(http.StatusBadRequest, shared.CodeBadRequest, "truncated archive: %v", err)
			break
		}
	}
	if ferr != nil {
		_ = p.Close()
		return sum, ferr
	}
	// tar has had the end-of-archive blocks (the tar reader read them
	// through tee); any padding after them is read off the caller's
	// stream but not sent: tar needs none, and may already have exited.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return sum, fmt.Errorf("desktop machine: import: %w", err)
	}
	// Closing standard input fails when tar, done at the end-of-archive,
	// exited first (envd: "close stdin: not_found"; Box: its stdin file is
	// gone): then its exit status alone says whether the import worked.
	closeErr := errors.Join(bin.Flush(), in.Close())
	code, err := p.Wait()
	if err != nil {
		if closeErr != nil {
			err = fmt.Errorf("%w (closing its input: %v)", err, closeErr)
		}
		return sum, fmt.Errorf("desktop machine: import: %w", err)
	}
	if code != 0 {
		return sum, fmt.Errorf("desktop machine: import: tar exited %d: %s", code, firstLine(p.Stderr()))
	}
	return sum, nil
}

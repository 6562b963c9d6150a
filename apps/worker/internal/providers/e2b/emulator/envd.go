package emulator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/filesystem/filesystemconnect"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process/processconnect"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
)

type boxKey struct{}
type sandboxCtxKey struct{}
type userCtxKey struct{}

type userInfo struct {
	name, home string
	cwd        string // home, or / when home is missing
}

func (e *Emulator) envdHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", e.filesGet)
	mux.HandleFunc("POST /files", e.filesPost)
	p, h := processconnect.NewProcessHandler(&processService{e: e})
	mux.Handle(p, h)
	p, h = filesystemconnect.NewFilesystemHandler(&fsService{e: e})
	mux.Handle(p, h)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		envdError(w, http.StatusNotFound, "no route %s %s in this emulator's envd", r.Method, r.URL.Path)
	})
	return e.envdGate(mux)
}

func envdError(w http.ResponseWriter, status int, format string, args ...any) {
	emukit.WriteJSON(w, status, apiError{Code: status, Message: fmt.Sprintf(format, args...)})
}

// running is the sandbox a request is for, if it runs.
func (e *Emulator) running(id string) (*sandbox, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.boxes[id]
	if !ok || b.state != "running" {
		return nil, false
	}
	return b, true
}

// sandboxGone answers as the vendor's proxy does for a sandbox that is not
// running (gone, never was, or paused).
func sandboxGone(w http.ResponseWriter, id string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	fmt.Fprintf(w, `{"sandboxId":%q,"message":"The sandbox was not found","code":502}`+"\n", id)
}

// envdGate finds the sandbox and checks X-Access-Token (except on /health).
func (e *Emulator) envdGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := r.Context().Value(boxKey{}).(string)
		b, ok := e.running(id)
		if !ok {
			sandboxGone(w, id)
			return
		}
		if r.URL.Path != "/health" && !emukit.EqualSecret(r.Header.Get("X-Access-Token"), b.envdToken) {
			const msg = "unauthorized access, please provide a valid access token or method signing if supported"
			if isRPC(r.URL.Path) {
				// A Connect error, which Connect clients read.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprintf(w, `{"code":"unauthenticated","message":%q}`+"\n", msg)
				return
			}
			envdError(w, http.StatusUnauthorized, msg)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxCtxKey{}, b)))
	})
}

func isRPC(p string) bool {
	return strings.HasPrefix(p, "/"+processconnect.ProcessName+"/") || strings.HasPrefix(p, "/"+filesystemconnect.FilesystemName+"/")
}

func boxOf(ctx context.Context) *sandbox {
	b, _ := ctx.Value(sandboxCtxKey{}).(*sandbox)
	return b
}

// basicUser is the user named by `Authorization: Basic base64(user:)`.
func basicUser(h http.Header) string {
	a := h.Get("Authorization")
	if !strings.HasPrefix(a, "Basic ") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "Basic "))
	if err != nil {
		return ""
	}
	u, _, _ := strings.Cut(string(raw), ":")
	return u
}

// user resolves a user name ("" is the sandbox's default) in the container.
func (e *Emulator) user(ctx context.Context, b *sandbox, name string) (userInfo, error) {
	if name == "" {
		name = b.defaultUser
	}
	if name == "" {
		name = "root"
	}
	e.mu.Lock()
	u, ok := b.users[name]
	e.mu.Unlock()
	if ok {
		return u, nil
	}
	out, _, code, err := e.run(ctx, b, "root", []string{"getent", "passwd", name}, nil)
	if err != nil {
		return userInfo{}, err
	}
	fields := strings.Split(strings.TrimSpace(string(out)), ":")
	if code != 0 || len(fields) < 7 {
		return userInfo{}, fmt.Errorf("error looking up user '%s': user: unknown user %s", name, name)
	}
	u = userInfo{name: name, home: fields[5]}
	// A home that is not there (nobody's /nonexistent) is no working dir.
	if _, _, code, err := e.run(ctx, b, "root", []string{"test", "-d", u.home}, nil); err == nil && code == 0 {
		u.cwd = u.home
	} else {
		u.cwd = "/"
		return u, nil // not cached: an image's start may make the home yet
	}
	e.mu.Lock()
	b.users[name] = u
	e.mu.Unlock()
	return u, nil
}

// resolve makes a path absolute against the user's home.
func resolve(p string, u userInfo) string {
	switch {
	case p == "" || p == "~":
		return u.home
	case strings.HasPrefix(p, "~/"):
		return path.Join(u.home, p[2:])
	case !strings.HasPrefix(p, "/"):
		return path.Join(u.home, p)
	}
	return path.Clean(p)
}

// run executes cmd in the sandbox's container as user and collects its
// output and exit code.
func (e *Emulator) run(ctx context.Context, b *sandbox, user string, cmd []string, stdin io.Reader) (stdout, stderr []byte, code int, err error) {
	var out, errb bytes.Buffer
	code, err = e.runTo(ctx, b, user, cmd, stdin, &out, &errb)
	return out.Bytes(), errb.Bytes(), code, err
}

func (e *Emulator) runTo(ctx context.Context, b *sandbox, user string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cli := e.cfg.Docker
	ex, err := cli.ExecCreate(ctx, b.container, dockerclient.ExecCreateOptions{
		User: user, Cmd: cmd, AttachStdout: true, AttachStderr: true, AttachStdin: stdin != nil,
	})
	if err != nil {
		return -1, err
	}
	att, err := cli.ExecAttach(ctx, ex.ID, dockerclient.ExecAttachOptions{})
	if err != nil {
		return -1, err
	}
	defer att.Close()
	werr := make(chan error, 1)
	if stdin != nil {
		go func() {
			_, err := io.Copy(att.Conn, stdin)
			_ = att.CloseWrite()
			werr <- err
		}()
	} else {
		werr <- nil
	}
	if _, err := stdcopy.StdCopy(stdout, stderr, att.Reader); err != nil {
		return -1, err
	}
	if err := <-werr; err != nil {
		return -1, err
	}
	return e.exitCode(ctx, ex.ID)
}

func (e *Emulator) exitCode(ctx context.Context, execID string) (int, error) {
	for {
		in, err := e.cfg.Docker.ExecInspect(ctx, execID, dockerclient.ExecInspectOptions{})
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

// filesUser is the user of a /files request: `username`, else Basic, else
// the default.
func (e *Emulator) filesUser(w http.ResponseWriter, r *http.Request, b *sandbox) (userInfo, bool) {
	name := r.URL.Query().Get("username")
	if name == "" {
		name = basicUser(r.Header)
	}
	u, err := e.user(r.Context(), b, name)
	if err != nil {
		envdError(w, http.StatusUnauthorized, "%v", err)
		return userInfo{}, false
	}
	return u, true
}

func (e *Emulator) filesGet(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	u, ok := e.filesUser(w, r, b)
	if !ok {
		return
	}
	p := resolve(r.URL.Query().Get("path"), u)
	entry, err := e.stat(r.Context(), b, u, p)
	if errors.Is(err, errNotFound) {
		envdError(w, http.StatusNotFound, "path '%s' does not exist", p)
		return
	}
	if err != nil {
		envdError(w, http.StatusInternalServerError, "error checking path '%s': %v", p, err)
		return
	}
	if entry.dir {
		envdError(w, http.StatusBadRequest, "path '%s' is a directory", p)
		return
	}
	dw := &delayedWriter{w: w, header: func() {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
		w.WriteHeader(http.StatusOK)
	}}
	var errb bytes.Buffer
	code, err := e.runTo(r.Context(), b, u.name, []string{"cat", "--", p}, nil, dw, &errb)
	if dw.started {
		return // the body is under way: a failure now can only cut it short
	}
	if err == nil && code == 0 {
		dw.header() // an empty file
		return
	}
	if err != nil {
		envdError(w, http.StatusInternalServerError, "error reading file '%s': %v", p, err)
		return
	}
	envdError(w, http.StatusInternalServerError, "error opening file '%s': %s", p, strings.TrimSpace(errb.String()))
}

// delayedWriter sends the status and headers at the first byte.
type delayedWriter struct {
	w       http.ResponseWriter
	header  func()
	started bool
}

func (d *delayedWriter) Write(p []byte) (int, error) {
	if !d.started && len(p) > 0 {
		d.started = true
		d.header()
	}
	return d.w.Write(p)
}

type writtenEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

func (e *Emulator) filesPost(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	u, ok := e.filesUser(w, r, b)
	if !ok {
		return
	}
	qpath := r.URL.Query().Get("path")
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []writtenEntry
	write := func(dest string, body io.Reader) bool {
		p := resolve(dest, u)
		if entry, err := e.stat(r.Context(), b, u, p); err == nil && entry.dir {
			envdError(w, http.StatusBadRequest, "path '%s' is a directory", p)
			return false
		}
		script := `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`
		_, errOut, code, err := e.run(r.Context(), b, u.name, []string{"/bin/sh", "-c", script, "sh", p}, body)
		if err != nil || code != 0 {
			msg := strings.TrimSpace(string(errOut))
			if err != nil {
				msg = err.Error()
			}
			envdError(w, http.StatusInternalServerError, "error writing file '%s': %s", p, msg)
			return false
		}
		written = append(written, writtenEntry{Path: p, Name: path.Base(p), Type: "file"})
		return true
	}
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				envdError(w, http.StatusBadRequest, "error reading multipart body: %v", err)
				return
			}
			if part.FormName() != "file" {
				continue
			}
			dest := qpath
			if dest == "" {
				// The raw filename: Part.FileName keeps only its base.
				_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				dest = dp["filename"]
			}
			if dest == "" {
				envdError(w, http.StatusBadRequest, "no path for an uploaded file")
				return
			}
			if !write(dest, part) {
				return
			}
		}
	case "application/octet-stream":
		if qpath == "" {
			envdError(w, http.StatusBadRequest, "the path query parameter is required with application/octet-stream")
			return
		}
		var body io.Reader = r.Body
		if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				envdError(w, http.StatusBadRequest, "invalid gzip body: %v", err)
				return
			}
			defer gz.Close()
			body = gz
		}
		if !write(qpath, body) {
			return
		}
	default:
		envdError(w, http.StatusBadRequest, "unsupported content type %q", mt)
		return
	}
	if len(written) == 0 {
		envdError(w, http.StatusBadRequest, "no file in the request")
		return
	}
	emukit.WriteJSON(w, http.StatusOK, written)
}

// ---- port routing ----

func (e *Emulator) proxy(w http.ResponseWriter, r *http.Request, id string, port int) {
	b, ok := e.running(id)
	if !ok {
		sandboxGone(w, id)
		return
	}
	if b.trafficToken != "" && !emukit.EqualSecret(r.Header.Get("e2b-traffic-access-token"), b.trafficToken) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"sandboxId":%q,"message":"Sandbox is secured with traffic access token. Missing or invalid 'e2b-traffic-access-token' header","code":403}`+"\n", id)
		return
	}
	e.mu.Lock()
	addr := b.ports[port]
	e.mu.Unlock()
	if addr == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, `{"sandboxId":%q,"message":"The sandbox is running but port is not open","port":%d,"code":502}`+"\n", id, port)
		return
	}
	target := &url.URL{Scheme: "http", Host: addr}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("E2b-Sandbox-Id")
			pr.Out.Header.Del("E2b-Sandbox-Port")
			pr.Out.Header.Del("e2b-traffic-access-token")
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, `{"sandboxId":%q,"message":"The sandbox is running but port is not open","port":%d,"code":502}`+"\n", id, port)
		},
	}
	rp.ServeHTTP(w, r)
}

// ---- entries ----

var errNotFound = errors.New("not found")

// findFormat is GNU find's -printf for an entry: type, size, mode (octal),
// mode (symbolic), owner, group, mtime, link target, path.
const findFormat = `%y\t%s\t%m\t%M\t%u\t%g\t%T@\t%l\t%p\0`

type entry struct {
	kind                      byte // f d l …
	size                      int64
	mode                      uint32
	perms, owner, group, link string
	mtime                     time.Time
	path                      string
	dir                       bool
}

func parseEntries(out []byte) []entry {
	var list []entry
	for _, rec := range bytes.Split(out, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		f := strings.SplitN(string(rec), "\t", 9)
		if len(f) != 9 || f[0] == "" {
			continue
		}
		size, _ := strconv.ParseInt(f[1], 10, 64)
		mode, _ := strconv.ParseUint(f[2], 8, 32)
		secs, _ := strconv.ParseFloat(f[6], 64)
		list = append(list, entry{
			kind: f[0][0], size: size, mode: uint32(mode), perms: f[3], owner: f[4], group: f[5],
			mtime: time.Unix(0, int64(secs*1e9)).UTC(), link: f[7], path: f[8], dir: f[0][0] == 'd',
		})
	}
	return list
}

// stat reads one entry as the user; errNotFound when it is not there.
func (e *Emulator) stat(ctx context.Context, b *sandbox, u userInfo, p string) (entry, error) {
	out, errOut, code, err := e.run(ctx, b, u.name, []string{"find", p, "-maxdepth", "0", "-printf", findFormat}, nil)
	if err != nil {
		return entry{}, err
	}
	list := parseEntries(out)
	if code != 0 || len(list) == 0 {
		if strings.Contains(string(errOut), "No such file") {
			return entry{}, errNotFound
		}
		return entry{}, fmt.Errorf("%s", strings.TrimSpace(string(errOut)))
	}
	return list[0], nil
}

package emulator

// The toolbox (toolbox-openapi.yaml), served on the host through the
// engine's exec API as the sandbox's user, and previews of sandbox ports.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	dockerclient "github.com/moby/moby/client"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
	"github.com/open-bot/computer/pkg/shared"
)

type boxKey struct{}

func boxOf(r *http.Request) *sandbox { return r.Context().Value(boxKey{}).(*sandbox) }

func (e *Emulator) toolboxRoutes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /process/execute", e.execute)
	m.HandleFunc("GET /files/download", e.download)
	m.HandleFunc("POST /files/upload", e.upload)
	m.HandleFunc("POST /files/bulk-upload", e.bulkUpload)
	m.HandleFunc("POST /files/bulk-download", e.bulkDownload)
	m.HandleFunc("GET /user-home-dir", e.homeDir)
	m.HandleFunc("GET /work-dir", e.homeDir)
	m.HandleFunc("POST /computeruse/start", e.cuStart)
	m.HandleFunc("POST /computeruse/stop", e.cuStop)
	m.HandleFunc("GET /computeruse/status", e.cuStatus)
	m.HandleFunc("GET /computeruse/process-status", e.cuStatus)
	m.HandleFunc("GET /computeruse/screenshot", e.screenshot)
	m.HandleFunc("POST /computeruse/mouse/click", e.click)
	m.HandleFunc("POST /computeruse/mouse/move", e.move)
	m.HandleFunc("GET /computeruse/mouse/position", e.position)
	m.HandleFunc("POST /computeruse/keyboard/type", e.typeText)
	m.HandleFunc("GET /computeruse/display/info", e.displayInfo)
	m.HandleFunc("GET /computeruse/screenshot/compressed", e.screenshotCompressed)
	m.HandleFunc("POST /computeruse/mouse/drag", e.drag)
	m.HandleFunc("POST /computeruse/mouse/scroll", e.scroll)
	m.HandleFunc("POST /computeruse/keyboard/key", e.pressKey)
	m.HandleFunc("POST /computeruse/keyboard/hotkey", e.hotkey)
	m.HandleFunc("GET /process/session", e.listSessions)
	m.HandleFunc("POST /process/session", e.createSession)
	m.HandleFunc("GET /process/session/{sid}", e.getSession)
	m.HandleFunc("DELETE /process/session/{sid}", e.deleteSession)
	m.HandleFunc("POST /process/session/{sid}/exec", e.sessionExec)
	m.HandleFunc("GET /process/session/{sid}/command/{cid}", e.sessionCommand)
	m.HandleFunc("GET /process/session/{sid}/command/{cid}/logs", e.sessionLogs)
	m.HandleFunc("POST /process/session/{sid}/command/{cid}/input", e.sessionInput)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "404 page not found: %s %s", r.Method, r.URL.Path)
	})
	e.tb = m
}

// toolbox serves /toolbox/{id}/… and /toolbox/{id}/toolbox/….
func (e *Emulator) toolbox(w http.ResponseWriter, r *http.Request) {
	if !e.authorized(r) {
		writeError(w, r, http.StatusUnauthorized, "Invalid credentials")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/toolbox/")
	id, tail, _ := strings.Cut(rest, "/")
	tail = strings.TrimPrefix(tail, "toolbox/")
	e.mu.Lock()
	b := e.boxes[id]
	e.mu.Unlock()
	if b == nil {
		writeError(w, r, http.StatusNotFound, "Sandbox with ID %s not found", id)
		return
	}
	e.sync(r.Context(), b)
	e.mu.Lock()
	state := b.state
	e.mu.Unlock()
	if state != "started" {
		writeError(w, r, http.StatusBadRequest, "Sandbox %s is not started (state %s)", id, state)
		return
	}
	e.touch(b)
	r2 := r.Clone(context.WithValue(r.Context(), boxKey{}, b))
	r2.URL.Path, r2.URL.RawPath = "/"+tail, ""
	e.tb.ServeHTTP(w, r2)
	e.touch(b)
}

// run executes argv in the sandbox's container as its user (in its home
// when dir is ""); out gets stdout, errw stderr (the same writer: combined).
func (e *Emulator) run(ctx context.Context, b *sandbox, argv []string, dir string, env []string, stdin io.Reader, out, errw io.Writer) (int, error) {
	cli := e.cfg.Docker
	ex, err := cli.ExecCreate(ctx, b.container, dockerclient.ExecCreateOptions{
		User: b.user, Cmd: argv, Env: env, WorkingDir: dir, AttachStdout: true, AttachStderr: true, AttachStdin: stdin != nil,
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
		// Out of time: end the process (the exec's own pid).
		if in, err := cli.ExecInspect(context.WithoutCancel(ctx), ex.ID, dockerclient.ExecInspectOptions{}); err == nil && in.PID > 0 {
			e.kill(b, in.PID)
		}
		return -1, ctx.Err()
	}
	if err := <-werr; err != nil {
		return -1, err
	}
	for {
		in, err := cli.ExecInspect(ctx, ex.ID, dockerclient.ExecInspectOptions{})
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

// kill ends an exec that ran out of time: its process, by its host pid
// (the engine runs on this host).
func (e *Emulator) kill(_ *sandbox, hostPID int) { _ = syscall.Kill(hostPID, syscall.SIGKILL) }

// sh runs a shell script (args as $1…) in the sandbox, collecting output.
func (e *Emulator) sh(ctx context.Context, b *sandbox, script string, stdin io.Reader, env []string, args ...string) ([]byte, []byte, int, error) {
	var out, errb bytes.Buffer
	code, err := e.run(ctx, b, append([]string{"/bin/sh", "-c", `cd "$HOME" 2>/dev/null; ` + script, "sh"}, args...), "", env, stdin, &out, &errb)
	return out.Bytes(), errb.Bytes(), code, err
}

// shFile runs a script that writes a file's bytes to standard output and,
// once they are all written, their count alone as the last line of standard
// error (`… && wc -c < "$f" >&2`), and checks that every byte arrived. The
// engine closes an exec's output streams at most 2 s after its process
// exits, copied or not, so a short read is taken again, up to three times,
// and then is an error, never a truncated file. (TestConformanceDaytonaDesktop's
// undecodable :0 frame is not this: it came back whole, its end marker
// in place, with the count matching; not diagnosed.)
func (e *Emulator) shFile(ctx context.Context, b *sandbox, script string, env []string, args ...string) ([]byte, []byte, int, error) {
	var out, errb []byte
	var code int
	var err error
	for try := 1; try <= 3; try++ {
		out, errb, code, err = e.sh(ctx, b, script, nil, env, args...)
		if err != nil || code != 0 {
			return out, errb, code, err
		}
		if rest, ok := allArrived(out, errb); ok {
			return out, rest, 0, nil
		}
	}
	return nil, errb, -1, fmt.Errorf("the output was cut short in transfer three times (%d bytes arrived)", len(out))
}

// allArrived reports whether stderr's last line is out's byte count, and
// returns stderr without it.
func allArrived(out, errb []byte) ([]byte, bool) {
	lines := strings.Split(strings.TrimSpace(string(errb)), "\n")
	n, err := strconv.Atoi(strings.TrimSpace(lines[len(lines)-1]))
	if err != nil || n != len(out) {
		return errb, false
	}
	return []byte(strings.Join(lines[:len(lines)-1], "\n")), true
}

// ---- process ----

func (e *Emulator) execute(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r)
	var req struct {
		Command string            `json:"command"`
		Cwd     string            `json:"cwd"`
		Envs    map[string]string `json:"envs"`
		Timeout *int              `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	// The daemon splits the command as a shell would, but runs no shell:
	// pipes and redirections need `sh -c '…'`.
	argv, err := shared.SplitWords(req.Command)
	if err != nil || len(argv) == 0 {
		writeError(w, r, http.StatusBadRequest, "invalid command: %q", req.Command)
		return
	}
	timeout := 10 * time.Second
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	var env []string
	for k, v := range req.Envs {
		env = append(env, k+"="+v)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	var out bytes.Buffer
	code, err := e.run(ctx, b, argv, req.Cwd, env, nil, &out, &out)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		writeError(w, r, http.StatusRequestTimeout, "command execution timeout")
		return
	case err != nil:
		writeError(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{"exitCode": code, "result": out.String()})
}

// ---- files ----

const notFoundExit = 44

func (e *Emulator) readFile(ctx context.Context, b *sandbox, path string) ([]byte, int, string) {
	out, errb, code, err := e.shFile(ctx, b, `test -f "$1" || exit 44; cat -- "$1" && wc -c < "$1" >&2`, nil, path)
	switch {
	case err != nil:
		return nil, http.StatusInternalServerError, err.Error()
	case code == notFoundExit:
		return nil, http.StatusNotFound, "file not found: " + path
	case code != 0:
		return nil, http.StatusBadRequest, strings.TrimSpace(string(errb))
	}
	return out, http.StatusOK, ""
}

func (e *Emulator) writeFile(ctx context.Context, b *sandbox, path string, data io.Reader) error {
	_, errb, code, err := e.sh(ctx, b, `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`, data, nil, path)
	if err == nil && code != 0 {
		err = fmt.Errorf("write %s: %s", path, strings.TrimSpace(string(errb)))
	}
	return err
}

func (e *Emulator) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	data, status, msg := e.readFile(r.Context(), boxOf(r), p)
	if status != http.StatusOK {
		writeError(w, r, status, "%s", msg)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", pathBase(p)))
	_, _ = w.Write(data)
}

func pathBase(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

func (e *Emulator) upload(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "file is required: %v", err)
		return
	}
	defer f.Close()
	if err := e.writeFile(r.Context(), boxOf(r), p, f); err != nil {
		writeError(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{})
}

func (e *Emulator) bulkUpload(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid multipart form: %v", err)
		return
	}
	defer r.MultipartForm.RemoveAll()
	for i := 0; ; i++ {
		paths := r.MultipartForm.Value[fmt.Sprintf("files[%d].path", i)]
		files := r.MultipartForm.File[fmt.Sprintf("files[%d].file", i)]
		if len(paths) == 0 && len(files) == 0 {
			if i == 0 {
				writeError(w, r, http.StatusBadRequest, "no files")
				return
			}
			break
		}
		if len(paths) != 1 || len(files) != 1 {
			writeError(w, r, http.StatusBadRequest, "files[%d] needs one path and one file", i)
			return
		}
		f, err := files[0].Open()
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "%v", err)
			return
		}
		err = e.writeFile(r.Context(), boxOf(r), paths[0], f)
		f.Close()
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "%v", err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (e *Emulator) bulkDownload(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Paths []string `json:"paths"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Paths) == 0 {
		writeError(w, r, http.StatusBadRequest, "paths are required")
		return
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range req.Paths {
		data, status, msg := e.readFile(r.Context(), boxOf(r), p)
		h := textproto.MIMEHeader{}
		if status == http.StatusOK {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, p))
			h.Set("Content-Type", "application/octet-stream")
		} else {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="error"; filename=%q`, p))
			h.Set("Content-Type", "application/json")
			data, _ = json.Marshal(map[string]any{"message": msg, "statusCode": status, "code": strings.ToUpper(strings.ReplaceAll(http.StatusText(status), " ", "_"))})
		}
		pw, err := mw.CreatePart(h)
		if err != nil {
			writeError(w, r, http.StatusInternalServerError, "%v", err)
			return
		}
		_, _ = pw.Write(data)
	}
	_ = mw.Close()
	w.Header().Set("Content-Type", mw.FormDataContentType())
	_, _ = w.Write(buf.Bytes())
}

func (e *Emulator) homeDir(w http.ResponseWriter, r *http.Request) {
	out, _, code, err := e.sh(r.Context(), boxOf(r), `printf %s "$HOME"`, nil, nil)
	if err != nil || code != 0 {
		writeError(w, r, http.StatusInternalServerError, "no home directory")
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]string{"dir": string(out)})
}

// ---- computer use (display :0, through scrot and xdotool in the sandbox) ----

// cuScript starts (start), stops (stop) or reports (status) the computer-use
// processes as Daytona's daemon has them: Xvfb :0 (the snapshot's
// Geometry, default 1024x768, 24 bits), an XFCE
// session, x11vnc on 5901 and noVNC (websockify) on 6080. It prints one
// line per process: name running pid.
const cuScript = `set -u
dir="${TMPDIR:-/tmp}/daytona-computeruse"; mkdir -p "$dir"
alive() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }
run() { n="$1"; shift; alive "$n" && return 0; setsid "$@" >"$dir/$n.log" 2>&1 </dev/null & echo $! >"$dir/$n.pid"; }
up() { DISPLAY=:0 xdpyinfo >/dev/null 2>&1; }
case "$1" in
start)
  if ! up; then run xvfb Xvfb :0 -ac -screen 0 "${2:-1024x768}x24" -nolisten tcp; fi
  i=0; while ! up; do i=$((i+1)); [ $i -gt 150 ] && { echo "Xvfb :0 did not come up" >&2; exit 1; }; sleep 0.1; done
  export DISPLAY=:0
  run xfce4 startxfce4
  run x11vnc x11vnc -display :0 -rfbport 5901 -localhost -shared -forever -nopw -quiet
  web=/usr/share/novnc; [ -d "$web" ] || web=/opt/noVNC
  run novnc websockify --web "$web" 6080 localhost:5901 ;;
stop)
  for n in novnc x11vnc xfce4 xvfb; do
    if [ -f "$dir/$n.pid" ]; then p="$(cat "$dir/$n.pid")"; kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; rm -f "$dir/$n.pid"; fi
  done ;;
esac
for n in xvfb xfce4 x11vnc novnc; do
  if alive "$n"; then echo "$n true $(cat "$dir/$n.pid")"; else echo "$n false 0"; fi
done`

type processStatus struct {
	AutoRestart bool `json:"autoRestart"`
	Running     bool `json:"running"`
	PID         int  `json:"pid"`
	Priority    int  `json:"priority"`
}

func (e *Emulator) computerUse(w http.ResponseWriter, r *http.Request, verb string) (map[string]processStatus, bool) {
	b := boxOf(r)
	e.mu.Lock()
	geometry := e.cfg.Snapshots[b.snapshot].Geometry
	e.mu.Unlock()
	if geometry == "" {
		geometry = "1024x768"
	}
	out, errb, code, err := e.sh(r.Context(), b, cuScript, nil, nil, verb, geometry)
	if err != nil || code != 0 {
		writeError(w, r, http.StatusInternalServerError, "computer use %s: %s%v", verb, strings.TrimSpace(string(errb)), err)
		return nil, false
	}
	st := map[string]processStatus{}
	prio := map[string]int{"xvfb": 100, "xfce4": 200, "x11vnc": 300, "novnc": 400}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		pid, _ := strconv.Atoi(f[2])
		st[f[0]] = processStatus{Running: f[1] == "true", PID: pid, Priority: prio[f[0]]}
	}
	return st, true
}

func (e *Emulator) cuStart(w http.ResponseWriter, r *http.Request) {
	if st, ok := e.computerUse(w, r, "start"); ok {
		emukit.WriteJSON(w, http.StatusOK, map[string]any{"message": "Computer use processes started successfully", "status": st})
	}
}

func (e *Emulator) cuStop(w http.ResponseWriter, r *http.Request) {
	if st, ok := e.computerUse(w, r, "stop"); ok {
		emukit.WriteJSON(w, http.StatusOK, map[string]any{"message": "Computer use processes stopped successfully", "status": st})
	}
}

func (e *Emulator) cuStatus(w http.ResponseWriter, r *http.Request) {
	st, ok := e.computerUse(w, r, "status")
	if !ok {
		return
	}
	status := "active"
	for _, p := range st {
		if !p.Running {
			status = "inactive"
		}
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]string{"status": status})
}

var displayEnv = []string{"DISPLAY=:0"}

func (e *Emulator) x(w http.ResponseWriter, r *http.Request, script string, args ...string) ([]byte, bool) {
	out, errb, code, err := e.sh(r.Context(), boxOf(r), script, nil, displayEnv, args...)
	return computerUse(w, r, out, errb, code, err)
}

// computerUse answers a computer-use script's failure (500, with its
// stderr) or hands its output on.
func computerUse(w http.ResponseWriter, r *http.Request, out, errb []byte, code int, err error) ([]byte, bool) {
	if err != nil || code != 0 {
		writeError(w, r, http.StatusInternalServerError, "computer use: %s%v", strings.TrimSpace(string(errb)), err)
		return nil, false
	}
	return out, true
}

// xFile is x for a script that ends as shFile's do.
func (e *Emulator) xFile(w http.ResponseWriter, r *http.Request, script string, args ...string) ([]byte, bool) {
	out, errb, code, err := e.shFile(r.Context(), boxOf(r), script, displayEnv, args...)
	return computerUse(w, r, out, errb, code, err)
}

func (e *Emulator) pointer(w http.ResponseWriter, r *http.Request) (int, int, bool) {
	out, ok := e.x(w, r, `xdotool getmouselocation --shell`)
	if !ok {
		return 0, 0, false
	}
	var x, y int
	for _, l := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "X":
			x, _ = strconv.Atoi(v)
		case "Y":
			y, _ = strconv.Atoi(v)
		}
	}
	return x, y, true
}

func (e *Emulator) screenshot(w http.ResponseWriter, r *http.Request) {
	flag := ""
	if r.URL.Query().Get("showCursor") == "true" {
		flag = "--pointer"
	}
	out, ok := e.xFile(w, r, `f=$(mktemp --suffix=.png) && scrot $1 -o "$f" && cat -- "$f" && wc -c < "$f" >&2; s=$?; rm -f -- "$f"; exit $s`, flag)
	if !ok {
		return
	}
	x, y, ok := e.pointer(w, r)
	if !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{
		"screenshot": base64.StdEncoding.EncodeToString(out), "sizeBytes": len(out),
		"cursorPosition": map[string]int{"x": x, "y": y},
	})
}

func (e *Emulator) click(w http.ResponseWriter, r *http.Request) {
	var req struct {
		X, Y   int
		Button string
		Double bool
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	button := map[string]string{"": "1", "left": "1", "middle": "2", "right": "3"}[req.Button]
	if button == "" {
		writeError(w, r, http.StatusBadRequest, "button: want left, right or middle")
		return
	}
	repeat := "1"
	if req.Double {
		repeat = "2"
	}
	if _, ok := e.x(w, r, `xdotool mousemove "$1" "$2" click --repeat "$3" "$4"`, strconv.Itoa(req.X), strconv.Itoa(req.Y), repeat, button); !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]int{"x": req.X, "y": req.Y})
}

func (e *Emulator) move(w http.ResponseWriter, r *http.Request) {
	var req struct{ X, Y int }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	if _, ok := e.x(w, r, `xdotool mousemove "$1" "$2"`, strconv.Itoa(req.X), strconv.Itoa(req.Y)); !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]int{"x": req.X, "y": req.Y})
}

func (e *Emulator) position(w http.ResponseWriter, r *http.Request) {
	x, y, ok := e.pointer(w, r)
	if ok {
		emukit.WriteJSON(w, http.StatusOK, map[string]int{"x": x, "y": y})
	}
}

func (e *Emulator) typeText(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Text  string `json:"text"`
		Delay *int   `json:"delay"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	delay := "12"
	if req.Delay != nil {
		delay = strconv.Itoa(*req.Delay)
	}
	if _, ok := e.x(w, r, `xdotool type --delay "$1" -- "$2"`, delay, req.Text); !ok {
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{})
}

func (e *Emulator) displayInfo(w http.ResponseWriter, r *http.Request) {
	out, ok := e.x(w, r, `xdpyinfo | sed -n 's/^  dimensions: *\([0-9]*\)x\([0-9]*\) pixels.*/\1 \2/p' | head -1`)
	if !ok {
		return
	}
	var wd, ht int
	if _, err := fmt.Sscan(string(out), &wd, &ht); err != nil {
		writeError(w, r, http.StatusInternalServerError, "computer use: no display dimensions")
		return
	}
	emukit.WriteJSON(w, http.StatusOK, map[string]any{"displays": []map[string]any{{"id": 0, "x": 0, "y": 0, "width": wd, "height": ht, "isActive": true}}})
}

// ---- previews ----

// PreviewTokenHeader carries a private sandbox's preview token.
const PreviewTokenHeader = "X-Daytona-Preview-Token"

func (e *Emulator) preview(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/preview/")
	id, rest, _ := strings.Cut(rest, "/")
	ps, tail, _ := strings.Cut(rest, "/")
	port, err := strconv.Atoi(ps)
	e.mu.Lock()
	b := e.boxes[id]
	e.mu.Unlock()
	if b == nil || err != nil {
		writeError(w, r, http.StatusNotFound, "Sandbox %s not found", id)
		return
	}
	e.mu.Lock()
	public, token, state, addr := b.public, b.previewToken, b.state, b.ports[port]
	e.mu.Unlock()
	if !public && !emukit.EqualSecret(r.Header.Get(PreviewTokenHeader), token) {
		writeError(w, r, http.StatusUnauthorized, "Unauthorized: a private sandbox's preview needs its token in the %s header", PreviewTokenHeader)
		return
	}
	if state != "started" || addr == "" {
		writeError(w, r, http.StatusBadGateway, "Sandbox %s is not running, or nothing listens on port %d", id, port)
		return
	}
	e.touch(b)
	target := &url.URL{Scheme: "http", Host: addr}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+tail, ""
			pr.Out.Header.Del(PreviewTokenHeader)
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, http.StatusBadGateway, "Sandbox %s: nothing answers on port %d", id, port)
		},
	}
	rp.ServeHTTP(w, r)
}

package imagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/testenv"
)

// The server a page is served from inside the container: "/" says whether the
// request carried the sign-in cookie, "/signin" sets it (HttpOnly, a day) and
// redirects to "/". The sign-in is what must survive a replacement container.
const serverPy = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/signin":
            self.send_response(302)
            self.send_header("Set-Cookie", "session=imagetest-signed-in; Max-Age=86400; Path=/; HttpOnly")
            self.send_header("Location", "/")
            self.end_headers()
            return
        signed = "session=imagetest-signed-in" in (self.headers.get("Cookie") or "")
        body = ("<!doctype html><title>imagetest page</title><p>served inside the container</p><p>signed-in: %s</p>" % ("yes" if signed else "no")).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

const (
	pagePort = "8765" // inside the container only; never published
	screenID = "imagetest"
	keepPath = "notes/kept.txt"
	keepText = "written by the first container\n"
)

func imageTag() string {
	if s := os.Getenv("IMAGETEST_IMAGE"); s != "" {
		return s
	}
	return "open-bot/computer:dev"
}

func docker(ctx context.Context, args ...string) (string, error) {
	return testenv.Run(ctx, "docker", args...)
}

// logs is a container's log, stdout and stderr together (botd logs to stderr).
func logs(ctx context.Context, name string, tailLines string) string {
	out, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", tailLines, name).CombinedOutput()
	return string(out)
}

func mustDocker(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := docker(ctx, args...)
	require.NoError(t, err)
	return out
}

var (
	buildOnce sync.Once
	buildErr  error
	buildLog  string
)

// requireImage needs an engine and builds the image once per run with the
// same script `make image` runs (seconds when nothing changed).
func requireImage(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Unavailable(t, "docker not on PATH (scripts/docker-engine.sh start installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := docker(ctx, "info"); err != nil {
		testenv.Unavailable(t, "no Docker engine answers (scripts/docker-engine.sh start): %v", err)
	}
	root := testenv.RepoRoot(t)
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts/build-image.sh"))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "IMAGE="+imageTag())
		out, err := cmd.CombinedOutput()
		buildErr, buildLog = err, string(out)
	})
	if buildErr != nil {
		t.Fatalf("make image failed: %v\n%s", buildErr, tail(buildLog, 4000))
	}
	return imageTag()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func randName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// tokenFile writes a root-only token file and returns its path and the token.
func tokenFile(t *testing.T, mode os.FileMode) (string, string) {
	t.Helper()
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // the engine (root) mounts it
	p := filepath.Join(dir, "botd_token")
	require.NoError(t, os.WriteFile(p, []byte(tok+"\n"), 0o600))
	require.NoError(t, os.Chmod(p, mode))
	return p, tok
}

type container struct {
	name  string
	base  string // http://127.0.0.1:port
	token string
	hc    *http.Client
}

// run starts a container of img with /home on vol and the token file mounted
// read-only (tokenPath "" mounts none), API published on a free loopback port.
func run(t *testing.T, ctx context.Context, img, vol, tokenPath string, env ...string) string {
	t.Helper()
	name := randName("openbot-imagetest-")
	args := []string{"run", "-d", "--name", name, "--label", "open-bot.imagetest=1",
		"--shm-size=1g", "-p", "127.0.0.1::7000", "-v", vol + ":/home"}
	if tokenPath != "" {
		args = append(args, "-v", tokenPath+":/run/secrets/botd_token:ro")
	}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, img)
	mustDocker(t, ctx, args...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if t.Failed() {
			// botd's log says why (it never holds a token or a cookie value).
			t.Logf("the last lines of container %s's log:\n%s", name, logs(ctx, name, "80"))
		}
		_, _ = docker(ctx, "rm", "-f", name)
	})
	return name
}

func volume(t *testing.T, ctx context.Context) string {
	t.Helper()
	vol := randName("openbot-imagetest-home-")
	mustDocker(t, ctx, "volume", "create", "--label", "open-bot.imagetest=1", vol)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, _ = docker(ctx, "volume", "rm", "-f", vol)
	})
	return vol
}

// waitHealthy polls the engine's health status; a container that exits or
// turns unhealthy fails with its log.
func waitHealthy(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st := mustDocker(t, ctx, "inspect", "-f", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}", name)
		switch {
		case st == "running healthy":
			return
		case !strings.HasPrefix(st, "running") || strings.HasSuffix(st, "unhealthy"):
			t.Fatalf("container %s is %q, not healthy; log:\n%s", name, st, logs(ctx, name, "60"))
		case time.Now().After(deadline):
			t.Fatalf("container %s not healthy within 3 min (%q); log:\n%s", name, st, logs(ctx, name, "60"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func connect(t *testing.T, ctx context.Context, name, token string) *container {
	t.Helper()
	hostPort := mustDocker(t, ctx, "port", name, "7000/tcp")
	// Published on loopback only: "127.0.0.1:PORT" and nothing else.
	for _, line := range strings.Split(hostPort, "\n") {
		require.True(t, strings.HasPrefix(line, "127.0.0.1:"), "API published beyond loopback: %q", line)
	}
	addr := strings.Split(hostPort, "\n")[0]
	return &container{name: name, base: "http://" + addr, token: token, hc: &http.Client{Timeout: 90 * time.Second}}
}

// call does one API request; body may be nil, []byte (sent raw) or a value
// sent as JSON. It returns the status and the body.
func (c *container) call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

func (c *container) ok(t *testing.T, method, path string, body, into any) {
	t.Helper()
	st, out := c.call(t, method, path, body)
	require.Equal(t, http.StatusOK, st, "%s %s: %s", method, path, out)
	if into != nil {
		require.NoError(t, json.Unmarshal(out, into), "%s %s: %s", method, path, out)
	}
}

type execResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

func (c *container) exec(t *testing.T, argv ...string) execResult {
	t.Helper()
	var r execResult
	c.ok(t, "POST", "/exec", map[string]any{"argv": argv, "timeoutMs": 20000}, &r)
	return r
}

// eventually polls f until it returns "" (done) or the deadline passes; the
// last reason is the failure message.
func eventually(t *testing.T, d time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := f()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, why)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (c *container) waitCodex(t *testing.T) {
	t.Helper()
	eventually(t, 2*time.Minute, func() string {
		var h struct {
			OK    bool   `json:"ok"`
			Agent string `json:"agent"`
		}
		c.ok(t, "GET", "/health", nil, &h)
		if !h.OK || h.Agent != "running" {
			return fmt.Sprintf("/health ok=%v agent=%s", h.OK, h.Agent)
		}
		return ""
	})
}

// startPageServer serves serverPy on 127.0.0.1:pagePort inside the container,
// as bot, detached from /exec's process group.
func (c *container) startPageServer(t *testing.T) {
	t.Helper()
	st, out := c.call(t, "PUT", "/files?path=site/server.py", []byte(serverPy))
	require.True(t, st == http.StatusOK || st == http.StatusCreated || st == http.StatusNoContent, "PUT server.py: %d %s", st, out)
	r := c.exec(t, "sh", "-c", "setsid -f /usr/bin/python3 site/server.py "+pagePort+" >/dev/null 2>&1 </dev/null")
	require.Equal(t, 0, r.ExitCode, "start page server: %s", r.Stderr)
	eventually(t, 30*time.Second, func() string {
		r := c.exec(t, "curl", "-fsS", "http://127.0.0.1:"+pagePort+"/")
		if r.ExitCode != 0 {
			return "page server not answering: " + r.Stderr
		}
		return ""
	})
}

func (c *container) lease(t *testing.T) string {
	t.Helper()
	var l struct {
		LeaseID string `json:"leaseId"`
	}
	c.ok(t, "POST", "/screens/"+screenID+"/lease", map[string]any{"kind": "agent", "holder": "imagetest", "ttlSeconds": 600}, &l)
	require.NotEmpty(t, l.LeaseID)
	return l.LeaseID
}

type page struct {
	URL   string `json:"url"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

func (c *container) waitPage(t *testing.T, want string) page {
	t.Helper()
	var p page
	eventually(t, 60*time.Second, func() string {
		st, out := c.call(t, "GET", "/screens/"+screenID+"/browser/page", nil)
		if st != http.StatusOK {
			return fmt.Sprintf("browser/page: %d %s", st, out)
		}
		require.NoError(t, json.Unmarshal(out, &p))
		if !strings.Contains(p.Text, want) {
			return fmt.Sprintf("front page %s says %q, want %q", p.URL, p.Text, want)
		}
		return ""
	})
	return p
}

// hostPids lists the container's processes as host pids.
func hostPids(t *testing.T, ctx context.Context, name string) []int {
	t.Helper()
	out := mustDocker(t, ctx, "top", name, "-eo", "pid")
	var pids []int
	for _, f := range strings.Fields(out) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	require.NotEmpty(t, pids)
	return pids
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// TestImage is the user's path through the image: build, docker run with the
// token secret, healthy, drive it from the host, docker stop, and a
// replacement container on the same /home volume that keeps what matters.
func TestImage(t *testing.T) {
	img := requireImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	// The token never travels as an environment variable.
	env := mustDocker(t, ctx, "image", "inspect", "-f", "{{json .Config.Env}}", img)
	require.NotContains(t, env, "BOTD_TOKEN=")
	require.Contains(t, env, "BOTD_TOKEN_FILE=/run/secrets/botd_token")
	ep := mustDocker(t, ctx, "image", "inspect", "-f", "{{json .Config.Entrypoint}}", img)
	require.Equal(t, `["tini","-s","--","/opt/botd/botd"]`, ep)

	tokPath, tok := tokenFile(t, 0o600)
	vol := volume(t, ctx)
	// EGRESS_ALLOW: the page is served on the container's loopback.
	first := run(t, ctx, img, vol, tokPath, "EGRESS_ALLOW=127.0.0.1/8")
	start := time.Now()
	waitHealthy(t, ctx, first)
	t.Logf("docker run → healthy: %s", time.Since(start).Round(100*time.Millisecond))
	inspectEnv := mustDocker(t, ctx, "inspect", "-f", "{{json .Config.Env}}", first)
	require.NotContains(t, inspectEnv, tok, "the token is visible in docker inspect")

	c := connect(t, ctx, first, tok)
	// Unauthenticated requests are refused from the host too.
	req, _ := http.NewRequest("GET", c.base+"/health", nil)
	resp, err := c.hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	c.waitCodex(t)

	// The users of the isolation issue, with their fixed ids.
	ids := mustDocker(t, ctx, "exec", first, "sh", "-c", "id -u desktop; id -u bot; getent group bots | cut -d: -f3")
	assert.Equal(t, "60100\n60101\n1100", ids, "users desktop, bot and group bots must have the fixed ids (scripts/provision.sh)")

	// The image's font caches are valid in a container: a program that
	// lists the fonts as desktop, in a new home, writes no cache of its own
	// (fontconfig builds one there for each directory whose system cache
	// it finds stale: 0.5 s of CPU in every new home).
	fc := mustDocker(t, ctx, "exec", "-u", "desktop", "-e", "HOME=/tmp/fontcheck", first, "sh", "-c",
		"mkdir -p /tmp/fontcheck && fc-list | wc -l && ls -A /tmp/fontcheck/.cache/fontconfig 2>/dev/null | wc -l")
	assert.Regexp(t, `^[1-9][0-9]*\n0$`, fc, "fonts listed, and no cache written in the new home (the image's own are stale: images/computer/Dockerfile)")

	// A workspace file that must outlive the container.
	st, out := c.call(t, "PUT", "/files?path="+keepPath, []byte(keepText))
	require.True(t, st == http.StatusOK || st == http.StatusCreated || st == http.StatusNoContent, "PUT: %d %s", st, out)

	// A screen: observe returns the XFCE desktop at 1280×800.
	c.ok(t, "POST", "/screens/"+screenID+"/start", map[string]any{}, nil)
	leaseID := c.lease(t)
	var obs struct {
		Image  []byte `json:"image"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
	}
	// A drawn desktop (wallpaper, panel, icons), not a blank framebuffer.
	// Under load XFCE may still be painting at the first observation: poll
	// (an unchanged frame comes back without bytes) within a liveness
	// deadline.
	var jp image.Image
	colours := 0
	for deadline := time.Now().Add(90 * time.Second); ; {
		c.ok(t, "POST", "/screens/"+screenID+"/observe", map[string]any{"leaseId": leaseID}, &obs)
		require.Equal(t, 1280, obs.Width)
		require.Equal(t, 800, obs.Height)
		if len(obs.Image) > 0 {
			var err error
			jp, err = jpeg.Decode(bytes.NewReader(obs.Image))
			require.NoError(t, err, "observe did not return a JPEG")
			require.Equal(t, image.Rect(0, 0, 1280, 800), jp.Bounds())
			seen := map[[3]uint32]bool{}
			for y := 0; y < 800; y += 16 {
				for x := 0; x < 1280; x += 16 {
					r, g, b, _ := jp.At(x, y).RGBA()
					seen[[3]uint32{r >> 12, g >> 12, b >> 12}] = true
				}
			}
			if colours = len(seen); colours > 8 {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "the screen still looks blank after 90 s: %d colours", colours)
		time.Sleep(500 * time.Millisecond)
	}
	if dir := os.Getenv("IMAGETEST_SAVE_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "observe.jpg"), obs.Image, 0o644)
	}

	// Chromium opens a page served inside the container; sign in there.
	c.startPageServer(t)
	c.ok(t, "POST", "/screens/"+screenID+"/open", map[string]any{"leaseId": leaseID, "target": "http://127.0.0.1:" + pagePort + "/signin"}, nil)
	p := c.waitPage(t, "signed-in: yes")
	require.Contains(t, p.Text, "served inside the container")
	require.Equal(t, "imagetest page", p.Title)

	// tini reaps an orphan started through /exec: sh exits at once, its
	// background sleep is re-parented to pid 1 (tini) and must not stay a zombie.
	r := c.exec(t, "sh", "-c", "sleep 4 >/dev/null 2>&1 </dev/null & echo $!")
	require.Equal(t, 0, r.ExitCode, r.Stderr)
	orphan := strings.TrimSpace(r.Stdout)
	_, err = strconv.Atoi(orphan)
	require.NoError(t, err, "orphan pid %q", orphan)
	sawTini := false
	eventually(t, 30*time.Second, func() string {
		stat, err := docker(ctx, "exec", first, "cat", "/proc/"+orphan+"/stat")
		if err != nil {
			return "" // gone: reaped
		}
		i := strings.LastIndexByte(stat, ')')
		f := strings.Fields(stat[i+1:])
		if len(f) >= 2 && f[1] == "1" {
			sawTini = true
		}
		return fmt.Sprintf("orphan %s still there (state %s, parent %s)", orphan, f[0], f[1])
	})
	require.True(t, sawTini, "the orphan was never seen re-parented to pid 1 (tini)")

	// Let the cookie sync persist the sign-in (every 2 s) before stopping.
	eventually(t, 30*time.Second, func() string {
		if _, err := docker(ctx, "exec", first, "test", "-s", "/home/.botd/cookies.json"); err != nil {
			return "no /home/.botd/cookies.json yet"
		}
		return ""
	})

	// docker stop: botd (through tini) exits 0 well within the 10 s grace,
	// and none of the container's processes is left on the host.
	pids := hostPids(t, ctx, first)
	stopStart := time.Now()
	mustDocker(t, ctx, "stop", "-t", "10", first)
	t.Logf("docker stop → exited: %s", time.Since(stopStart).Round(100*time.Millisecond))
	state := mustDocker(t, ctx, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}", first)
	require.Equal(t, "exited 0 false", state, "botd did not exit 0 on docker stop (137 = killed after the grace period)")
	for _, pid := range pids {
		require.False(t, alive(pid), "process %d of the stopped container is still alive", pid)
	}

	// A replacement container on the same /home keeps the workspace file,
	// the sign-in and the screen's tabs.
	second := run(t, ctx, img, vol, tokPath, "EGRESS_ALLOW=127.0.0.1/8")
	waitHealthy(t, ctx, second)
	c2 := connect(t, ctx, second, tok)
	c2.waitCodex(t)
	st, out = c2.call(t, "GET", "/files?path="+keepPath, nil)
	require.Equal(t, http.StatusOK, st, "%s", out)
	require.Equal(t, keepText, string(out))
	_, err = docker(ctx, "exec", second, "test", "-s", "/home/.botd/cookies.json")
	require.NoError(t, err, "the cookie jar did not survive")
	// The server runs before the screen starts, so the restored tab loads "/"
	// — which only says "signed-in: yes" if the cookie came back with it.
	c2.startPageServer(t)
	c2.ok(t, "POST", "/screens/"+screenID+"/start", map[string]any{}, nil)
	eventually(t, 60*time.Second, func() string {
		st, out := c2.call(t, "GET", "/screens/"+screenID+"/browser/pages", nil)
		if st != http.StatusOK {
			return fmt.Sprintf("browser/pages: %d %s", st, out)
		}
		if !strings.Contains(string(out), "http://127.0.0.1:"+pagePort+"/") {
			return "tabs not restored: " + string(out)
		}
		return ""
	})
	c2.waitPage(t, "signed-in: yes")
}

// TestImageRefusesBadToken: a missing or world-readable token file keeps the
// container from starting, with a log line that says why.
func TestImageRefusesBadToken(t *testing.T) {
	img := requireImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	readable, _ := tokenFile(t, 0o644)
	for _, tc := range []struct {
		name, token string
	}{
		{"missing", ""},
		{"world-readable", readable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := volume(t, ctx)
			name := run(t, ctx, img, vol, tc.token)
			eventually(t, 60*time.Second, func() string {
				st := mustDocker(t, ctx, "inspect", "-f", "{{.State.Status}}", name)
				if st != "exited" {
					return "container is " + st
				}
				return ""
			})
			code := mustDocker(t, ctx, "inspect", "-f", "{{.State.ExitCode}}", name)
			require.NotEqual(t, "0", code)
			l := logs(ctx, name, "all")
			require.Contains(t, l, "refusing to start")
			require.Contains(t, l, "BOTD_TOKEN_FILE")
			require.NotContains(t, l, "botd listening")
		})
	}
}

// TestImageFailedBuildKeepsTag: `make image` whose Dockerfile fails after
// some steps succeeded exits non-zero, says so, and leaves the tag on the
// image it named before (no half-built image under it).
func TestImageFailedBuildKeepsTag(t *testing.T) {
	img := requireImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tag := "open-bot/computer:imagetest-" + randName("")
	mustDocker(t, ctx, "tag", img, tag)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = docker(ctx, "rmi", tag)
	})
	before := mustDocker(t, ctx, "image", "inspect", "-f", "{{.Id}}", tag)

	df := filepath.Join(t.TempDir(), "Dockerfile")
	require.NoError(t, os.WriteFile(df, []byte("FROM "+img+"\nCOPY scripts/provision.sh /tmp/half-built\nRUN echo half-way && exit 3\n"), 0o644))
	root := testenv.RepoRoot(t)
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts/build-image.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IMAGE="+tag, "DOCKERFILE="+df)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "a failing build must exit non-zero:\n%s", out)
	require.Contains(t, string(out), "make image: docker build failed")
	// make image shows its stages (issue 24.4), in order, as plain lines.
	require.Regexp(t, `(?s)make image: step 1/4: tools and the Docker engine.*\nmake image: step 2/4: the base image .*\nmake image: step 3/4: go build botd and the worker.*\nmake image: step 4/4: docker build -t `+regexp.QuoteMeta(tag), string(out))
	after := mustDocker(t, ctx, "image", "inspect", "-f", "{{.Id}}", tag)
	require.Equal(t, before, after, "a failed build moved the tag")
}

// TestImageNoEngine: `make image` where no engine answers says so and fails,
// before building anything.
func TestImageNoEngine(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Unavailable(t, "docker CLI not on PATH")
	}
	root := testenv.RepoRoot(t)
	sock := "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")
	for _, argv := range [][]string{
		{"bash", filepath.Join(root, "scripts/build-image.sh")},
		{"bash", filepath.Join(root, "scripts/docker-engine.sh"), "status"},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+sock, "IMAGE=open-bot/computer:imagetest-never")
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%v must fail without an engine:\n%s", argv[1:], out)
		require.Contains(t, string(out), "no Docker engine answers", "%v", argv[1:])
	}
}

// TestImageFullDisk: making the base on a full disk fails with a message that
// says so (both the check before starting and a disk that fills during
// debootstrap), and tags nothing.
func TestImageFullDisk(t *testing.T) {
	requireImage(t) // an engine; the base below is made, never used
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root (debootstrap, mount)")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		testenv.Unavailable(t, "debootstrap not on PATH")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Unavailable(t, "cannot mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	// Nearly full before debootstrap starts: it fails on its first download.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 7<<20+512<<10), 0o600))
	base := "open-bot/imagetest-nobase:" + randName("")
	root := testenv.RepoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, tc := range []struct{ skipCheck, want string }{
		{"0", "this step needs about 600 MB"},
		{"1", "most likely because the disk is full"},
	} {
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts/build-image.sh"))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TMPDIR="+dir, "IMAGE_SKIP_SPACE_CHECK="+tc.skipCheck,
			"BASE_IMAGE="+base, "BASE_PULL=0", "IMAGE=open-bot/computer:imagetest-never")
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		require.Contains(t, string(out), tc.want)
		_, err = docker(ctx, "image", "inspect", base)
		require.Error(t, err, "a base was tagged although it could not be made")
		left, _ := filepath.Glob(filepath.Join(dir, "open-bot-base.*"))
		require.Empty(t, left, "the half-made base was left behind")
	}
}

// TestDockerEngineScript: scripts/docker-engine.sh starts dockerd where no
// engine answers, leaves an engine it did not start alone, and stops only
// its own. It runs in a private mount and network namespace with a fresh
// /run and data-root, so the machine's engine is neither seen nor touched.
func TestDockerEngineScript(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root (unshare, dockerd)")
	}
	for _, tool := range []string{"unshare", "dockerd", "docker"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, "%s not on PATH (scripts/docker-engine.sh start installs docker.io)", tool)
		}
	}
	script := filepath.Join(testenv.RepoRoot(t), "scripts/docker-engine.sh")
	sh := `set -u
mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib/docker && ip link set lo up || exit 90
export OPEN_BOT_ENGINE_DIR=/run/eng
s="$1"
a=/run/claim-a; b=/run/claim-b; : >"$a"; : >"$b"
bash "$s" status && exit 91                 # nothing answers in here
bash "$s" stop "$a" || exit 92              # nothing of ours: a no-op
bash "$s" start "$a" || { tail -20 /run/eng/dockerd.log; exit 93; }
pid=$(cat "$a")
[ "$(cat /proc/$pid/comm)" = dockerd ] || exit 94
docker info >/dev/null || exit 95
# A second, overlapping run finds the engine answering: it claims nothing,
# and its stop leaves the engine to the run that started it.
bash "$s" start "$b" || exit 96
[ -s "$b" ] && exit 97
bash "$s" stop "$b" || exit 98
docker info >/dev/null || exit 99
bash "$s" stop "$a" || exit 100
[ -e /proc/$pid ] && exit 101
bash "$s" status && exit 102
# Without a claim file, stop stops what any start started.
bash "$s" start || exit 103
pid=$(cat /run/eng/dockerd.pid)
bash "$s" stop || exit 104
[ -e /proc/$pid ] && exit 105
echo ENGINE-CYCLE-OK`
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "unshare", "-m", "-n", "--propagation", "private", "bash", "-c", sh, "sh", script).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ENGINE-CYCLE-OK")
	require.Contains(t, string(out), "started by this script")
	require.Contains(t, string(out), "an engine answers already")
	require.Contains(t, string(out), "stopping dockerd")
}

// TestImageHealthcheckFollowsListen: the image's HEALTHCHECK asks /healthz on
// the port BOTD_LISTEN names, so a container listening elsewhere than :7000
// still becomes healthy.
func TestImageHealthcheckFollowsListen(t *testing.T) {
	img := requireImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tokPath, _ := tokenFile(t, 0o600)
	for _, listen := range []string{"127.0.0.1:7100", "0.0.0.0:7200"} {
		name := run(t, ctx, img, volume(t, ctx), tokPath, "BOTD_LISTEN="+listen)
		waitHealthy(t, ctx, name)
		l := logs(ctx, name, "all")
		require.Contains(t, l, strings.TrimPrefix(strings.TrimPrefix(listen, "127.0.0.1"), "0.0.0.0"), "botd did not listen on %s", listen)
	}
}

package main

// Issue 34, requirement 1: Playwright and Puppeteer, the real clients from
// npm (internal/cdp/clients, npm ci-ed from its lock), drive a bot's
// Chromium on a docker computer through the worker's CDP route. The site
// is internal/cdp/formsite, run inside the container (a container reaches
// nothing of the host's loopback); the bot signs in there with its normal
// tools first, and the clients must see and use that sign-in.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// cdpSite is formsite's origin inside the container.
const cdpSite = "http://127.0.0.1:18091"

// TestCDPClientsDocker: connectOverCDP (Playwright) fills and submits a
// form with the bot's sign-in cookie and reads that cookie from the
// browser's context; Puppeteer evaluates and takes screenshots, with
// headers and with a single-use ticket (a second use of which fails);
// after each client is gone the bot's own tools work on the same screen
// (the session's lease was released) and its browser is the same one.
func TestCDPClientsDocker(t *testing.T) {
	requireIntegration(t, "node", "npm")
	image := dockerImage(t)
	clients, err := filepath.Abs("internal/cdp/clients")
	require.NoError(t, err)
	for _, pkg := range []string{"playwright-core", "puppeteer-core"} {
		if _, err := os.Stat(filepath.Join(clients, "node_modules", pkg, "package.json")); err != nil {
			cmd := exec.Command("npm", "ci", "--no-fund", "--no-audit")
			cmd.Dir = clients
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "npm ci in %s: %s", clients, out)
			break
		}
	}

	dir := openDir(t, "wire-cdp-")
	site := filepath.Join(dir, "formsite")
	require.NoError(t, os.Mkdir(site, 0o755))
	build := exec.Command("go", "build", "-o", filepath.Join(site, "formsite"), "github.com/open-bot/computer/apps/worker/internal/cdp/formsite")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build formsite: %s", out)

	const bot = "alice"
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image,
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:1/v1", "MODEL_API_KEY": scriptedKey,
		"EGRESS_ALLOW": strings.TrimPrefix(cdpSite, "http://"),
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), bot)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	var cb [16]byte
	_, _ = rand.Read(cb[:])
	cookie := hex.EncodeToString(cb[:])
	out, err = exec.Command("docker", "cp", site+"/.", c.ProviderRef+":/opt/formsite/").CombinedOutput()
	require.NoError(t, err, "docker cp: %s", out)
	out, err = exec.Command("docker", "exec", "-d", c.ProviderRef, "/opt/formsite/formsite", "-cookie", cookie, "-state", "/tmp/formsite").CombinedOutput()
	require.NoError(t, err, "docker exec formsite: %s", out)
	record := func(name string) []map[string]string {
		out, _ := exec.Command("docker", "exec", c.ProviderRef, "cat", "/tmp/formsite/"+name).Output()
		var rs []map[string]string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var r map[string]string
			if json.Unmarshal([]byte(l), &r) == nil {
				rs = append(rs, r)
			}
		}
		return rs
	}
	tool := func(name string, args map[string]any) (int, map[string]any) {
		var res map[string]any
		code := e.do(t, "POST", "/tools/"+name, map[string]any{"botId": bot, "args": args}, &res)
		return code, res
	}

	// The bot signs in with its own tools.
	waitFor(t, "formsite in the container", 30*time.Second, func() bool {
		return exec.Command("docker", "exec", c.ProviderRef, "test", "-d", "/tmp/formsite").Run() == nil
	})
	code, res := tool("open_path", map[string]any{"target": cdpSite + "/signin"})
	require.Equal(t, http.StatusOK, code, "open_path: %v", res)
	waitFor(t, "the bot's browser on /signin", 60*time.Second, func() bool {
		for _, r := range record("seen") {
			if r["path"] == "/signin" {
				return true
			}
		}
		return false
	})
	pid := browserPID(t, c.ProviderRef, bot)
	if pid == "" {
		ps, _ := exec.Command("docker", "exec", c.ProviderRef, "sh", "-c", "ps -eo pid,args | grep -i chrom | cut -c1-400").CombinedOutput()
		t.Fatalf("the bot's browser runs: no main process found in\n%s", ps)
	}

	cdpURL := "ws" + strings.TrimPrefix(e.url, "http") + "/v1/computers/" + e.computer + "/bots/" + bot + "/cdp"
	headers := []string{"WORKER_TOKEN=" + e.token, "WORKER_CAPABILITY=" + e.capa}
	// The bot's tools work again once a client is gone: the session's
	// lease is released as it ends.
	toolsWork := func(who string) {
		t.Helper()
		waitFor(t, "the bot's tools after "+who, 30*time.Second, func() bool {
			code, _ := tool("computer_observe", map[string]any{})
			return code == http.StatusOK
		})
		code, res := tool("open_path", map[string]any{"target": cdpSite + "/form"})
		require.Equal(t, http.StatusOK, code, "open_path after %s: %v", who, res)
		require.Equal(t, pid, browserPID(t, c.ProviderRef, bot), "the bot's browser was restarted by %s", who)
	}

	t.Run("playwright", func(t *testing.T) {
		note := "from playwright " + hex.EncodeToString(cb[:4])
		steps := runCDPClient(t, clients, "playwright.mjs", append(headers, "CDP_URL="+cdpURL, "SITE="+cdpSite, "NOTE="+note))
		require.Contains(t, steps, "done")
		var sub struct{ Done string }
		require.NoError(t, json.Unmarshal(steps["submitted"], &sub))
		require.Equal(t, "received "+note, sub.Done)
		posts := record("posts")
		require.NotEmpty(t, posts)
		require.Equal(t, map[string]string{"note": note, "session": cookie}, posts[len(posts)-1], "the form was posted with the bot's sign-in")
		var ck struct {
			Cookies []struct {
				Name, Value string
				HTTPOnly    bool `json:"httpOnly"`
			}
		}
		require.NoError(t, json.Unmarshal(steps["cookies"], &ck))
		found := false
		for _, c := range ck.Cookies {
			if c.Name == "session" {
				found = true
				require.Equal(t, cookie, c.Value, "the sign-in Playwright sees is the bot's")
				require.True(t, c.HTTPOnly)
			}
		}
		require.True(t, found, "the bot's sign-in cookie in context.cookies(): %s", steps["cookies"])
		requireScreenshot(t, steps["screenshot"])
		toolsWork("playwright")
	})

	t.Run("puppeteer", func(t *testing.T) {
		steps := runCDPClient(t, clients, "puppeteer.mjs", append(headers, "CDP_URL="+cdpURL, "SITE="+cdpSite))
		require.Contains(t, steps, "done")
		var ev struct {
			Title   string
			Answer  int
			HasForm bool `json:"hasForm"`
		}
		require.NoError(t, json.Unmarshal(steps["evaluate"], &ev))
		require.Equal(t, "the form", ev.Title)
		require.Equal(t, 42, ev.Answer)
		require.True(t, ev.HasForm)
		requireScreenshot(t, steps["screenshot"])
		toolsWork("puppeteer")
	})

	t.Run("a takeover ends the session", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		h := http.Header{"Authorization": {"Bearer " + e.token}, "X-Computer-Capability": {e.capa}}
		ws := dialCDP(t, ctx, cdpURL, h)
		ws.SetReadLimit(64 << 20)
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(`{"id":1,"method":"Browser.getVersion"}`)))
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		require.Contains(t, string(msg), `"protocolVersion"`)
		// While the session holds the screen, another one is refused.
		_, resp, err := websocket.Dial(ctx, cdpURL, &websocket.DialOptions{HTTPHeader: h})
		require.Error(t, err)
		require.Equal(t, http.StatusConflict, resp.StatusCode)

		var link struct{ ControlURL string }
		require.Equal(t, http.StatusOK, e.do(t, "POST", "/bots/"+bot+"/takeover", nil, &link))
		released := false
		defer func() {
			if !released { // a failure below leaves no person holding the screen
				e.do(t, "DELETE", "/bots/"+bot+"/takeover", nil, nil)
			}
		}()
		for {
			_, _, err = ws.Read(ctx)
			if err != nil {
				break
			}
		}
		require.Equal(t, websocket.StatusCode(4001), websocket.CloseStatus(err), "%v", err)
		var ce websocket.CloseError
		require.ErrorAs(t, err, &ce)
		require.Contains(t, ce.Reason, "took over")
		require.Equal(t, http.StatusOK, e.do(t, "DELETE", "/bots/"+bot+"/takeover", nil, nil))
		released = true
		toolsWork("a takeover")
	})

	t.Run("no idle suspension under a session", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		h := http.Header{"Authorization": {"Bearer " + e.token}, "X-Computer-Capability": {e.capa}}
		ws := dialCDP(t, ctx, cdpURL, h)
		// For 2 s, a computer idle for 500 ms would be suspended: the
		// session keeps it in use.
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			require.NoError(t, e.w.Computers.SuspendIdle(ctx, 500*time.Millisecond))
		}
		got, err := e.w.Store.GetComputer(ctx, e.computer)
		require.NoError(t, err)
		require.Equal(t, "running", got.ObservedState, "the computer was suspended under an open CDP session")
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(`{"id":1,"method":"Browser.getVersion"}`)))
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		require.Contains(t, string(msg), `"protocolVersion"`)
		require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
		toolsWork("an idle check")
	})

	t.Run("puppeteer with a ticket", func(t *testing.T) {
		var tk struct{ Ticket, URL string }
		require.Equal(t, http.StatusOK, e.do(t, "POST", "/bots/"+bot+"/cdp/tickets", map[string]string{}, &tk))
		require.Contains(t, tk.URL, "ticket="+tk.Ticket)
		steps := runCDPClient(t, clients, "puppeteer.mjs", []string{"CDP_URL=" + tk.URL, "SITE=" + cdpSite})
		require.Contains(t, steps, "done")
		requireScreenshot(t, steps["screenshot"])
		toolsWork("puppeteer with a ticket")
		// The same URL again: the ticket was spent.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", "puppeteer.mjs")
		cmd.Dir = clients
		cmd.Env = append(os.Environ(), "CDP_URL="+tk.URL, "SITE="+cdpSite)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "a spent ticket connected: %s", out)
		require.Contains(t, string(out), "401")
	})
}

// dialCDP opens the CDP websocket with headers h; a refusal fails t with
// the worker's answer.
func dialCDP(t *testing.T, ctx context.Context, url string, h http.Header) *websocket.Conn {
	t.Helper()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		msg := err.Error()
		if resp != nil && resp.Body != nil {
			b := make([]byte, 1024)
			n, _ := resp.Body.Read(b)
			msg = fmt.Sprintf("%d %s", resp.StatusCode, b[:n])
		}
		t.Fatalf("the CDP websocket: %s", msg)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

// runCDPClient runs a client script with env and returns its steps (the
// JSON lines it printed, by "step").
func runCDPClient(t *testing.T, dir, script string, env []string) map[string]json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	steps := map[string]json.RawMessage{}
	var names []string
	for _, l := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var s struct{ Step string }
		if json.Unmarshal(l, &s) == nil && s.Step != "" {
			steps[s.Step] = json.RawMessage(l)
			names = append(names, s.Step)
		}
	}
	require.NoError(t, err, "node %s (steps %v): %s", script, names, stderr.String())
	t.Logf("node %s: steps %v", script, names)
	return steps
}

// requireScreenshot: the step's base64 PNG decodes and is not one colour.
func requireScreenshot(t *testing.T, step json.RawMessage) {
	t.Helper()
	var s struct{ PNG string }
	require.NoError(t, json.Unmarshal(step, &s))
	b, err := base64.StdEncoding.DecodeString(s.PNG)
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err, "the screenshot is a PNG")
	bounds := img.Bounds()
	require.Greater(t, bounds.Dx(), 100)
	require.Greater(t, bounds.Dy(), 100)
	colours := map[[4]uint32]bool{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 7 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 7 {
			r, g, b, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, b, a}] = true
		}
	}
	require.Greater(t, len(colours), 16, "the screenshot (%v) is blank", bounds)
}

// browserPID is the pid of the Chromium main process of bot's screen in
// the container ("" when none runs).
func browserPID(t *testing.T, container, bot string) string {
	t.Helper()
	out, err := exec.Command("docker", "exec", container, "ps", "-eo", "pid=,args=", "-ww").Output()
	require.NoError(t, err)
	for _, l := range strings.Split(string(out), "\n") {
		pid, args, _ := strings.Cut(strings.TrimSpace(l), " ")
		if strings.Contains(args, "--user-data-dir=/home/desktop/screens/"+bot+"/chromium ") && !strings.Contains(args, "--type=") &&
			strings.HasPrefix(args, "/usr/lib/chromium/chromium ") {
			return pid
		}
	}
	return ""
}

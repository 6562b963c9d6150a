package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/capability"
)

// osworldDisplayBase keeps this test's displays apart from the others'.
const osworldDisplayBase = 310

// guest is a client of OSWorld's guest API through the worker, making the
// requests OSWorld's PythonController and SetupController make (paths,
// methods, bodies; desktop_env/controllers/python.py and setup.py), with
// the worker's two credentials a provider's relay adds.
type guest struct {
	t          *testing.T
	base       string // …/osworld
	token, cap string
}

func (g *guest) do(method, route string, body io.Reader, ctype string) (int, []byte, http.Header) {
	g.t.Helper()
	req, _ := http.NewRequest(method, g.base+route, body)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	req.Header.Set(capability.Header, g.cap)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// jsonBody is requests' json= body.
func (g *guest) jsonPost(route string, v any) (int, []byte) {
	if v == nil { // requests.post(url): no body
		st, out, _ := g.do("POST", route, nil, "")
		return st, out
	}
	b, _ := json.Marshal(v)
	st, out, _ := g.do("POST", route, bytes.NewReader(b), "application/json")
	return st, out
}

// execute is PythonController.execute_python_command: OSWorld's prefix,
// python -c, shell false.
func (g *guest) execute(code string) (int, map[string]any) {
	g.t.Helper()
	st, out := g.jsonPost("/execute", map[string]any{
		"command": []string{"python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; " + code}, "shell": false})
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return st, m
}

// TestOSWorldGuestAPI drives an evaluation computer (a real botd with its
// screen, XFCE and Chromium) through the guest routes the way OSWorld's
// harness does: the screenshot decodes as PNG, the accessibility tree
// parses and names the test page's button, execute returns Python's
// output, a pyautogui click at the button's centre (from the tree) lands
// on it (the page reports the click to the test's server), a file goes up
// and comes back, and the info routes answer. A computer made without
// evaluation: true serves none of it; another computer's capability gets
// 404.
func TestOSWorldGuestAPI(t *testing.T) {
	requireIntegration(t, "python3")
	var mu sync.Mutex
	clicks := 0
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/clicked" {
			mu.Lock()
			clicks++
			mu.Unlock()
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<title>osworld</title><body style="margin:0"><button id=go style="position:fixed;left:300px;top:200px;width:240px;height:90px;font-size:28px" onclick="fetch('/clicked',{method:'POST'})">Launch rocket</button></body>`)
	}))
	t.Cleanup(page.Close)
	model := httptest.NewServer(http.NotFoundHandler()) // no run uses the model here
	t.Cleanup(model.Close)
	c := startComputer(t, model.URL, osworldDisplayBase, "EGRESS_ALLOW=127.0.0.1/32")
	e := &workerEnv{token: "worker-token-0123456789", dataDir: t.TempDir()}
	e.serve(t, "scripted-model")

	create := func(scope string, evaluation bool) (string, string) {
		var created struct {
			Computer struct {
				ID         string `json:"id"`
				Evaluation bool   `json:"evaluation"`
			} `json:"computer"`
			Capability string `json:"capability"`
		}
		require.Equal(t, http.StatusCreated, post(t, e.url+"/v1/computers", e.op, map[string]any{
			"scope": map[string]any{"session": scope}, "provider": "attach", "evaluation": evaluation,
			"attach": map[string]string{"url": c.url, "token": c.token}}, &created))
		require.Equal(t, evaluation, created.Computer.Evaluation)
		o := *e
		o.computer, o.capa = created.Computer.ID, created.Capability
		require.Equal(t, http.StatusCreated, o.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
		return created.Computer.ID, created.Capability
	}
	id, capa := create("osworld-1", true)
	g := &guest{t: t, base: e.url + "/v1/computers/" + id + "/bots/alice/osworld", token: e.token, cap: capa}

	// SetupController's steps: open the page (open_file takes a URL here).
	st, out := g.jsonPost("/setup/open_file", map[string]string{"path": page.URL + "/"})
	require.Equal(t, http.StatusOK, st, "%s", out)

	// get_screenshot: a PNG (magic and decode) of the whole screen.
	var shot []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		var h http.Header
		st, shot, h = g.do("GET", "/screenshot", nil, "")
		require.Equal(t, http.StatusOK, st, "%s", shot)
		require.Equal(t, "image/png", h.Get("Content-Type"))
		if bytes.HasPrefix(shot, []byte("\x89PNG\r\n\x1a\n")) || time.Now().After(deadline) {
			break
		}
	}
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err)
	require.Equal(t, 1280, img.Bounds().Dx())
	st, _, _ = g.do("HEAD", "/screenshot", nil, "")
	require.Equal(t, http.StatusOK, st, "the docker and remote providers' readiness probe")

	// get_accessibility_tree: {"AT": xml}; the button is a push-button with
	// its name and box.
	var cx, cy int
	deadline = time.Now().Add(30 * time.Second)
	for cx == 0 {
		st, body, _ := g.do("GET", "/accessibility", nil, "")
		require.Equal(t, http.StatusOK, st, "%s", body)
		var at struct {
			AT string `json:"AT"`
		}
		require.NoError(t, json.Unmarshal(body, &at))
		cx, cy = buttonCentre(t, at.AT, "Launch rocket")
		if cx == 0 {
			require.True(t, time.Now().Before(deadline), "no push-button named Launch rocket in %s", at.AT)
			time.Sleep(500 * time.Millisecond)
		}
	}

	// execute_python_command: Python's output.
	st, res := g.execute("print(1+1)")
	require.Equal(t, http.StatusOK, st, "%v", res)
	require.Equal(t, "success", res["status"])
	require.Equal(t, "2\n", res["output"])
	require.EqualValues(t, 0, res["returncode"])
	// get_vm_platform, as OSWorld asks it.
	_, res = g.execute("import platform; print(platform.system())")
	require.Equal(t, "Linux", strings.TrimSpace(fmt.Sprint(res["output"])))

	// An agent's action: pyautogui.click at the button's centre lands on it.
	st, res = g.execute(fmt.Sprintf("pyautogui.click(%d, %d)", cx, cy))
	require.Equal(t, http.StatusOK, st)
	require.EqualValues(t, 0, res["returncode"], "%v", res)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return clicks == 1 }, 10*time.Second, 100*time.Millisecond,
		"the click did not reach the page's button")
	st, body, _ := g.do("GET", "/cursor_position", nil, "")
	require.Equal(t, http.StatusOK, st)
	require.JSONEq(t, fmt.Sprintf("[%d, %d]", cx, cy), string(body))
	st, out = g.jsonPost("/screen_size", nil)
	require.Equal(t, http.StatusOK, st)
	require.JSONEq(t, `{"width":1280,"height":800}`, string(out))

	// SetupController's window and launch steps: the page's window by
	// title (wmctrl's substring match), a window that is not there, and
	// Chrome's launch command starting the screen's browser.
	st, out = g.jsonPost("/setup/activate_window", map[string]any{"window_name": "osworld", "strict": false, "by_class": false})
	require.Equal(t, http.StatusOK, st, "%s", out)
	st, _ = g.jsonPost("/setup/close_window", map[string]any{"window_name": "no such window here"})
	require.Equal(t, http.StatusNotFound, st)
	st, out = g.jsonPost("/setup/launch", map[string]any{"command": []string{"google-chrome", "--remote-debugging-port=1337"}, "shell": false})
	require.Equal(t, http.StatusOK, st, "%s", out)
	st, out = g.jsonPost("/setup/launch", map[string]any{"command": "gimp", "shell": false})
	require.Equal(t, http.StatusNotImplemented, st, "%s", out)

	// start_recording and end_recording, as run_single_example calls them
	// around every task: an MP4 comes back.
	st, out = g.jsonPost("/start_recording", nil)
	require.Equal(t, http.StatusOK, st, "%s", out)
	st, _ = g.jsonPost("/start_recording", nil)
	require.Equal(t, http.StatusBadRequest, st, "a second recording")
	time.Sleep(2 * time.Second)
	st, video, _ := g.do("POST", "/end_recording", nil, "")
	require.Equal(t, http.StatusOK, st, "%.200s", video)
	require.Greater(t, len(video), 1000)
	require.Equal(t, "ftyp", string(video[4:8]), "an MP4")
	st, _ = g.jsonPost("/end_recording", nil)
	require.Equal(t, http.StatusBadRequest, st, "nothing to stop")

	// The download step's upload (multipart file_path, file_data), then
	// get_file (form file_path) gives the same bytes; a missing file 404s.
	payload := []byte("osworld round trip \x00\x01\xff")
	var mb bytes.Buffer
	mw := multipart.NewWriter(&mb)
	require.NoError(t, mw.WriteField("file_path", "/home/user/Desktop/task.bin"))
	fw, _ := mw.CreateFormFile("file_data", "task.bin")
	_, _ = fw.Write(payload)
	require.NoError(t, mw.Close())
	st, body, _ = g.do("POST", "/setup/upload", &mb, mw.FormDataContentType())
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Equal(t, fmt.Sprintf("File Uploaded: %d bytes", len(payload)), string(body))
	form := func(k, v string) io.Reader { return strings.NewReader(url.Values{k: {v}}.Encode()) }
	st, body, _ = g.do("POST", "/file", form("file_path", "~/Desktop/task.bin"), "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, payload, body)
	st, _, _ = g.do("POST", "/file", form("file_path", "/home/user/Desktop/none.bin"), "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusNotFound, st)
	st, _, _ = g.do("POST", "/file", form("file_path", "/etc/passwd"), "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusForbidden, st, "a path outside the workspace")
	st, out = g.jsonPost("/list_directory", map[string]string{"path": "~/Desktop"})
	require.Equal(t, http.StatusOK, st, "%s", out)
	require.Contains(t, string(out), `"name":"task.bin"`)

	// Not an evaluation computer: nothing served. Another computer's
	// capability: the same 404 as an unknown computer.
	id2, capa2 := create("osworld-2", false)
	g2 := &guest{t: t, base: e.url + "/v1/computers/" + id2 + "/bots/alice/osworld", token: e.token, cap: capa2}
	st, body, _ = g2.do("GET", "/screenshot", nil, "")
	require.Equal(t, http.StatusForbidden, st, "%s", body)
	g3 := &guest{t: t, base: g.base, token: e.token, cap: capa2}
	st, _, _ = g3.do("GET", "/screenshot", nil, "")
	require.Equal(t, http.StatusNotFound, st)
}

// buttonCentre finds the push-button named name in an OSWorld tree and
// returns its centre (0, 0 when there is none), reading cp:screencoord
// and cp:size as OSWorld's agents do.
func buttonCentre(t *testing.T, tree, name string) (int, int) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(tree))
	const cp = "https://accessibility.ubuntu.example.org/ns/component"
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return 0, 0
		}
		require.NoError(t, err, tree)
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "push-button" {
			continue
		}
		var n, coord, size string
		for _, a := range se.Attr {
			switch {
			case a.Name.Local == "name" && a.Name.Space == "":
				n = a.Value
			case a.Name.Space == cp && a.Name.Local == "screencoord":
				coord = a.Value
			case a.Name.Space == cp && a.Name.Local == "size":
				size = a.Value
			}
		}
		if n != name {
			continue
		}
		var x, y, w, h int
		_, err = fmt.Sscanf(coord, "(%d, %d)", &x, &y)
		require.NoError(t, err, coord)
		_, err = fmt.Sscanf(size, "(%d, %d)", &w, &h)
		require.NoError(t, err, size)
		return x + w/2, y + h/2
	}
}

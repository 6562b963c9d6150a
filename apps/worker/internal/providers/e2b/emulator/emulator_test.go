package emulator_test

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
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/filesystem"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/filesystem/filesystemconnect"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process/processconnect"
)

type sandboxAnswer struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	State              string  `json:"state"`
}

// api is a control-plane client (plain HTTP through the checker).
type api struct {
	t   *testing.T
	s   *emutest.Server
	hc  *http.Client
	key string
}

func (a *api) do(method, path string, body any) (int, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.s.URL+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-API-Key", a.key)
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func (a *api) want(status int, method, path string, body any) []byte {
	a.t.Helper()
	got, data := a.do(method, path, body)
	if got != status {
		a.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, status, redact(data))
	}
	return data
}

var tokenField = regexp.MustCompile(`("(?:envdAccessToken|trafficAccessToken)":)"[^"]*"`)

// redact hides the access tokens of an answer printed in a failure.
func redact(b []byte) string { return tokenField.ReplaceAllString(string(b), `$1"…"`) }

// sandboxHeaders routes a request to a sandbox as E2B_SANDBOX_URL clients do.
type sandboxHeaders struct {
	base           http.RoundTripper
	id, port, host string
	extra          http.Header
}

func (h sandboxHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if h.host != "" {
		req.Host = h.host
	} else {
		req.Header.Set("E2b-Sandbox-Id", h.id)
		req.Header.Set("E2b-Sandbox-Port", h.port)
	}
	for k, vs := range h.extra {
		req.Header[k] = vs
	}
	return h.base.RoundTrip(req)
}

// envd is one sandbox's envd: connect clients and HTTP, as a user.
type envd struct {
	hc   *http.Client
	url  string
	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
}

func newEnvd(s *emutest.Server, id, token, user string, byHost bool) *envd {
	extra := http.Header{"X-Access-Token": {token}}
	if user != "" {
		extra.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	rt := sandboxHeaders{base: s.Checker, id: id, port: "49983", extra: extra}
	if byHost {
		rt.host = "49983-" + id + "." + s.Emulator.Domain()
	}
	hc := &http.Client{Transport: rt}
	return &envd{
		hc: hc, url: s.URL,
		proc: processconnect.NewProcessClient(hc, s.URL, connect.WithProtoJSON()),
		fs:   filesystemconnect.NewFilesystemClient(hc, s.URL, connect.WithProtoJSON()),
	}
}

type ran struct {
	pid            uint32
	stdout, stderr string
	end            *process.ProcessEvent_EndEvent
}

// start starts a process and returns its stream after the start event.
func (e *envd) start(ctx context.Context, t *testing.T, req *process.StartRequest) (*connect.ServerStreamForClient[process.StartResponse], uint32) {
	t.Helper()
	stream, err := e.proc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("start %s: no start event: %v", req.GetProcess().GetCmd(), stream.Err())
	}
	st := stream.Msg().GetEvent().GetStart()
	if st == nil || st.GetPid() == 0 {
		t.Fatalf("start %s: first event %v, want start with a pid", req.GetProcess().GetCmd(), stream.Msg())
	}
	return stream, st.GetPid()
}

// collect reads a stream to its end event.
func collect(t *testing.T, stream *connect.ServerStreamForClient[process.StartResponse], r *ran, onData func(string)) {
	t.Helper()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			r.stdout += string(d.GetStdout())
			r.stderr += string(d.GetStderr())
			if onData != nil {
				onData(string(d.GetStdout()))
			}
		}
		if end := ev.GetEnd(); end != nil {
			r.end = end
			return
		}
	}
	t.Fatalf("stream ended without an end event: %v", stream.Err())
}

func (e *envd) run(t *testing.T, cmd string, args ...string) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, pid := e.start(ctx, t, &process.StartRequest{Process: &process.ProcessConfig{Cmd: cmd, Args: args}})
	defer stream.Close()
	r := ran{pid: pid}
	collect(t, stream, &r, nil)
	return r
}

func (e *envd) http(t *testing.T, method, path string, body io.Reader, ct string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func connectCode(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return 0
}

// TestEmulatorSpec drives the emulator with plain HTTP and the generated
// Connect clients, every exchange validated against E2B's published spec.
func TestEmulatorSpec(t *testing.T) {
	s := emutest.Start(t, nil, []int{7000, 8080})
	a := &api{t: t, s: s, hc: s.Client(), key: s.APIKey}

	// Auth and bad requests answer the spec's errors.
	bad := &api{t: t, s: s, hc: s.Client(), key: "e2b_" + strings.Repeat("0", 40)}
	bad.want(http.StatusUnauthorized, http.MethodGet, "/v2/sandboxes", nil)
	a.want(http.StatusBadRequest, http.MethodPost, "/sandboxes", map[string]any{"templateID": "no-such-template"})
	a.want(http.StatusNotFound, http.MethodGet, "/sandboxes/inosuchsandbox", nil)

	// Create with metadata, a timeout and private traffic.
	var sb sandboxAnswer
	data := a.want(http.StatusCreated, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "open-bot", "timeout": 600, "metadata": map[string]string{"computer": "c-e2bemu"},
		"network": map[string]any{"allowPublicTraffic": false},
	})
	if err := json.Unmarshal(data, &sb); err != nil || sb.SandboxID == "" || sb.EnvdAccessToken == "" || sb.TrafficAccessToken == nil || sb.Domain == nil {
		t.Fatalf("create answer %s: %v", data, err)
	}
	id := sb.SandboxID

	// List by metadata (v1 and v2), get.
	var listed []sandboxAnswer
	_ = json.Unmarshal(a.want(http.StatusOK, http.MethodGet, "/v2/sandboxes?metadata="+url.QueryEscape("computer=c-e2bemu"), nil), &listed)
	if len(listed) != 1 || listed[0].SandboxID != id || listed[0].State != "running" {
		t.Fatalf("v2 list by metadata: %+v", listed)
	}
	_ = json.Unmarshal(a.want(http.StatusOK, http.MethodGet, "/v2/sandboxes?metadata="+url.QueryEscape("computer=other"), nil), &listed)
	if len(listed) != 0 {
		t.Fatalf("v2 list by other metadata: %+v", listed)
	}
	_ = json.Unmarshal(a.want(http.StatusOK, http.MethodGet, "/sandboxes?metadata="+url.QueryEscape("computer=c-e2bemu"), nil), &listed)
	if len(listed) != 1 || listed[0].SandboxID != id {
		t.Fatalf("v1 list by metadata: %+v", listed)
	}
	var detail sandboxAnswer
	_ = json.Unmarshal(a.want(http.StatusOK, http.MethodGet, "/sandboxes/"+id, nil), &detail)
	if detail.State != "running" || detail.TemplateID != "open-bot" {
		t.Fatalf("get: %+v", detail)
	}

	// envd: health without a token; anything else needs the right one.
	ev := newEnvd(s, id, sb.EnvdAccessToken, "", false)
	if st, body := ev.http(t, http.MethodGet, "/health", nil, ""); st != http.StatusNoContent {
		t.Fatalf("health: %d %s", st, body)
	}
	wrong := newEnvd(s, id, "not-the-token", "", false)
	if st, _ := wrong.http(t, http.MethodGet, "/files?path=/etc/hostname", nil, ""); st != http.StatusUnauthorized {
		t.Fatalf("files with a wrong token: %d, want 401", st)
	}
	if _, err := wrong.fs.Stat(context.Background(), connect.NewRequest(&filesystem.StatRequest{Path: "/"})); err == nil {
		t.Fatal("an RPC with a wrong token passed")
	}

	// A command: output, stderr, exit code.
	r := ev.run(t, "/bin/bash", "-l", "-c", "echo hello; echo oops >&2; exit 3")
	if r.stdout != "hello\n" || r.stderr != "oops\n" || r.end.GetExitCode() != 3 || !r.end.GetExited() {
		t.Fatalf("run: %+v end %v", r, r.end)
	}
	// Host routing ({port}-{id}.{domain}) reaches the same envd; Basic picks
	// the user.
	byHost := newEnvd(s, id, sb.EnvdAccessToken, "nobody", true)
	if r := byHost.run(t, "id", "-un"); strings.TrimSpace(r.stdout) != "nobody" {
		t.Fatalf("as nobody by host: %q", r.stdout)
	}
	if r := ev.run(t, "id", "-un"); strings.TrimSpace(r.stdout) != "root" {
		t.Fatalf("default user: %q", r.stdout)
	}

	// A streaming command: the lines arrive in order, each as it is written
	// (the command waits for a file the test writes only after line 1 came).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, _ := ev.start(ctx, t, &process.StartRequest{Process: &process.ProcessConfig{
		Cmd: "/bin/bash", Args: []string{"-c", "echo line1; while [ ! -e /tmp/go-on ]; do sleep 0.05; done; echo line2"},
	}})
	var sr ran
	collect(t, stream, &sr, func(out string) {
		if strings.Contains(out, "line1") {
			ev.run(t, "touch", "/tmp/go-on")
		}
	})
	stream.Close()
	if sr.stdout != "line1\nline2\n" || sr.end.GetExitCode() != 0 {
		t.Fatalf("streaming: %q end %v", sr.stdout, sr.end)
	}

	// stdin: cat echoes what is sent, ends when stdin closes.
	stdinTrue := true
	tag := "cat-1"
	cat, catPID := ev.start(ctx, t, &process.StartRequest{Process: &process.ProcessConfig{Cmd: "cat"}, Stdin: &stdinTrue, Tag: &tag})
	if _, err := ev.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: catPID}},
		Input:   &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("ping\n")}},
	})); err != nil {
		t.Fatal(err)
	}
	list, err := ev.proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		found = found || (p.GetPid() == catPID && p.GetTag() == tag && p.GetConfig().GetCmd() == "cat")
	}
	if !found {
		t.Fatalf("list: %v, want cat %d tagged %s", list.Msg, catPID, tag)
	}
	var cr ran
	collect(t, cat, &cr, func(out string) {
		if strings.Contains(out, "ping") {
			if _, err := ev.proc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{
				Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}},
			})); err != nil {
				t.Error(err)
			}
		}
	})
	cat.Close()
	if cr.stdout != "ping\n" || cr.end.GetExitCode() != 0 {
		t.Fatalf("stdin: %q end %v", cr.stdout, cr.end)
	}

	// A signal ends a process; Connect follows it from a second stream.
	sleeper, sleepPID := ev.start(ctx, t, &process.StartRequest{Process: &process.ProcessConfig{Cmd: "sleep", Args: []string{"600"}}})
	defer sleeper.Close()
	follower, err := ev.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: sleepPID}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	if !follower.Receive() || follower.Msg().GetEvent().GetStart().GetPid() != sleepPID {
		t.Fatalf("connect: first event %v (%v)", follower.Msg(), follower.Err())
	}
	if _, err := ev.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: sleepPID}},
		Signal:  process.Signal_SIGNAL_SIGTERM,
	})); err != nil {
		t.Fatal(err)
	}
	var fend *process.ProcessEvent_EndEvent
	for fend == nil && follower.Receive() {
		fend = follower.Msg().GetEvent().GetEnd()
	}
	if fend == nil || fend.GetExited() || !strings.Contains(fend.GetStatus(), "terminated") {
		t.Fatalf("after SIGTERM the follower saw %v (%v)", fend, follower.Err())
	}
	_, err = ev.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: sleepPID}},
		Signal:  process.Signal_SIGNAL_SIGKILL,
	}))
	if connectCode(err) != connect.CodeNotFound {
		t.Fatalf("signal to an ended process: %v, want not_found", err)
	}

	// Files: a multipart upload as the JS SDK sends it (field "file", the
	// path as its filename), an octet-stream one, list, stat, read back.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("file", "/root/work/dir/a.txt")
	_, _ = fw.Write([]byte("alpha\n"))
	_ = mw.Close()
	if st, body := ev.http(t, http.MethodPost, "/files", &mp, mw.FormDataContentType()); st != http.StatusOK || !strings.Contains(string(body), `"/root/work/dir/a.txt"`) {
		t.Fatalf("multipart upload: %d %s", st, body)
	}
	if st, body := ev.http(t, http.MethodPost, "/files?path="+url.QueryEscape("work/b.bin"), bytes.NewReader([]byte{0, 1, 2, 255}), "application/octet-stream"); st != http.StatusOK || !strings.Contains(string(body), `"/root/work/b.bin"`) {
		t.Fatalf("octet-stream upload: %d %s", st, body)
	}
	if st, body := ev.http(t, http.MethodGet, "/files?path="+url.QueryEscape("/root/work/dir/a.txt"), nil, ""); st != http.StatusOK || string(body) != "alpha\n" {
		t.Fatalf("download: %d %q", st, body)
	}
	if st, body := ev.http(t, http.MethodGet, "/files?path=work/b.bin", nil, ""); st != http.StatusOK || !bytes.Equal(body, []byte{0, 1, 2, 255}) {
		t.Fatalf("binary download: %d %q", st, body)
	}
	if st, _ := ev.http(t, http.MethodGet, "/files?path=/root/work/missing", nil, ""); st != http.StatusNotFound {
		t.Fatalf("download of a missing file: %d, want 404", st)
	}
	if st, _ := ev.http(t, http.MethodGet, "/files?path=/root/work", nil, ""); st != http.StatusBadRequest {
		t.Fatalf("download of a directory: %d, want 400", st)
	}
	ls, err := ev.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/root/work", Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*filesystem.EntryInfo{}
	for _, en := range ls.Msg.GetEntries() {
		names[en.GetPath()] = en
	}
	if e := names["/root/work/dir/a.txt"]; e == nil || e.GetSize() != 6 || e.GetType() != filesystem.FileType_FILE_TYPE_FILE || e.GetOwner() != "root" {
		t.Fatalf("listdir: %v", ls.Msg)
	}
	if e := names["/root/work/dir"]; e == nil || e.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("listdir: no dir in %v", ls.Msg)
	}
	if _, err := ev.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/root/work/new"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ev.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/root/work/new"})); connectCode(err) != connect.CodeAlreadyExists {
		t.Fatalf("makedir twice: %v", err)
	}
	mv, err := ev.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "/root/work/b.bin", Destination: "/root/work/new/c.bin"}))
	if err != nil || mv.Msg.GetEntry().GetSize() != 4 {
		t.Fatalf("move: %v %v", mv, err)
	}
	if _, err := ev.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/root/work/new"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ev.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/root/work/new/c.bin"})); connectCode(err) != connect.CodeNotFound {
		t.Fatalf("stat of a removed file: %v, want not_found", err)
	}
	// A user's permissions hold: nobody cannot read root's home.
	if st, _ := byHost.http(t, http.MethodGet, "/files?path=/root/work/dir/a.txt", nil, ""); st == http.StatusOK {
		t.Fatal("nobody read a file in /root")
	}

	// Port routing: a server in the sandbox on 8080, reached by host, with
	// the traffic token (the sandbox is private).
	srvStream, _ := ev.start(ctx, t, &process.StartRequest{Process: &process.ProcessConfig{
		Cmd: "python3", Args: []string{"-m", "http.server", "8080", "--bind", "0.0.0.0", "--directory", "/root/work/dir"},
	}})
	defer srvStream.Close()
	portHost := "8080-" + id + "." + s.Emulator.Domain()
	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/a.txt", nil)
		req.Host = portHost
		if token != "" {
			req.Header.Set("e2b-traffic-access-token", token)
		}
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, body := get(*sb.TrafficAccessToken)
		if st == http.StatusOK {
			if body != "alpha\n" {
				t.Fatalf("port 8080: %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port 8080 never answered: %d %s", st, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, _ := get(""); st != http.StatusForbidden {
		t.Fatalf("private port without the traffic token: %d, want 403", st)
	}

	// Pause stops it (envd gone, 409 on a second pause); connect resumes it
	// (201), then answers 200; the disk survived.
	a.want(http.StatusNoContent, http.MethodPost, "/sandboxes/"+id+"/pause", nil)
	_ = json.Unmarshal(a.want(http.StatusOK, http.MethodGet, "/sandboxes/"+id, nil), &detail)
	if detail.State != "paused" {
		t.Fatalf("after pause: %+v", detail)
	}
	if st, _ := ev.http(t, http.MethodGet, "/health", nil, ""); st != http.StatusBadGateway {
		t.Fatalf("envd of a paused sandbox: %d, want 502", st)
	}
	a.want(http.StatusConflict, http.MethodPost, "/sandboxes/"+id+"/pause", nil)
	a.want(http.StatusCreated, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 600})
	a.want(http.StatusOK, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 600})
	if st, body := ev.http(t, http.MethodGet, "/files?path=/root/work/dir/a.txt", nil, ""); st != http.StatusOK || string(body) != "alpha\n" {
		t.Fatalf("after resume: %d %q", st, body)
	}
	a.want(http.StatusNoContent, http.MethodPost, "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 900})
	a.want(http.StatusNoContent, http.MethodPost, "/sandboxes/"+id+"/refreshes", map[string]any{"duration": 60})

	// Kill: gone from the API and the engine.
	a.want(http.StatusNoContent, http.MethodDelete, "/sandboxes/"+id, nil)
	a.want(http.StatusNotFound, http.MethodGet, "/sandboxes/"+id, nil)
	a.want(http.StatusNotFound, http.MethodDelete, "/sandboxes/"+id, nil)
	if st, _ := ev.http(t, http.MethodGet, "/health", nil, ""); st != http.StatusBadGateway {
		t.Fatalf("envd of a killed sandbox: %d, want 502", st)
	}
	assertNoContainer(t, s.Docker, id)

	// The timeout kills: a sandbox of 2 seconds is gone without a call.
	data = a.want(http.StatusCreated, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 2})
	var short sandboxAnswer
	_ = json.Unmarshal(data, &short)
	deadline = time.Now().Add(time.Minute)
	for {
		st, _ := a.do(http.MethodGet, "/sandboxes/"+short.SandboxID, nil)
		if st == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sandbox past its timeout still answers %d", st)
		}
		time.Sleep(250 * time.Millisecond)
	}
	assertNoContainer(t, s.Docker, short.SandboxID)

	seen := map[string]bool{}
	for _, x := range s.Checker.Seen() {
		f := strings.Fields(x)
		seen[f[0]+" "+f[1]+" "+f[3]] = true
	}
	t.Logf("checked %d exchanges against the spec", len(s.Checker.Seen()))
	for _, want := range []string{"control-plane POST 201", "control-plane GET 200", "control-plane DELETE 204", "envd GET 200", "envd POST 200", "envd-rpc POST 200"} {
		if !seen[want] {
			t.Errorf("no %q exchange was checked: %v", want, seen)
		}
	}
}

func assertNoContainer(t *testing.T, cli *dockerclient.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		list, err := cli.ContainerList(ctx, dockerclient.ContainerListOptions{All: true, Filters: dockerclient.Filters{}.Add("label", fmt.Sprintf("open-bot.e2b-emulator.sandbox=%s", id))})
		if err != nil {
			t.Fatalf("sandbox %s: its container is still listed: %v", id, err)
		}
		if len(list.Items) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

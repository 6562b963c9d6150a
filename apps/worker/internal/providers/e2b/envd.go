package e2b

// envd, the daemon inside every sandbox: processes through its Connect-RPC
// Process service (the client generated from the vendor's process.proto,
// JSON codec as the SDKs use), files through its HTTP /files
// (spec/envd/envd.yaml). Every request carries the sandbox's
// X-Access-Token; the Linux user is picked with Basic "user:".

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
	"strconv"
	"sync"

	"connectrpc.com/connect"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process/processconnect"
)

// envdPort is where envd listens in every sandbox.
const envdPort = 49983

// router reaches one port of one sandbox: either the sandbox's own host
// ({port}-{id}.{domain}, the URL says so) or E2B_SANDBOX_URL with the
// E2b-Sandbox-Id/E2b-Sandbox-Port headers naming the target; set adds the
// sandbox's tokens. It never logs.
type router struct {
	next      http.RoundTripper
	sandboxID string
	port      int
	byHeader  bool
	set       http.Header
	// use, when set, is called as a request starts and as its answer's
	// body closes: envd calls (exec, files, a desktop's observe and act)
	// are use of the sandbox for the timeout refresher.
	use func()
}

func (r *router) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if r.byHeader {
		req.Header.Set("E2b-Sandbox-Id", r.sandboxID)
		req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(r.port))
	}
	for k, vs := range r.set {
		req.Header[k] = vs
	}
	if r.use == nil {
		return r.next.RoundTrip(req)
	}
	r.use()
	resp, err := r.next.RoundTrip(req)
	if err == nil && resp.Body != nil {
		resp.Body = &usedBody{ReadCloser: resp.Body, use: r.use}
	}
	return resp, err
}

// usedBody calls use when the answer is read to its end and closed (a
// process stream's end counts as use, however long it ran).
type usedBody struct {
	io.ReadCloser
	use  func()
	once sync.Once
}

func (b *usedBody) Close() error {
	b.once.Do(b.use)
	return b.ReadCloser.Close()
}

// envdClient talks to one sandbox's envd.
type envdClient struct {
	base string
	hc   *http.Client
	proc processconnect.ProcessClient
}

func newEnvd(base string, rt *router) *envdClient {
	hc := &http.Client{Transport: rt}
	return &envdClient{
		base: base, hc: hc,
		proc: processconnect.NewProcessClient(hc, base, connect.WithProtoJSON()),
	}
}

func basicUser(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// result is what a finished process left.
type result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	Status   string
}

// run starts cmd as user and waits for its end, collecting its output
// (each stream capped at 1 MiB).
func (e *envdClient) run(ctx context.Context, user, cmd string, args []string, env map[string]string) (result, error) {
	req := connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: cmd, Args: args, Envs: env},
		Stdin:   ptrBool(false),
	})
	req.Header().Set("Authorization", basicUser(user))
	stream, err := e.proc.Start(ctx, req)
	if err != nil {
		return result{}, fmt.Errorf("envd: start %s: %w", cmd, err)
	}
	defer stream.Close()
	var r result
	ended := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetData() != nil:
			d := ev.GetData()
			if b := d.GetStdout(); len(b) > 0 && len(r.Stdout) < 1<<20 {
				r.Stdout = append(r.Stdout, b...)
			}
			if b := d.GetStderr(); len(b) > 0 && len(r.Stderr) < 1<<20 {
				r.Stderr = append(r.Stderr, b...)
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			r.ExitCode, r.Status, ended = int(end.GetExitCode()), end.GetStatus(), true
			if end.Error != nil && *end.Error != "" && r.Status == "" {
				r.Status = *end.Error
			}
		}
	}
	if err := stream.Err(); err != nil {
		return r, fmt.Errorf("envd: %s: %w", cmd, err)
	}
	if !ended {
		return r, fmt.Errorf("envd: %s: the stream ended before the process did", cmd)
	}
	return r, nil
}

// start starts cmd as user, tagged, in the background: it returns once
// envd reports the pid and leaves the process running (envd owns it, not
// this stream).
func (e *envdClient) start(ctx context.Context, user, tag, cmd string, args []string, env map[string]string) (uint32, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: cmd, Args: args, Envs: env},
		Tag:     &tag,
		Stdin:   ptrBool(false),
	})
	req.Header().Set("Authorization", basicUser(user))
	stream, err := e.proc.Start(sctx, req)
	if err != nil {
		return 0, fmt.Errorf("envd: start %s: %w", cmd, err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if s := ev.GetStart(); s != nil {
			return s.GetPid(), nil
		}
		if end := ev.GetEnd(); end != nil {
			return 0, fmt.Errorf("envd: %s exited at once (%s, code %d)", cmd, end.GetStatus(), end.GetExitCode())
		}
	}
	if err := stream.Err(); err != nil {
		return 0, fmt.Errorf("envd: start %s: %w", cmd, err)
	}
	return 0, fmt.Errorf("envd: start %s: the stream ended without a start event", cmd)
}

// list returns the processes envd started.
func (e *envdClient) list(ctx context.Context, user string) ([]*process.ProcessInfo, error) {
	req := connect.NewRequest(&process.ListRequest{})
	req.Header().Set("Authorization", basicUser(user))
	r, err := e.proc.List(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("envd: list processes: %w", err)
	}
	return r.Msg.GetProcesses(), nil
}

// signal sends sig to the process tagged tag.
func (e *envdClient) signal(ctx context.Context, user, tag string, sig process.Signal) error {
	req := connect.NewRequest(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}},
		Signal:  sig,
	})
	req.Header().Set("Authorization", basicUser(user))
	_, err := e.proc.SendSignal(ctx, req)
	if err != nil {
		return fmt.Errorf("envd: signal %s: %w", tag, err)
	}
	return nil
}

// writeFile uploads data to path as user (POST /files, multipart), making
// the parent directories.
func (e *envdClient) writeFile(ctx context.Context, user, path string, data []byte) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", path)
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	q := url.Values{"path": {path}, "username": {user}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/files?"+q.Encode(), &body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", basicUser(user))
	resp, err := e.hc.Do(req)
	if err != nil {
		return fmt.Errorf("envd: write %s: %w", path, unwrapURL(err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envd: write %s: %d %s", path, resp.StatusCode, envdMessage(b))
	}
	return nil
}

// readFile downloads path as user (GET /files), at most max bytes.
func (e *envdClient) readFile(ctx context.Context, user, path string, max int64) ([]byte, error) {
	q := url.Values{"path": {path}, "username": {user}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/files?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", basicUser(user))
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envd: read %s: %w", path, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("envd: read %s: %w", path, errFileNotFound)
		}
		return nil, fmt.Errorf("envd: read %s: %d %s", path, resp.StatusCode, envdMessage(b))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("envd: read %s: larger than %d bytes", path, max)
	}
	return b, nil
}

var errFileNotFound = errors.New("no such file")

func envdMessage(b []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		return e.Message
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func ptrBool(b bool) *bool { return &b }

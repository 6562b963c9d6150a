package deploytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/testenv"
)

func workerImageTag() string {
	if s := os.Getenv("WORKER_IMAGE_TAG"); s != "" {
		return s
	}
	return "open-bot/worker:dev"
}

// computerImage is the computers' image (the worker's WORKER_IMAGE).
func computerImage() string {
	if s := os.Getenv("WORKER_IMAGE"); s != "" {
		return s
	}
	return "open-bot/computer:dev"
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dockerSocket is the engine's unix socket on this host, mounted into the
// worker's container.
func dockerSocket(t *testing.T) string {
	h := os.Getenv("DOCKER_HOST")
	if h == "" {
		return "/var/run/docker.sock"
	}
	p, ok := strings.CutPrefix(h, "unix://")
	if !ok {
		testenv.Unavailable(t, "DOCKER_HOST=%s is not a unix socket this host can mount into the worker's container", h)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// api is the worker's HTTP API as a caller sees it.
type api struct {
	base, token, capability string
	hc                      *http.Client
}

func (a *api) do(t *testing.T, method, path string, body any, want int) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if a.capability != "" {
		req.Header.Set("X-Computer-Capability", a.capability)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: not JSON: %v: %s", method, path, err, raw)
		}
	}
	return out
}

// TestWorkerImageRunsAComputer: `make worker-image`'s script builds the
// image (cached), and the worker in it, run the way docs/operations.md says
// (docker provider: the engine's socket, host network, the machines
// directory at the same path as on the host, the token in a root-only
// file), makes a computer over its HTTP API whose botd runs a command as
// the bot, then destroys it; the worker's log and its container's
// configuration carry neither the worker token nor the capability.
func TestWorkerImageRunsAComputer(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "root (the worker's machines directory and token files are root's, as under make run)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Unavailable(t, "docker not on PATH (scripts/docker-engine.sh start installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := run(ctx, "docker", "info"); err != nil {
		testenv.Unavailable(t, "no Docker engine answers (scripts/docker-engine.sh start): %v", err)
	}
	if _, err := run(ctx, "docker", "image", "inspect", computerImage()); err != nil {
		testenv.Unavailable(t, "the computer image %s is missing (make image; make test builds it first)", computerImage())
	}
	sock := dockerSocket(t)
	root := testenv.RepoRoot(t)

	start := time.Now()
	build := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "build-worker-image.sh"))
	build.Dir = root
	build.Env = append(os.Environ(), "WORKER_IMAGE_TAG="+workerImageTag())
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make worker-image failed: %v\n%s", err, out)
	}
	t.Logf("make worker-image: %s", time.Since(start).Round(100*time.Millisecond))

	// The image: the worker as its entrypoint, root by default (the docker
	// provider's token files must be root's for botd).
	cfg, err := run(ctx, "docker", "image", "inspect", "--format", "{{json .Config.Entrypoint}} {{json .Config.Cmd}} user={{.Config.User}}", workerImageTag())
	if err != nil {
		t.Fatal(err)
	}
	if want := `["/usr/local/bin/worker"] ["serve"] user=`; cfg != want {
		t.Fatalf("image config %q, want %q", cfg, want)
	}

	// Everything the worker keeps, under one directory the test removes.
	// The machines directory is mounted at the same path: the engine
	// bind-mounts the homes and token files the worker makes there by their
	// host paths.
	dir := t.TempDir()
	data, machines, secrets := filepath.Join(dir, "data"), filepath.Join(dir, "machines"), filepath.Join(dir, "secrets")
	for _, d := range []string{data, machines, secrets} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	token := randHex(24)
	tokenFile := filepath.Join(secrets, "worker-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	name := "openbot-deploytest-" + randHex(4)
	var computerID string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			out, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", "60", name).CombinedOutput()
			t.Logf("the worker's log (last 60 lines):\n%s", redact(string(out), token))
		}
		_, _ = run(ctx, "docker", "rm", "-f", name)
		if computerID != "" {
			// A destroy that did not happen: the computer's containers go.
			ids, _ := run(ctx, "docker", "ps", "-aq", "--filter", "label=dev.open-bot.computer="+computerID)
			for _, id := range strings.Fields(ids) {
				_, _ = run(ctx, "docker", "rm", "-f", "-v", id)
			}
		}
	})
	args := []string{"run", "-d", "--name", name, "--label", "open-bot.deploytest=1", "--network", "host",
		"-v", sock + ":/var/run/docker.sock",
		"-v", data + ":/var/lib/open-bot/worker",
		"-v", machines + ":" + machines,
		"-v", tokenFile + ":/run/secrets/worker-token:ro",
		"-e", "WORKER_TOKEN_FILE=/run/secrets/worker-token",
		"-e", "WORKER_LISTEN=127.0.0.1:" + strconv.Itoa(port),
		"-e", "WORKER_PROVIDER=docker",
		"-e", "WORKER_IMAGE=" + computerImage(),
		"-e", "WORKER_MACHINES_DIR=" + machines,
		"-e", "COMPUTER_IDLE_MINUTES=0",
		workerImageTag()}
	if _, err := run(ctx, "docker", args...); err != nil {
		t.Fatal(err)
	}

	a := &api{base: "http://127.0.0.1:" + strconv.Itoa(port), token: token, hc: &http.Client{Timeout: 3 * time.Minute}}
	up := time.Now()
	for deadline := time.Now().Add(90 * time.Second); ; {
		resp, err := a.hc.Get(a.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker in %s did not answer /healthz within 90s (last error: %v)", name, err)
		}
		if st, _ := run(ctx, "docker", "inspect", "--format", "{{.State.Status}}", name); st == "exited" {
			t.Fatalf("the worker's container exited")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("worker container up: %s", time.Since(up).Round(10*time.Millisecond))
	// The operator's actions run inside, through the operator socket in
	// DATA_DIR (the link is a credential: not printed).
	if out, err := run(ctx, "docker", "exec", name, "/usr/local/bin/worker", "dashboard"); err != nil || !strings.Contains(out, "/dashboard/login?code=") {
		t.Fatalf("worker dashboard inside the container: %v (%d bytes of output, no sign-in link)", err, len(out))
	}

	made := a.do(t, "POST", "/v1/computers", map[string]any{"scope": map[string]any{"session": "deploytest-" + randHex(4)}}, http.StatusCreated)
	comp, _ := made["computer"].(map[string]any)
	computerID, _ = comp["id"].(string)
	a.capability, _ = made["capability"].(string)
	if computerID == "" || a.capability == "" {
		t.Fatalf("create answered no id or capability: %v", comp)
	}
	if comp["provider"] != "docker" {
		t.Fatalf("the computer's provider is %v, want docker", comp["provider"])
	}
	for deadline := time.Now().Add(5 * time.Minute); ; {
		c, _ := a.do(t, "GET", "/v1/computers/"+computerID, nil, http.StatusOK)["computer"].(map[string]any)
		if c["state"] == "running" {
			break
		}
		if c["state"] == "error" || time.Now().After(deadline) {
			t.Fatalf("computer %s: state %v (%v), want running", computerID, c["state"], c["lastError"])
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("computer %s running: %s after the create", computerID, time.Since(up).Round(10*time.Millisecond))
	// Its machine is a container of the computer image on this engine.
	img, err := run(ctx, "docker", "ps", "--filter", "label=dev.open-bot.computer="+computerID, "--format", "{{.Image}}")
	if err != nil || img != computerImage() {
		t.Fatalf("the computer's container: image %q (%v), want one running %s", img, err, computerImage())
	}

	a.do(t, "POST", "/v1/computers/"+computerID+"/bots", map[string]any{"id": "alice"}, http.StatusCreated)
	call := time.Now()
	res := a.do(t, "POST", "/v1/computers/"+computerID+"/tools/shell",
		map[string]any{"botId": "alice", "args": map[string]any{"argv": []string{"id", "-un"}}}, http.StatusOK)
	t.Logf("shell tool call: %s", time.Since(call).Round(time.Millisecond))
	if res["success"] != true {
		t.Fatalf("shell tool call failed: %v", res)
	}
	var stdout string
	if content, _ := res["content"].([]any); len(content) > 0 {
		first, _ := content[0].(map[string]any)
		text, _ := first["text"].(string)
		var out struct {
			ExitCode int    `json:"exitCode"`
			Stdout   string `json:"stdout"`
		}
		if err := json.Unmarshal([]byte(text), &out); err != nil || out.ExitCode != 0 {
			t.Fatalf("shell tool call: %q (%v)", text, err)
		}
		stdout = out.Stdout
	}
	if stdout != "bot\n" {
		t.Fatalf("shell tool call ran as %q, want botd's bot user", stdout)
	}

	a.do(t, "DELETE", "/v1/computers/"+computerID, nil, http.StatusOK)
	if ids, err := run(ctx, "docker", "ps", "-aq", "--filter", "label=dev.open-bot.computer="+computerID); err != nil || ids != "" {
		t.Fatalf("after the destroy the computer's containers are %q (%v), want none", ids, err)
	}

	// No secret in the worker's log or in its container's configuration
	// (`docker inspect` shows env and mounts to anyone with the engine).
	logs, err := exec.CommandContext(ctx, "docker", "logs", name).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "serving http://127.0.0.1:"+strconv.Itoa(port)) || !strings.Contains(string(logs), "/v1/computers/"+computerID+"/tools/shell") {
		t.Fatalf("the worker's log lacks its start or the tool call (the check below would be vacuous):\n%s", redact(string(logs), token))
	}
	inspect, err := run(ctx, "docker", "inspect", name)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"log": string(logs), "docker inspect": inspect} {
		for secret, v := range map[string]string{"worker token": token, "capability": a.capability} {
			if strings.Contains(s, v) {
				t.Errorf("the worker container's %s carries the %s", what, secret)
			}
		}
	}
	t.Logf("whole test: %s", time.Since(start).Round(100*time.Millisecond))
}

// redact hides the token in output the test prints.
func redact(s, token string) string {
	return strings.ReplaceAll(s, token, fmt.Sprintf("<token %d chars>", len(token)))
}

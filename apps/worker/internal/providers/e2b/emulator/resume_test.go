package emulator_test

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
)

// TestConnectDuringTimeoutStop: a connect that arrives while the timeout's
// stop of an autoPause sandbox is under way waits for the stop to finish and
// then starts the container again, so the resumed sandbox keeps running.
// The stop is held open by stopping the container's PID 1 from the host
// (SIGSTOP: the engine's SIGTERM stays pending until its SIGKILL after the
// stop's grace), so the connect lands inside it every time. Without the
// sandbox's lock the connect "resumed" the container still going down: it
// answered 201 while the old PID 1 was still the container's, which the
// stop then killed.
func TestConnectDuringTimeoutStop(t *testing.T) {
	s := emutest.Start(t, nil, nil)
	a := &api{t: t, s: s, hc: s.Client(), key: s.APIKey}
	var sb sandboxAnswer
	data := a.want(http.StatusCreated, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 600, "autoPause": true})
	if err := json.Unmarshal(data, &sb); err != nil {
		t.Fatalf("create answer %s: %v", redact(data), err)
	}
	id := sb.SandboxID
	container := "e2b-emu-" + id
	pid1 := func() string {
		t.Helper()
		out, err := exec.Command("docker", "inspect", "--format", "{{.State.Running}} {{.State.Pid}}", container).CombinedOutput()
		if err != nil {
			t.Fatalf("docker inspect: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	before := pid1()
	running, pid, _ := strings.Cut(before, " ")
	if running != "true" {
		t.Fatalf("the new sandbox's container: %s", before)
	}
	if n, err := strconv.Atoi(pid); err != nil || n <= 0 {
		t.Fatalf("its PID 1 on the host: %q", pid)
	}
	if out, err := exec.Command("kill", "-STOP", pid).CombinedOutput(); err != nil {
		t.Fatalf("kill -STOP %s: %v: %s", pid, err, out)
	}
	// The timeout fires now; the sandbox reads paused once its stop began.
	a.want(http.StatusNoContent, http.MethodPost, "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 0})
	deadline := time.Now().Add(time.Minute)
	for {
		var d sandboxAnswer
		_ = json.Unmarshal(a.want(http.StatusOK, http.MethodGet, "/sandboxes/"+id, nil), &d)
		if d.State == "paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the timed-out sandbox never read paused: %+v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.want(http.StatusCreated, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 600})
	if after := pid1(); after == before {
		t.Fatalf("connect answered 201 (resumed) while the container was still the one going down (PID 1 %s)", pid)
	} else if !strings.HasPrefix(after, "true ") {
		t.Fatalf("the resumed sandbox's container is not running: %s", after)
	}
	ev := newEnvd(s, id, sb.EnvdAccessToken, "", false)
	if r := ev.run(t, "/bin/echo", "alive"); r.stdout != "alive\n" {
		t.Fatalf("a command in the resumed sandbox: %+v", r)
	}
}

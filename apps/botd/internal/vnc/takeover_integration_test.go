package vnc

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// sinkTerminal opens a maximized terminal on screen id whose shell appends
// every typed line to a file, and returns the file's path.
func (e *itEnv) sinkTerminal(t *testing.T, id string) string {
	t.Helper()
	testenv.RequireTools(t, "xfce4-terminal")
	dir, err := os.MkdirTemp("", "vnc-sink-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777))
	t.Cleanup(func() { os.RemoveAll(dir) })
	out := filepath.Join(dir, "typed.txt")
	env, ok := e.m.Env(id)
	require.True(t, ok)
	u := e.desktop
	var log bytes.Buffer
	p, err := runner.Exec{}.Start(runner.Spec{
		Argv: []string{"xfce4-terminal", "--disable-server", "--maximize", "--title", "sink-" + id, "-x", "sh", "-c", "stty -echoctl; cat >> " + out},
		User: &u, Env: env, Stdout: &log, Stderr: &log, Dir: dir,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.SignalGroup(syscall.SIGKILL); _, _ = p.Wait() })
	require.Eventually(t, func() bool {
		env, _ := e.m.Env(id)
		var o bytes.Buffer
		// --onlyvisible: mapped and viewable, so a click lands on it.
		q, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"xdotool", "search", "--onlyvisible", "--name", "sink-" + id}, User: &u, Env: env, Stdout: &o, Dir: "/"})
		if err != nil {
			return false
		}
		code, _ := q.Wait()
		return code == 0 && strings.TrimSpace(o.String()) != ""
	}, 60*time.Second, 100*time.Millisecond, "terminal window: %s", &log)
	return out
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

type leaseResp struct {
	LeaseID   string    `json:"leaseId"`
	Kind      string    `json:"kind"`
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expiresAt"`
}

type actOutcome struct {
	status  int
	env     shared.ErrorEnvelope
	elapsed time.Duration
}

func (e *itEnv) act(t *testing.T, id, leaseID string, actions ...map[string]any) actOutcome {
	t.Helper()
	start := time.Now()
	var env shared.ErrorEnvelope
	st := e.call(t, "POST", "/screens/"+id+"/act", map[string]any{"leaseId": leaseID, "actions": actions}, &env)
	return actOutcome{status: st, env: env, elapsed: time.Since(start)}
}

// TestIntegrationTakeover is the takeover sequence at botd's level: the
// agent acts; a user takes the screen through a control link, which cuts
// the agent's in-flight action off with user_has_control; the human types
// through the link; the user releases; the agent takes its lease again
// and continues.
func TestIntegrationTakeover(t *testing.T) {
	e := newIT(t, 4)
	e.start(t, "tk")
	out := e.sinkTerminal(t, "tk")

	// 1. The agent acts.
	var agent leaseResp
	require.Equal(t, http.StatusOK, e.call(t, "POST", "/screens/tk/lease", map[string]any{"kind": "agent", "holder": "run-1", "ttlSeconds": 120}, &agent))
	r := e.act(t, "tk", agent.LeaseID,
		map[string]any{"type": "click", "x": 640, "y": 400, "button": "left"},
		map[string]any{"type": "type", "text": "agent one"},
		map[string]any{"type": "keypress", "keys": []string{"enter"}})
	require.Equal(t, http.StatusOK, r.status, "%+v", r.env)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, "agent one\n", readFile(out), "file") }, 10*time.Second, 50*time.Millisecond)

	// A control link opened before taking control only watches: its keys
	// are dropped.
	ctl := e.mint(t, "tk", ModeControl, "alice", 300)
	cc := e.viewerRFB(t, ctl.VNCPath, nil)
	require.NoError(t, cc.typeText("dropped\n"))
	require.NoError(t, cc.request(false, 0, 0, 8, 8))
	_, err := cc.readUpdate(10 * time.Second)
	require.NoError(t, err)

	// 2. The agent starts a long action; the user takes control mid-way.
	// The batch moves the pointer first: once it is there, the wait is in
	// flight (an action refused before it began must not pass as cut off).
	done := make(chan actOutcome, 1)
	long := []map[string]any{{"type": "move", "x": 321, "y": 123}}
	for range 6 { // a minute of waiting, 10 s (the most) at a time
		long = append(long, map[string]any{"type": "wait", "ms": shared.MaxWaitMs})
	}
	go func() { done <- e.act(t, "tk", agent.LeaseID, long...) }()
	require.Eventually(t, func() bool { x, y := e.pointer(t, "tk"); return x == 321 && y == 123 },
		60*time.Second, 20*time.Millisecond, "the agent's batch never began")
	var st ViewerState
	require.Equal(t, http.StatusOK, e.callAuth(t, "GET", "/screens/tk/viewer-state", ctl.Token, nil, &st))
	require.False(t, st.InControl)
	require.Equal(t, "agent", st.Lease.Kind)
	took := time.Now()
	var ul shared.LeaseInfo
	require.Equal(t, http.StatusOK, e.callAuth(t, "POST", "/screens/tk/viewer-lease", ctl.Token, nil, &ul))
	require.Equal(t, "user", ul.Kind)
	require.Equal(t, "alice", ul.Holder)
	var cut actOutcome
	select {
	case cut = <-done:
	case <-time.After(45 * time.Second): // liveness; left alone the wait runs 60 s and succeeds
		t.Fatal("the agent's wait was not cut off")
	}
	require.Equal(t, http.StatusConflict, cut.status)
	require.Equal(t, shared.CodeUserHasControl, cut.env.Error.Code)
	t.Logf("agent's in-flight wait failed %v after the takeover", time.Since(took).Round(time.Millisecond))
	// Its next action is refused too.
	r = e.act(t, "tk", agent.LeaseID, map[string]any{"type": "type", "text": "nope"})
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, shared.CodeUserHasControl, r.env.Error.Code)

	// 3. The human types through the control link.
	require.Equal(t, http.StatusOK, e.callAuth(t, "GET", "/screens/tk/viewer-state", ctl.Token, nil, &st))
	require.True(t, st.InControl)
	require.NoError(t, cc.typeText("human two\n"))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, "agent one\nhuman two\n", readFile(out), "file") }, 10*time.Second, 50*time.Millisecond)

	// 4. The user releases: the control connection is closed at once.
	released := time.Now()
	require.Equal(t, http.StatusOK, e.callAuth(t, "DELETE", "/screens/tk/viewer-lease", ctl.Token, nil, nil))
	code, reason, err := closeStatus(cc, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, CodeControlEnded, code, reason)
	t.Logf("control connection closed %v after the release", time.Since(released).Round(time.Millisecond))
	require.Nil(t, e.m.Leases().Current("tk"))

	// 5. The agent takes its lease again and continues.
	var again leaseResp
	require.Equal(t, http.StatusOK, e.call(t, "POST", "/screens/tk/lease", map[string]any{"kind": "agent", "holder": "run-1", "ttlSeconds": 120}, &again))
	require.NotEqual(t, agent.LeaseID, again.LeaseID)
	r = e.act(t, "tk", again.LeaseID,
		map[string]any{"type": "type", "text": "agent three"},
		map[string]any{"type": "keypress", "keys": []string{"enter"}})
	require.Equal(t, http.StatusOK, r.status, "%+v", r.env)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "agent one\nhuman two\nagent three\n", readFile(out), "file")
	}, 10*time.Second, 50*time.Millisecond)
	require.NotContains(t, readFile(out), "dropped")
}

// TestIntegrationControlEndsWithLease: input renews the user lease; when
// it expires, input stops and the control connection is closed; a lease of
// another holder gives this link no control.
func TestIntegrationControlEndsWithLease(t *testing.T) {
	e := newIT(t, 5)
	e.start(t, "ex")
	e.xdotool(t, "ex", "mousemove", "10", "10")
	var bl leaseResp
	require.Equal(t, http.StatusOK, e.call(t, "POST", "/screens/ex/lease", map[string]any{"kind": "user", "holder": "bob", "ttlSeconds": 5}, &bl))

	// A bearer control connection of another holder delivers nothing.
	carol := e.viewerRFB(t, "/screens/ex/vnc?mode=control&holder=carol", http.Header{"Authorization": {"Bearer " + testToken}})
	require.NoError(t, carol.pointer(0, 500, 500))
	require.NoError(t, carol.request(false, 0, 0, 8, 8))
	_, err := carol.readUpdate(10 * time.Second)
	require.NoError(t, err)
	x, y := e.pointer(t, "ex")
	require.Equal(t, [2]int{10, 10}, [2]int{x, y})

	// bob's link: moving the pointer keeps the 5 s lease (input renews it
	// at most once a second). bob moves at a person's pace until well past
	// the lease's first expiry; it must hold all along.
	link := e.mint(t, "ex", ModeControl, "bob", 120)
	bob := e.viewerRFB(t, link.VNCPath, nil)
	first := e.m.Leases().Current("ex")
	require.NotNil(t, first)
	expires, lastX, renewals := first.ExpiresAt, 0, 0
	for i := 0; time.Until(first.ExpiresAt) > -2*time.Second; i++ {
		lastX = 100 + i%100
		require.NoError(t, bob.pointer(0, lastX, 100))
		require.Eventually(t, func() bool { x, _ := e.pointer(t, "ex"); return x == lastX }, 30*time.Second, 20*time.Millisecond, "move %d", i)
		cur := e.m.Leases().Current("ex")
		require.NotNil(t, cur, "the lease ended while bob was moving (move %d)", i)
		if cur.ExpiresAt.After(expires) {
			renewals++
			expires = cur.ExpiresAt
		}
		time.Sleep(200 * time.Millisecond) // a person's pace, not a wait for state
	}
	require.Positive(t, renewals)
	require.NotNil(t, e.m.Leases().Current("ex"), "input renewed the lease past its first expiry")

	// Idle: the lease expires, and the connection is closed with a reason.
	start := time.Now()
	code, reason, err := closeStatus(bob, 60*time.Second)
	require.NoError(t, err)
	require.Equal(t, CodeControlEnded, code, reason)
	t.Logf("closed %v after the last input (TTL 5s)", time.Since(start).Round(time.Millisecond))
	require.Nil(t, e.m.Leases().Current("ex"))

	// Without the lease, bob's new connection only watches.
	bob2 := e.viewerRFB(t, link.VNCPath, nil)
	require.NoError(t, bob2.pointer(0, 700, 700))
	require.NoError(t, bob2.request(false, 0, 0, 8, 8))
	_, err = bob2.readUpdate(10 * time.Second)
	require.NoError(t, err)
	x, y = e.pointer(t, "ex")
	require.Equal(t, [2]int{lastX, 100}, [2]int{x, y}, fmt.Sprint("moved without a lease"))
}

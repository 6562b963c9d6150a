package desktop

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/rfb"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// portCounter counts the port URLs a machine asks its backend for.
type portCounter struct {
	Backend
	mu    sync.Mutex
	ports map[int]int
}

func (p *portCounter) PortURL(ctx context.Context, port int) (string, *http.Client, error) {
	p.mu.Lock()
	p.ports[port]++
	p.mu.Unlock()
	return p.Backend.PortURL(ctx, port)
}

func (p *portCounter) count(port int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ports[port]
}

// viewer connects an RFB client to screen "a" through link.
func viewer(t *testing.T, m *Machine, link client.ViewerLink) *rfb.Client {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	ws, err := m.DialVNC(ctx, "a", link)
	require.NoError(t, err)
	t.Cleanup(func() { ws.CloseNow() })
	c, err := rfb.Handshake(ctx, websocket.NetConn(context.Background(), ws, websocket.MessageBinary), rfb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHeldStreamViewers: with a held stream, view and control links are
// served from the worker's one session to the screen (E2B's desktop
// stand-in in Docker): every viewer sees the screen the screenshot
// command sees; a view link's input and a control link's without the
// person's lease never reach X; the person's control link moves the
// pointer and closes when the lease ends; no viewer dials the sandbox
// (the view port is never asked for, the control port once, by the held
// stream); and a screen serves at most MaxHeldViewers at once.
func TestHeldStreamViewers(t *testing.T) {
	cli, id := sandbox(t, 1)
	pc := &portCounter{Backend: NewDockerBackend(cli, id, 1), ports: map[int]int{}}
	m, err := New(Options{Backend: pc, HeldStream: true})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	ctx := ctxFor(t, 5*time.Minute)
	_, err = m.StartScreen(ctx, "a")
	require.NoError(t, err)
	require.Eventually(t, func() bool { st, _ := m.StreamState("a"); return st == rfb.StateLive }, 60*time.Second, 100*time.Millisecond, "the held stream goes live")

	viewLink, err := m.ViewerToken(ctx, "a", "view", "", time.Minute)
	require.NoError(t, err)
	view := viewer(t, m, viewLink)
	require.Eventually(t, func() bool {
		img, _ := view.Snapshot(nil)
		return meanDiff(t, img, scrot(t, m)) < 8
	}, time.Minute, 500*time.Millisecond, "the view link shows the screen")

	// Dropped: the view link's input, and a control link's whose holder
	// has no lease (served as a view).
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"xdotool", "mousemove", "10", "10"}, User: "user", Env: m.displayEnv(0)})
	require.NoError(t, err)
	require.Equal(t, 0, r.ExitCode, "%s", r.Stderr)
	ctlNoLease, err := m.ViewerToken(ctx, "a", "control", "alice", time.Minute)
	require.NoError(t, err)
	early := viewer(t, m, ctlNoLease)
	require.NoError(t, view.Pointer(500, 500, 0))
	require.NoError(t, early.Pointer(600, 600, 0))

	person, err := m.AcquireLease(ctx, "a", KindUser, "alice", time.Minute)
	require.NoError(t, err)
	require.NoError(t, early.Pointer(610, 610, 0), "still carried (and dropped): it was served as a view")
	time.Sleep(time.Second)
	require.Equal(t, "x:10 y:10", mouse(t, m, ":0"), "no view's input reached X")

	ctlLink, err := m.ViewerToken(ctx, "a", "control", "alice", time.Minute)
	require.NoError(t, err)
	ctl := viewer(t, m, ctlLink)
	require.NoError(t, ctl.Pointer(77, 66, 0))
	require.Eventually(t, func() bool { return mouse(t, m, ":0") == "x:77 y:66" }, 10*time.Second, 100*time.Millisecond, "the person's control link moves the pointer")
	require.NoError(t, m.ReleaseLease(ctx, "a", person.LeaseID))
	select {
	case <-ctl.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the control link's session outlived the lease")
	}
	select {
	case <-view.Done():
		t.Fatalf("the view link ended with the person's lease: %v", view.Err())
	default:
	}
	require.Equal(t, 0, pc.count(m.viewPort(0)), "no viewer dialled the sandbox's view port")
	require.Equal(t, 1, pc.count(m.ctlPort(0)), "the control port was dialled once, by the held stream")

	// The viewer bound: two are open (the control link's place was
	// freed); up to MaxHeldViewers in all.
	require.Eventually(t, func() bool { return m.viewers.Load() == 2 }, 10*time.Second, 50*time.Millisecond, "the ended control link's place is freed")
	var extra []*websocket.Conn
	for i := 2; i < MaxHeldViewers; i++ {
		ws, err := m.DialVNC(ctx, "a", viewLink)
		require.NoError(t, err, "viewer %d", i+1)
		extra = append(extra, ws)
	}
	_, err = m.DialVNC(ctx, "a", viewLink)
	requireCode(t, err, shared.CodeBadRequest)
	for _, ws := range extra {
		ws.CloseNow()
	}
	require.Eventually(t, func() bool {
		ws, err := m.DialVNC(ctx, "a", viewLink)
		if err != nil {
			return false
		}
		ws.CloseNow()
		return true
	}, 10*time.Second, 100*time.Millisecond, "closed viewers free their places")
}

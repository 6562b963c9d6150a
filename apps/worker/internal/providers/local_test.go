package providers

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared/client"
)

// A port taken by someone else never stops a computer: Provision skips the
// slot, and a start whose ports were taken meanwhile moves to a free slot.
func TestLocalPortTaken(t *testing.T) {
	l := testLocal(t)
	ctx := testCtx(t, 5*time.Minute)

	l.mu.Lock()
	k, err := l.freeSlotLocked("")
	l.mu.Unlock()
	require.NoError(t, err)
	squat, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(l.layout(k).api))
	require.NoError(t, err)
	defer squat.Close()

	spec := Spec{ComputerID: "port-taken", BotdToken: testToken()}
	ref, err := l.Provision(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Destroy(context.Background(), ref) })
	meta, err := l.readMeta(ref)
	require.NoError(t, err)
	require.NotEqual(t, k, meta.Slot, "provision must not pick a slot whose port is taken")

	// Now someone takes the provisioned slot's SOCKS port before the start.
	squat2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(l.layout(meta.Slot).socks))
	require.NoError(t, err)
	defer squat2.Close()
	m, err := l.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"echo", "moved"}})
	require.NoError(t, err)
	require.Equal(t, "moved\n", r.Stdout)
	moved, err := l.readMeta(ref)
	require.NoError(t, err)
	require.NotEqual(t, meta.Slot, moved.Slot)
	u, err := url.Parse(localBotd(t, l, ref).BaseURL())
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(l.layout(moved.Slot).api), u.Port())
}

// A botd that exits during start: the error carries botd's own reason,
// well before the ready deadline.
func TestLocalBotdExitsWithReason(t *testing.T) {
	requireHost(t)
	l, err := NewLocal(LocalOptions{
		DataDir: filepath.Join(tmpRoot, "data-exits"), BotdBin: testBotd(t),
		DisplayBase: testDisplayBase, PortBase: testPortBase, Slots: testSlots,
		Env:          []string{"MAX_SCREENS=99"}, // botd refuses this
		ReadyTimeout: 2 * time.Minute,
	})
	require.NoError(t, err)
	defer l.Close(context.Background())
	ctx := testCtx(t, time.Minute)
	spec := Spec{ComputerID: "exits", BotdToken: testToken()}
	ref, err := l.Provision(ctx, spec)
	require.NoError(t, err)
	start := time.Now()
	_, err = l.Reconnect(ctx, ref, spec)
	require.Error(t, err)
	require.Contains(t, err.Error(), "MAX_SCREENS: want 1..32")
	require.NotContains(t, err.Error(), spec.BotdToken)
	require.Less(t, time.Since(start), time.Minute, "an exit is reported when it happens, not at the deadline")
	require.NoError(t, l.Destroy(ctx, ref))
}

// A botd that never answers: after the deadline, an error that says so.
func TestLocalBotdNeverHealthy(t *testing.T) {
	requireHost(t)
	dir := filepath.Join(tmpRoot, "hang")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	bin := filepath.Join(dir, "botd-hangs")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho 'waiting for nothing' >&2\nexec sleep 600\n"), 0o755))
	l, err := NewLocal(LocalOptions{
		DataDir: filepath.Join(tmpRoot, "data-hang"), BotdBin: bin,
		DisplayBase: testDisplayBase, PortBase: testPortBase, Slots: testSlots,
		ReadyTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	defer l.Close(context.Background())
	ctx := testCtx(t, time.Minute)
	spec := Spec{ComputerID: "hangs", BotdToken: testToken()}
	ref, err := l.Provision(ctx, spec)
	require.NoError(t, err)
	_, err = l.Reconnect(ctx, ref, spec)
	require.Error(t, err)
	require.Contains(t, err.Error(), "botd not healthy after 2")
	require.Contains(t, err.Error(), "connection refused")
	pid := l.PID(ref)
	require.NotZero(t, pid)
	require.NoError(t, l.Destroy(ctx, ref))
	require.Zero(t, l.PID(ref))
	_, err = os.Stat("/proc/" + strconv.Itoa(pid))
	require.True(t, os.IsNotExist(err), "destroy ends the process")
}

func TestLocalRefusesBadInput(t *testing.T) {
	// A DATA_DIR botd's users cannot traverse (Codex would not start).
	closed := t.TempDir() // 0700
	_, err := NewLocal(LocalOptions{DataDir: filepath.Join(closed, "data"), BotdBin: "/bin/true"})
	require.ErrorContains(t, err, "not traversable by others")

	_, err = NewLocal(LocalOptions{DataDir: "relative", BotdBin: "/bin/true"})
	require.Error(t, err)

	open := filepath.Join(tmpRoot, "data-bad-input")
	l, err := NewLocal(LocalOptions{DataDir: open, BotdBin: "/bin/true", PortBase: testPortBase, DisplayBase: testDisplayBase, Slots: testSlots})
	require.NoError(t, err)
	defer l.Close(context.Background())
	_, err = NewLocal(LocalOptions{DataDir: open, BotdBin: "/bin/true"})
	require.ErrorContains(t, err, "another worker holds", "two workers on one DATA_DIR would run two botds on one home")

	ctx := testCtx(t, time.Minute)
	for _, id := range []string{"", "../etc", "UPPER", "a/b", string(make([]byte, 70))} {
		_, err := l.Provision(ctx, Spec{ComputerID: id, BotdToken: testToken()})
		require.Error(t, err, "computer id %q", id)
	}
	_, err = l.Provision(ctx, Spec{ComputerID: "short-token", BotdToken: "short"})
	require.Error(t, err)
	for _, ref := range []string{"", "..", "../../etc", "x", "nope-12345678"} {
		_, err := l.Reconnect(ctx, ref, Spec{})
		require.ErrorIs(t, err, ErrGone, "ref %q", ref)
	}
}

// A botd that outlived its worker (its supervisor gone, the process still
// on the home): the next worker stops it before starting its own, so two
// botds never share one home.
func TestLocalStaleBotdOfEarlierWorker(t *testing.T) {
	requireHost(t)
	dataDir := filepath.Join(tmpRoot, "data-stale")
	opts := LocalOptions{
		DataDir: dataDir, BotdBin: testBotd(t),
		DisplayBase: testDisplayBase, PortBase: testPortBase, Slots: testSlots, ReadyTimeout: 3 * time.Minute,
	}
	l1, err := NewLocal(opts)
	require.NoError(t, err)
	ctx := testCtx(t, 5*time.Minute)
	spec := Spec{ComputerID: "stale", BotdToken: testToken()}
	ref, err := l1.Provision(ctx, spec)
	require.NoError(t, err)
	m1, err := l1.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	require.NoError(t, m1.WriteFile(ctx, "kept.txt", []byte("kept")))
	old := l1.PID(ref)
	require.NotZero(t, old)
	// The first worker "dies": its supervisor stops caring, its DATA_DIR
	// lock goes, its botd keeps running.
	l1.mu.Lock()
	p := l1.procs[ref]
	l1.mu.Unlock()
	p.stopOnce.Do(func() { close(p.stop) })
	require.NoError(t, l1.lock.Close())
	t.Cleanup(func() { _ = p.terminate(context.Background()) })

	l2, err := NewLocal(opts)
	require.NoError(t, err)
	defer l2.Close(context.Background())
	m2, err := l2.Reconnect(ctx, ref, spec)
	require.NoError(t, err)
	require.False(t, procAlive(old), "the earlier worker's botd must be stopped")
	require.NotEqual(t, old, l2.PID(ref))
	got, err := m2.ReadFile(ctx, "kept.txt", 100)
	require.NoError(t, err)
	require.Equal(t, "kept", string(got))
	require.NoError(t, l2.Destroy(ctx, ref))
}

// Two local computers at once, each with users of its own, share neither
// their screens, workspaces nor APIs: the same screen id runs on each,
// on its own display, and a file written on one is not in the other.
func TestLocalTwoComputersAtOnce(t *testing.T) {
	l := testLocal(t)
	ctx := testCtx(t, 5*time.Minute)
	var ms []Machine
	var refs []string
	for _, id := range []string{"twin-a", "twin-b"} {
		spec := Spec{ComputerID: id, BotdToken: testToken()}
		ref, err := l.Provision(ctx, spec)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Destroy(context.Background(), ref) })
		m, err := l.Reconnect(ctx, ref, spec)
		require.NoError(t, err)
		ms, refs = append(ms, m), append(refs, ref)
	}
	a, b := ms[0], ms[1]
	sa, err := a.StartScreen(ctx, "alice")
	require.NoError(t, err)
	sb, err := b.StartScreen(ctx, "alice")
	require.NoError(t, err)
	require.NotEqual(t, sa.Display, sb.Display, "each computer draws on its own displays")
	require.NotEmpty(t, observe(t, ctx, a, "alice").Image)
	require.NotEmpty(t, observe(t, ctx, b, "alice").Image)

	require.NoError(t, a.WriteFile(ctx, "only-a.txt", []byte("a")))
	_, err = b.ReadFile(ctx, "only-a.txt", 10)
	require.Error(t, err, "a file of one computer's workspace is not in the other's")
	_, err = client.New(localBotd(t, l, refs[0]).BaseURL(), localBotd(t, l, refs[1]).Token(), nil).Health(ctx)
	require.Error(t, err, "one computer's token does not open the other")
}

// A display an X server killed hard left behind (its lock naming a dead
// process, its socket answering nobody) is free; a live one, or a lock that
// is no plain file holding a pid, holds it.
func TestLocalDisplayHeld(t *testing.T) {
	const d = 5987 // far from every test's displays
	lock, sock := "/tmp/.X5987-lock", "/tmp/.X11-unix/X5987"
	clean := func() { _ = os.Remove(lock); _ = os.Remove(sock) }
	clean()
	t.Cleanup(clean)
	require.NoError(t, os.MkdirAll("/tmp/.X11-unix", 0o1777))
	require.Empty(t, displayHeld(d))

	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	writeLock := func(s string) { require.NoError(t, os.WriteFile(lock, []byte(s), 0o444)) }
	writeLock(fmt.Sprintf("%10d\n", dead.ProcessState.Pid()))
	require.Empty(t, displayHeld(d), "a lock naming a dead process")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	require.Equal(t, sock, displayHeld(d), "a socket that accepts")
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	require.FileExists(t, sock)
	require.Empty(t, displayHeld(d), "a stale lock and a stale socket")

	writeLock(fmt.Sprintf("%10d\n", os.Getpid()))
	require.Equal(t, lock, displayHeld(d), "a lock naming a live process")
	clean()
	writeLock("garbage")
	require.Equal(t, lock, displayHeld(d))
	clean()
	require.NoError(t, syscall.Mkfifo(lock, 0o644))
	require.Equal(t, lock, displayHeld(d), "a FIFO (read without blocking)")
	clean()
	require.NoError(t, os.WriteFile(sock, nil, 0o644))
	require.Equal(t, sock, displayHeld(d), "no socket")
}

// localBotd is a client of the botd the local provider runs for ref, made
// from the provider's own records (its address and token file), for tests
// of botd's addresses and tokens themselves.
func localBotd(t *testing.T, l *Local, ref string) *client.Client {
	t.Helper()
	tok, err := os.ReadFile(l.token(ref))
	require.NoError(t, err)
	l.mu.Lock()
	p := l.procs[ref]
	l.mu.Unlock()
	require.NotNil(t, p, "botd of %s is running", ref)
	return client.New("http://"+p.api, strings.TrimSpace(string(tok)), nil)
}

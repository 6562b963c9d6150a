package screen

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

// Displays 2090-2099 (issue 36 row 6).
const xdTestDisplay = 2090

// TestDisplayHeld: a display number is taken when its lock, its socket path
// or its abstract name is held by someone else, in any of the three
// namespaces; a dead server's lock of desktop's own leaves it free.
func TestDisplayHeld(t *testing.T) {
	me := os.Getuid()
	other := me + 4242 // "desktop" for rows where the file must be someone else's
	deadPid := func(t *testing.T) int {
		cmd := exec.Command("true")
		require.NoError(t, cmd.Run())
		return cmd.Process.Pid
	}
	rows := []struct {
		name    string
		desktop int
		hold    func(t *testing.T, d int)
		held    bool
	}{
		{"free", me, func(*testing.T, int) {}, false},
		{"the lock of a live server", other, func(t *testing.T, d int) {
			writeTemp(t, fmt.Sprintf("/tmp/.X%d-lock", d), fmt.Sprintf("%10d\n", os.Getpid()))
		}, true},
		{"desktop's lock of a dead server", me, func(t *testing.T, d int) {
			writeTemp(t, fmt.Sprintf("/tmp/.X%d-lock", d), fmt.Sprintf("%10d\n", deadPid(t)))
		}, false},
		{"someone else's socket at the path", other, func(t *testing.T, d int) {
			require.NoError(t, os.MkdirAll(xSocketDir, os.ModeSticky|0o777))
			ln, err := net.Listen("unix", x11SocketPath(d))
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })
		}, true},
		{"the abstract name bound", me, func(t *testing.T, d int) {
			ln, err := net.Listen("unix", x11AbstractName(d))
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })
		}, true},
	}
	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := xdTestDisplay + i
			require.False(t, displayHeld(d, me), "display %d is in use on this host before the row", d)
			row.hold(t, d)
			require.Equal(t, row.held, displayHeld(d, row.desktop))
		})
	}
	// The probe's own bind is released at once: a server binds after it.
	require.False(t, abstractHeld(xdTestDisplay+9))
	ln, err := net.Listen("unix", x11AbstractName(xdTestDisplay+9))
	require.NoError(t, err)
	ln.Close()
}

func writeTemp(t *testing.T, path, body string) {
	t.Helper()
	// O_EXCL|O_NOFOLLOW: /tmp is world-writable, and a file or link planted
	// there first fails the test instead of being followed.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o444)
	require.NoError(t, err, "%s exists", path)
	t.Cleanup(func() { os.Remove(path) })
	_, err = f.WriteString(body)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// takenBackend is the fake backend whose starts in some slots lose their
// display to someone who took it after the probe (the probe found it free).
type takenBackend struct {
	*fakeBackend
	mu    sync.Mutex
	taken map[int]bool
	tried []int
}

func (b *takenBackend) start(ctx context.Context, s *Screen, slot int) (stack, error) {
	b.mu.Lock()
	b.tried = append(b.tried, slot)
	taken := b.taken[slot]
	b.mu.Unlock()
	if taken {
		return nil, fmt.Errorf("%w: display :%d", errDisplayTaken, slot)
	}
	return b.fakeBackend.start(ctx, s, slot)
}

func (b *takenBackend) triedSlots() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprint(b.tried)
}

func newTakenManager(t *testing.T, taken ...int) (*Manager, *takenBackend) {
	be := &takenBackend{fakeBackend: &fakeBackend{}, taken: map[int]bool{}}
	for _, n := range taken {
		be.taken[n] = true
	}
	m := New(Options{Home: t.TempDir(), MaxScreens: 4, Clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}, Log: zerolog.Nop(),
		backend: be, slotFree: func(int) bool { return true }})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, be
}

// A display taken between the probe and Xvfb's bind: the screen starts on
// the next free slot in the same start, the slots it lost are free again.
func TestStartMovesOnWhenDisplayTaken(t *testing.T) {
	m, be := newTakenManager(t, 0, 1, 2)
	s, err := m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	require.Equal(t, "[0 1 2 3]", be.triedSlots())
	in := m.List()
	require.Len(t, in, 1)
	require.Equal(t, shared.StateRunning, in[0].State)
	require.Equal(t, 3, *in[0].Slot)
	require.Equal(t, ":"+strconv.Itoa(m.display(3)), in[0].Display)
	require.Equal(t, 3, s.slot)

	be.mu.Lock()
	be.taken = map[int]bool{}
	be.mu.Unlock()
	_, err = m.Ensure(ctxT(t), "b")
	require.NoError(t, err)
	b, _ := m.Info("b")
	require.Equal(t, 0, *b.Slot, "the slots the first start lost are free again")
}

// The moves are bounded: every display taken fails the start after
// displayRetries moves, as screen_unavailable.
func TestStartMovesOnBounded(t *testing.T) {
	all := make([]int, MaxSlots)
	for i := range all {
		all[i] = i
	}
	m, be := newTakenManager(t, all...)
	_, err := m.Ensure(ctxT(t), "a")
	require.Error(t, err)
	var ae *shared.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, shared.CodeScreenUnavailable, ae.Code)
	require.Equal(t, fmt.Sprint(seq(displayRetries+1)), be.triedSlots())
	a, _ := m.Info("a")
	require.Nil(t, a.Slot, "a failed start holds no slot")
}

// The spare moves on too.
func TestSpareMovesOnWhenDisplayTaken(t *testing.T) {
	m, be := newTakenManager(t, 0)
	require.NoError(t, m.PrepareSpare(ctxT(t)))
	require.Equal(t, "[0 1]", be.triedSlots())
	_, err := m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	a, _ := m.Info("a")
	require.Equal(t, 1, *a.Slot, "the screen took the spare, on the slot it moved to")
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

package screen

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

// TestSpareTakenByTheFirstScreen: a spare's stack is started once, under
// no id; the next screen to start takes it (no start of its own) in the
// spare's slot; the one after that starts as before.
func TestSpareTakenByTheFirstScreen(t *testing.T) {
	f := newFixture(t, 4, 0)
	var wg sync.WaitGroup
	for range 3 { // concurrent asks share one start
		wg.Add(1)
		go func() { defer wg.Done(); require.NoError(t, f.m.PrepareSpare(ctxT(t))) }()
	}
	wg.Wait()
	require.EqualValues(t, 1, f.be.starts.Load())
	require.Equal(t, "start _spare slot=0", f.be.events())
	require.Empty(t, f.m.List(), "a spare is no screen")

	_, err := f.m.Ensure(ctxT(t), "alice")
	require.NoError(t, err)
	require.EqualValues(t, 1, f.be.starts.Load(), "alice took the spare: no start of her own")
	require.Equal(t, "alice@0", f.running())
	_, err = f.m.Ensure(ctxT(t), "bob")
	require.NoError(t, err)
	require.EqualValues(t, 2, f.be.starts.Load())
	require.Equal(t, "alice@0 bob@1", f.running())
	require.NoError(t, f.m.Stop(ctxT(t), "alice"))
	require.Contains(t, f.be.events(), "stop _spare", "alice's stack (the spare's) stops with her")
}

// TestSpareHoldsASlot: a spare counts against MaxScreens.
func TestSpareHoldsASlot(t *testing.T) {
	f := newFixture(t, 1, 0)
	require.NoError(t, f.m.PrepareSpare(ctxT(t)))
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	require.Equal(t, "a@0", f.running())
	err = f.m.PrepareSpare(ctxT(t))
	require.Equal(t, shared.CodeMultiScreen, codeOf(err), "no room for a spare beside a")
}

// TestSpareDroppedWhenItsDisplayDies: a spare whose X died is not taken.
func TestSpareDroppedWhenItsDisplayDies(t *testing.T) {
	f := newFixture(t, 4, 0)
	require.NoError(t, f.m.PrepareSpare(ctxT(t)))
	f.be.stack(spareID).die()
	require.Eventually(t, func() bool {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		return f.m.spare == nil
	}, 5*time.Second, 10*time.Millisecond)
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	require.EqualValues(t, 2, f.be.starts.Load(), "a started a stack of its own")
	require.Equal(t, "a@0", f.running())
}

// TestSpareStoppedAtClose: an untaken spare stops with botd.
func TestSpareStoppedAtClose(t *testing.T) {
	f := newFixture(t, 4, 0)
	require.NoError(t, f.m.PrepareSpare(ctxT(t)))
	f.m.Close(context.Background())
	require.Contains(t, f.be.events(), "stop _spare")
	require.Error(t, f.m.PrepareSpare(ctxT(t)), "closed")
}

// TestSpareFailedStart: a spare that did not start reports why and holds
// nothing.
func TestSpareFailedStart(t *testing.T) {
	f := newFixture(t, 4, 0)
	f.be.fail = true
	require.Error(t, f.m.PrepareSpare(ctxT(t)))
	f.be.fail = false
	_, err := f.m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	require.Equal(t, "a@0", f.running())
}

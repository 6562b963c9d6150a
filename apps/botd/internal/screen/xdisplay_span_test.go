package screen

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// Issue 36 row 6: every display number of the first MaxSlots slots held by
// someone else leaves a screen a slot all the same: slots reach far past
// the screen count (SlotSpan), and a slot past MAX_SCREENS asks for ports
// the kernel picks, not another computer's.
func TestSlotPastTheFirst32WhenTheyAreHeld(t *testing.T) {
	held := map[int]bool{}
	for i := 0; i < MaxSlots; i++ {
		held[i] = true
	}
	m := New(Options{Home: t.TempDir(), MaxScreens: 4, DisplayBase: 300, ViewPortBase: 7000,
		Clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}, Log: zerolog.Nop(),
		backend: &fakeBackend{}, slotFree: func(slot int) bool { return !held[slot] }})
	t.Cleanup(func() { m.Close(context.Background()) })

	_, err := m.Ensure(ctxT(t), "a")
	require.NoError(t, err)
	a, _ := m.Info("a")
	require.Equal(t, MaxSlots, *a.Slot)
	require.Equal(t, ":"+strconv.Itoa(300+MaxSlots), a.Display)
	require.Equal(t, Ports{}, *a.Ports, "past MAX_SCREENS the ports are the kernel's to pick")

	// What package vnc bound is what Info shows, until the next start.
	m.SetPorts("a", Ports{View: 41000, Control: 41001})
	a, _ = m.Info("a")
	require.Equal(t, Ports{View: 41000, Control: 41001}, *a.Ports)

	// A free display below is taken first again.
	delete(held, 2)
	_, err = m.Ensure(ctxT(t), "b")
	require.NoError(t, err)
	b, _ := m.Info("b")
	require.Equal(t, 2, *b.Slot)
	require.Equal(t, Ports{View: 7004, Control: 7005}, *b.Ports, "a slot below MAX_SCREENS asks for its own ports")
}

// The search is bounded: with every display of the span held, a start is
// refused at once (409), it does not wait.
func TestNoSlotWhenTheWholeSpanIsHeld(t *testing.T) {
	m := New(Options{Home: t.TempDir(), MaxScreens: 4, Clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}, Log: zerolog.Nop(),
		backend: &fakeBackend{}, slotFree: func(int) bool { return false }})
	t.Cleanup(func() { m.Close(context.Background()) })
	_, err := m.Ensure(ctxT(t), "a")
	require.ErrorContains(t, err, "no free display slot")
}

// A display base near the top keeps display numbers within 65535.
func TestSlotSpanStopsAt65535(t *testing.T) {
	m := New(Options{Home: t.TempDir(), DisplayBase: 65530, backend: &fakeBackend{}, slotFree: func(int) bool { return true }})
	t.Cleanup(func() { m.Close(context.Background()) })
	require.Equal(t, 6, m.slotSpan())
	require.Equal(t, SlotSpan, New(Options{Home: t.TempDir(), backend: &fakeBackend{}}).slotSpan())
}

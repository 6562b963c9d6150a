package screen

import (
	"bytes"
	"image/jpeg"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// The race of issue 36 row 6 with a real Xvfb: someone binds a display's
// abstract X name after the probe found the display free (here the probe
// is made to miss it). Xvfb dies on it; the start moves on to the next
// display at once and the screen runs there. Displays 2060-2061.
func TestIntegrationDisplayTakenAfterProbe(t *testing.T) {
	const base = 2060
	e := newIT(t, 2, base)
	ctx := testenv.Context(t, 2*time.Minute)
	ln, err := net.Listen("unix", x11AbstractName(base))
	require.NoError(t, err, "display %d's abstract name", base)
	t.Cleanup(func() { ln.Close() })
	// The squatter came after the probe: the probe sees slot 0 free.
	e.m.o.slotFree = func(slot int) bool { return slot == 0 || e.m.slotFreeOnHost(slot) }

	_, err = e.m.Register("it-taken")
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire("it-taken", lease.Agent, "run", time.Minute)
	require.NoError(t, err)
	began := time.Now()
	obs := observeIT(t, e, ctx, "it-taken", l.ID)
	in := mustInfo(e.m, "it-taken")
	require.Equal(t, ":2061", in.Display, "the screen moved on to the next display")
	require.Less(t, time.Since(began), StartTimeout)
	img, err := jpeg.Decode(bytes.NewReader(obs.Image))
	require.NoError(t, err)
	require.Equal(t, Width, img.Bounds().Dx())
	// The squatter still holds its name: nobody waited for it to leave.
	require.True(t, abstractHeld(base))
}

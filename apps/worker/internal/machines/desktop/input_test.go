package desktop

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

func TestXdotoolArgv(t *testing.T) {
	for _, c := range []struct {
		a    shared.Action
		want string
	}{
		{shared.Action{Type: shared.ActionClick, X: ip(1), Y: ip(2), Button: "right"}, "xdotool mousemove 1 2 click 3"},
		{shared.Action{Type: shared.ActionDoubleClick, X: ip(1), Y: ip(2)}, "xdotool mousemove 1 2 click --repeat 2 --delay 10 1"},
		{shared.Action{Type: shared.ActionScroll, X: ip(5), Y: ip(6), ScrollY: ip(-240), ScrollX: ip(130)}, "xdotool mousemove 5 6 click --repeat 2 --delay 8 4 click --repeat 1 --delay 8 7"},
		{shared.Action{Type: shared.ActionKeypress, Keys: []string{"ctrl", "A"}}, "xdotool key --clearmodifiers Control_L+a"},
		{shared.Action{Type: shared.ActionKeypress, Keys: []string{"ctrl", "+"}}, "xdotool key --clearmodifiers Control_L+U002B"},
		{shared.Action{Type: shared.ActionKeypress, Keys: []string{"Enter"}}, "xdotool key --clearmodifiers Return"},
		{shared.Action{Type: shared.ActionDrag, Path: []shared.Point{{X: 0, Y: 0}, {X: 20, Y: 0}}}, "xdotool mousemove 0 0 mousedown 1 sleep 0.04 mousemove 10 0 mousemove 20 0 sleep 0.04 mouseup 1"},
	} {
		argv, err := xdotoolArgv(c.a)
		require.NoError(t, err)
		require.Equal(t, c.want, strings.Join(argv, " "))
	}
	_, err := xdotoolArgv(shared.Action{Type: shared.ActionType})
	require.Error(t, err)
}

func TestTypeChunks(t *testing.T) {
	text := strings.Repeat("é", typeChunk) + "a\r\nb"
	chunks := typeChunks(text)
	require.Equal(t, []string{strings.Repeat("é", typeChunk), "a\nb"}, chunks)
}

func TestLeaseRules(t *testing.T) {
	lt := newLeaseTable(nil, nil)
	a, err := lt.acquire("s", KindAgent, "run", 0, timeZero)
	require.NoError(t, err)
	again, err := lt.acquire("s", KindAgent, "run", 0, timeZero)
	require.NoError(t, err)
	require.Equal(t, a.LeaseID, again.LeaseID, "the same holder gets its lease back")
	_, err = lt.acquire("s", KindAgent, "other", 0, timeZero)
	requireCode(t, err, shared.CodeConflict)
	u, err := lt.acquire("s", KindUser, "alice", 0, timeZero)
	require.NoError(t, err, "a person preempts an agent")
	requireCode(t, lt.check("s", a.LeaseID), shared.CodeUserHasControl)
	_, err = lt.acquire("s", KindAgent, "run", 0, timeZero)
	requireCode(t, err, shared.CodeUserHasControl)
	_, err = lt.acquire("s", KindUser, "bob", 0, timeZero)
	requireCode(t, err, shared.CodeUserHasControl)
	require.NoError(t, lt.release("s", u.LeaseID))
	requireCode(t, lt.check("s", a.LeaseID), shared.CodeLeaseRequired)
	requireCode(t, lt.release("s", u.LeaseID), shared.CodeNotFound)
}

var timeZero time.Time

// TestTypeRuns: characters the keymap lacks are typed in their own runs at
// borrowDelayMs; keymap characters around them keep the fast delay.
func TestTypeRuns(t *testing.T) {
	require.Equal(t, []typeRun{
		{text: "echo 'h", delayMs: typeDelayMs},
		{text: "é", delayMs: borrowDelayMs},
		{text: "llo w", delayMs: typeDelayMs},
		{text: "€日", delayMs: borrowDelayMs},
		{text: "'\n\t~", delayMs: typeDelayMs},
	}, typeRuns("echo 'héllo w€日'\n\t~"))
	require.Empty(t, typeRuns(""))
}

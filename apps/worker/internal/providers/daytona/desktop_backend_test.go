package daytona

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseExec: the execute wrapper's answer gives stdout and stderr
// apart and byte for byte, whatever else the toolbox's combined result
// holds before the marker; an answer without the marker is an error, not
// an empty success.
func TestParseExec(t *testing.T) {
	bin := []byte{0, 1, 0xff, '\n', 'x'}
	res := "noise from a profile script\n" + execMarker + "3 1\n" + base64.StdEncoding.EncodeToString(bin) + "\n" +
		base64.StdEncoding.EncodeToString([]byte("warn\n")) + "\n"
	r, err := parseExec(ExecResult{Result: res})
	require.NoError(t, err)
	require.Equal(t, 3, r.ExitCode)
	require.Equal(t, bin, r.Stdout)
	require.Equal(t, "warn\n", string(r.Stderr))
	require.True(t, r.Truncated)

	r, err = parseExec(ExecResult{Result: execMarker + "0 0\n\n\n"})
	require.NoError(t, err)
	require.Zero(t, r.ExitCode)
	require.Empty(t, r.Stdout)

	_, err = parseExec(ExecResult{ExitCode: 127, Result: "sh: not found"})
	require.ErrorContains(t, err, "did not finish")
	_, err = parseExec(ExecResult{Result: execMarker + "0 0\n!!notbase64\n\n"})
	require.Error(t, err)
}

// TestComputerUseKeys: the model's key names map to the computer-use
// API's (the daemon's), and a key it has no name for is left to xdotool.
func TestComputerUseKeys(t *testing.T) {
	for in, want := range map[string]string{"ctrl": "ctrl", "Enter": "enter", "escape": "esc", "cmd": "cmd",
		"a": "a", "A": "a", "7": "7", "f5": "f5", "pagedown": "pagedown", "space": "space", " ": "space"} {
		got, ok := cuKey(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"é", "/", "nosuchkey"} {
		_, ok := cuKey(in)
		require.False(t, ok, in)
	}
	require.Equal(t, 0, wheelClicks(0))
	require.Equal(t, 1, wheelClicks(-10))
	require.Equal(t, 3, wheelClicks(360))
}

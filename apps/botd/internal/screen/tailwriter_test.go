package screen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTailWriter(t *testing.T) {
	var none *tailWriter
	require.Equal(t, "", none.String())
	w := &tailWriter{max: 16}
	_, _ = fmt.Fprintf(w, "first line\n")
	require.Equal(t, "first line", w.String())
	_, _ = fmt.Fprintf(w, "%s\nbind failed: in use\n", strings.Repeat("x", 40))
	require.Equal(t, "failed: in use", w.String(), "only the last 16 bytes, on one line")
	_, _ = w.Write([]byte{0xff, 'o', 'k'})
	require.True(t, strings.HasSuffix(w.String(), "?ok"), "invalid UTF-8 is replaced: %q", w.String())
}

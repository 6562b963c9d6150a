package screen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared/tailbuf"
)

func TestLastWords(t *testing.T) {
	require.Equal(t, "", lastWords(nil))
	w := &tailbuf.Buffer{Max: 16}
	_, _ = fmt.Fprintf(w, "first line\n")
	require.Equal(t, "first line", lastWords(w))
	_, _ = fmt.Fprintf(w, "%s\nbind failed: in use\n", strings.Repeat("x", 40))
	require.Equal(t, "failed: in use", lastWords(w), "only the last 16 bytes, on one line")
	_, _ = w.Write([]byte{0xff, 'o', 'k'})
	require.True(t, strings.HasSuffix(lastWords(w), "?ok"), "invalid UTF-8 is replaced: %q", lastWords(w))
}

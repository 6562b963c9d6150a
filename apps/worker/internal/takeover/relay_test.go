package takeover

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuietErrHidesSecrets: the relay's log line never carries the
// link's token or a URL's query (a vendor's port URL may hold a token).
func TestQuietErrHidesSecrets(t *testing.T) {
	err := errors.New(`failed to WebSocket dial: Get "https://6080-sbx.example/screens/bob/vnc?mode=control&token=tok-123456": dial tcp: refused; header tok-123456; is it up? yes`)
	got := quietErr(err, "tok-123456")
	require.NotContains(t, got, "tok-123456")
	require.NotContains(t, got, "mode=control")
	require.Contains(t, got, `https://6080-sbx.example/screens/bob/vnc?[query]"`)
	require.Contains(t, got, "header [redacted]; is it up? yes", "text that is not a query stays")
	require.Equal(t, "no secret here", quietErr(errors.New("no secret here"), ""))
}

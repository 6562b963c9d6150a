package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCallHook: a call under a hooked context tells the hook its method
// and path without the query, carries the hook's headers but never lets
// one replace the client's own (Authorization), and reports the answer's
// status; without a hook nothing is added.
func TestCallHook(t *testing.T) {
	var auth, tp []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		tp = append(tp, r.Header.Get("Traceparent"))
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := New(srv.URL, "the-token-0123456789", nil)

	type call struct {
		method, path string
		status       int
	}
	var calls []call
	var seenAuth []string
	ctx := WithCallHook(context.Background(), func(_ context.Context, method, path string, h http.Header) func(int, error) {
		seenAuth = append(seenAuth, h.Get("Authorization"))
		h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		h.Set("Authorization", "Bearer not-the-token")
		return func(status int, err error) { calls = append(calls, call{method, path, status}) }
	})
	require.NoError(t, c.WriteFile(ctx, "a b/secret-name.txt", []byte("x")))
	_, err := c.ReadFile(ctx, "a b/secret-name.txt", 10)
	require.Error(t, err)
	require.Equal(t, []call{{"PUT", "/files", http.StatusNoContent}, {"GET", "/files", http.StatusNotFound}}, calls)
	require.Equal(t, []string{"", ""}, seenAuth, "the hook never sees the client's headers")
	require.Equal(t, []string{"Bearer the-token-0123456789", "Bearer the-token-0123456789"}, auth, "the hook cannot replace the token")
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tp[0])

	require.NoError(t, c.WriteFile(context.Background(), "x", []byte("x")))
	require.Empty(t, tp[2], "no hook, no header")
	require.Len(t, calls, 2)
}

package client

// What the client puts on the wire and how it reads botd's answers: the
// bearer token, escaped ids, JSON and octet bodies, the error envelope,
// non-JSON errors, and errors that never carry the token. (The worker's
// tests drive this client against a real botd.)

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

type seen struct {
	Method, Path, RawPath, Query, Auth, CType, Body string
}

func recorder(t *testing.T, reply func(w http.ResponseWriter, r *http.Request)) (*Client, func() []seen) {
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(b)})
		mu.Unlock()
		reply(w, r)
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", "tok-0123456789abcdef", nil), func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

func TestWire(t *testing.T) {
	c, got := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/lease"):
			_, _ = io.WriteString(w, `{"leaseId":"L1","kind":"agent","holder":"h","expiresAt":"2030-01-01T00:00:00Z"}`)
		case r.URL.Path == "/exec":
			_, _ = io.WriteString(w, `{"exitCode":3,"stdout":"out","stderr":"err","truncated":false}`)
		case r.URL.Path == "/files" && r.Method == "GET":
			_, _ = io.WriteString(w, "0123456789")
		default:
			_, _ = io.WriteString(w, `{}`)
		}
	})
	ctx := context.Background()
	l, err := c.AcquireLease(ctx, "alice-2", "agent", "run-1", 90*time.Second)
	require.NoError(t, err)
	require.Equal(t, "L1", l.LeaseID)
	res, err := c.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "echo $HOME"}, Cwd: "bots/alice"})
	require.NoError(t, err)
	require.Equal(t, 3, res.ExitCode)
	require.Equal(t, "out", res.Stdout)
	b, err := c.ReadFile(ctx, "bots/a b&c.txt", 4)
	require.NoError(t, err)
	require.Equal(t, "0123", string(b), "reads stop at max")
	require.NoError(t, c.WriteFile(ctx, "x.bin", []byte{0, 1, 2}))
	require.NoError(t, c.ReleaseLease(ctx, "a/b", "L1"))

	g := got()
	require.Len(t, g, 5)
	for _, s := range g {
		require.Equal(t, "Bearer tok-0123456789abcdef", s.Auth)
	}
	require.Equal(t, "POST", g[0].Method)
	require.Equal(t, "/screens/alice-2/lease", g[0].Path)
	require.JSONEq(t, `{"kind":"agent","holder":"run-1","ttlSeconds":90}`, g[0].Body)
	require.Equal(t, "application/json", g[0].CType)
	require.JSONEq(t, `{"argv":["sh","-c","echo $HOME"],"cwd":"bots/alice"}`, g[1].Body, "argv is sent as a list, never a shell string")
	require.Equal(t, "path=bots%2Fa+b%26c.txt", g[2].Query)
	require.Equal(t, "PUT", g[3].Method)
	require.Equal(t, "application/octet-stream", g[3].CType)
	require.Equal(t, "\x00\x01\x02", g[3].Body)
	require.Equal(t, "DELETE", g[4].Method)
	require.Equal(t, "/screens/a%2Fb/lease/L1", g[4].RawPath, "an id cannot add path segments")
}

func TestErrors(t *testing.T) {
	c, _ := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/screens/bob/observe":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":{"code":"MULTI_SCREEN_UNAVAILABLE","message":"all 1 screens are held"}}`)
		case "/health":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "upstream broke\n")
		default:
			_, _ = io.WriteString(w, `{"broken json`)
		}
	})
	ctx := context.Background()
	_, err := c.Observe(ctx, "bob", "L")
	var be *Error
	require.True(t, errors.As(err, &be))
	require.Equal(t, http.StatusConflict, be.Status)
	require.Equal(t, shared.CodeMultiScreen, CodeOf(err))
	require.Contains(t, err.Error(), "all 1 screens are held")
	_, err = c.Health(ctx)
	require.Equal(t, shared.CodeInternal, CodeOf(err))
	require.Contains(t, err.Error(), "upstream broke")
	_, err = c.Exec(ctx, ExecRequest{Argv: []string{"true"}})
	require.ErrorContains(t, err, "decode reply")
	require.Equal(t, shared.Code(""), CodeOf(errors.New("plain")))
}

// TestErrorsNeverCarryTheToken: a transport error whose text would contain
// the token (here: a base URL built with it) is scrubbed.
func TestErrorsNeverCarryTheToken(t *testing.T) {
	const tok = "very-secret-token-123456"
	c := New("http://127.0.0.1:1/"+tok, tok, &http.Client{Timeout: time.Second})
	_, err := c.Health(context.Background())
	require.Error(t, err)
	require.NotContains(t, err.Error(), tok)
	require.Contains(t, err.Error(), "[redacted]")
}

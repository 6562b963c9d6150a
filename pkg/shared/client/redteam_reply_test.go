package client

// Red-team rows of issue 36, row 5, at the client: a hostile botd (a
// loopback server; that position is a machine) answers each kind of call
// with more than its cap, or with nothing. Each call must fail with the
// cap's code or a deadline, having read a bounded amount: the hostile
// server counts what it could write before the client closed the
// connection. (The worker-level rows, with the heap measured, are
// apps/worker's TestRedTeamMachineReply.)

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

// flooder answers every request with head, then up to n bytes of 'A' in
// 1 MiB writes, then tail; silent rows send headers and then nothing until
// the client gives up.
type flooder struct {
	head, tail string
	n          int64
	silent     bool
	sent       atomic.Int64
	whole      atomic.Bool
}

func (f *flooder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if f.silent {
		<-r.Context().Done()
		return
	}
	_, _ = io.WriteString(w, f.head)
	chunk := []byte(strings.Repeat("A", 1<<20))
	for f.sent.Load() < f.n {
		k, err := w.Write(chunk)
		f.sent.Add(int64(k))
		if err != nil {
			return
		}
	}
	_, _ = io.WriteString(w, f.tail)
	f.whole.Store(true)
}

func TestRedTeamReplyCaps(t *testing.T) {
	rows := []struct {
		name string
		f    *flooder
		call func(context.Context, *Client) error
		cap  int64
	}{
		{"exec answered with a 2 GiB stdout", &flooder{head: `{"exitCode":0,"stdout":"`, n: 2 << 30, tail: `"}`},
			func(ctx context.Context, c *Client) error {
				_, err := c.Exec(ctx, ExecRequest{Argv: []string{"true"}})
				return err
			}, MaxExecReply},
		{"observe answered with a 1 GiB image", &flooder{head: `{"image":"`, n: 1 << 30, tail: `"}`},
			func(ctx context.Context, c *Client) error {
				_, err := c.Observe(ctx, "alice", "l1")
				return err
			}, MaxScreenshotReply},
		{"screens answered with 400 MiB", &flooder{head: `{"screens":[{"id":"`, n: 400 << 20, tail: `"}]}`},
			func(ctx context.Context, c *Client) error {
				_, err := c.Screens(ctx)
				return err
			}, MaxReply},
		{"file list answered with 1 GiB", &flooder{head: `{"entries":[{"name":"`, n: 1 << 30, tail: `"}]}`},
			func(ctx context.Context, c *Client) error {
				_, err := c.ListFiles(ctx, ".")
				return err
			}, MaxListReply},
		{"workspace import answered with a 1 GiB summary", &flooder{head: `{"files":1,"x":"`, n: 1 << 30, tail: `"}`},
			func(ctx context.Context, c *Client) error {
				_, err := c.ImportWorkspace(ctx, strings.NewReader("tar"))
				return err
			}, MaxReply},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			srv := httptest.NewServer(row.f)
			defer srv.Close()
			c := New(srv.URL, "tok-0123456789abcdef", nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := row.call(ctx, c)
			t.Logf("%s: %v; the server wrote %d MiB", row.name, err, row.f.sent.Load()>>20)
			require.Error(t, err)
			var e *Error
			require.True(t, errors.As(err, &e), "a *client.Error: %v", err)
			assert.Equal(t, shared.CodeReplyTooLarge, e.Code)
			assert.Equal(t, http.StatusBadGateway, e.Status)
			assert.Contains(t, e.Message, "larger than "+Size(row.cap))
			assert.False(t, row.f.whole.Load(), "the answer was not read whole")
			assert.Less(t, row.f.sent.Load(), row.cap+64<<20, "the connection was closed, not drained")
		})
	}
}

func TestRedTeamReplyDeadlines(t *testing.T) {
	oldSmall, oldIdle := small, streamIdle
	small.timeout, streamIdle = 300*time.Millisecond, 300*time.Millisecond
	defer func() { small, streamIdle = oldSmall, oldIdle }()

	t.Run("health that never answers", func(t *testing.T) {
		f := &flooder{silent: true}
		srv := httptest.NewServer(f)
		defer srv.Close()
		_, err := New(srv.URL, "tok-0123456789abcdef", nil).Health(context.Background())
		t.Logf("health: %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "no answer within 300ms")
	})
	t.Run("discarded answer that never ends", func(t *testing.T) {
		f := &flooder{n: 1 << 40}
		srv := httptest.NewServer(f)
		defer srv.Close()
		err := New(srv.URL, "tok-0123456789abcdef", nil).ReleaseLease(context.Background(), "alice", "l1")
		t.Logf("release: %v; the server wrote %d MiB", err, f.sent.Load()>>20)
		require.NoError(t, err)
		assert.Less(t, f.sent.Load(), int64(64<<20), "at most a little is drained")
	})
	t.Run("export that stalls", func(t *testing.T) {
		f := &flooder{silent: true}
		srv := httptest.NewServer(f)
		defer srv.Close()
		rc, err := New(srv.URL, "tok-0123456789abcdef", nil).ExportWorkspace(context.Background())
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		t.Logf("export: %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "no byte moved for 300ms")
	})
}

package homes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/testbotd"
	"github.com/open-bot/computer/pkg/shared/client"
)

// machine is the botd machine of a real botd's client.
func machine(c *client.Client) *machines.Botd { return machines.BotdOf(c) }

// cookiePage sets a persistent sign-in cookie on first visit and shows the
// cookie it was sent; it records every cookie value it saw.
type cookiePage struct {
	value string
	mu    sync.Mutex
	seen  []string
}

func (p *cookiePage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	got := "none"
	if c, err := r.Cookie("ckpt"); err == nil {
		got = c.Value
	} else {
		http.SetCookie(w, &http.Cookie{Name: "ckpt", Value: p.value, Path: "/", MaxAge: 86400, HttpOnly: true})
	}
	p.mu.Lock()
	p.seen = append(p.seen, got)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>Checkpoint page</title><p>signed-in cookie: %s</p>", got)
}

func (p *cookiePage) sawCookie() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, p.value)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, info := cond()
		if ok {
			return
		}
		if info != "" {
			last = info
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last: %s)", what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A file, a sign-in cookie and an open tab made on one machine come back on
// a fresh one through a checkpoint.
func TestCheckpointRestoreRealBotd(t *testing.T) {
	testbotd.Require(t)
	var v [12]byte
	_, _ = rand.Read(v[:])
	page := &cookiePage{value: hex.EncodeToString(v[:])}
	srv := httptest.NewServer(page)
	defer srv.Close()
	pageURL := srv.URL + "/"

	ctx := t.Context()
	a := testbotd.Start(t, testbotd.Options{DisplayBase: 470, PortBase: 24000, Env: []string{"EGRESS_ALLOW=127.0.0.1/32"}}) // the page is on loopback, which egress refuses by default
	const note = "written before the checkpoint\n"
	require.NoError(t, a.Client.WriteFile(ctx, "notes/hello.txt", []byte(note)))
	_, err := a.Client.StartScreen(ctx, "alice")
	require.NoError(t, err)
	lease, err := a.Client.AcquireLease(ctx, "alice", "agent", "test", 5*time.Minute)
	require.NoError(t, err)
	_, err = a.Client.Open(ctx, "alice", lease.LeaseID, pageURL)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the page with its cookie set", func() (bool, string) {
		p, err := a.Client.ReadPage(ctx, "alice")
		if err != nil {
			return false, err.Error()
		}
		page.mu.Lock()
		visited := len(page.seen) > 0
		page.mu.Unlock()
		return p.Title == "Checkpoint page" && visited, p.Title
	})
	// A reload proves the browser holds the cookie before the checkpoint.
	_, err = a.Client.Open(ctx, "alice", lease.LeaseID, pageURL)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the browser to send the cookie", func() (bool, string) { return page.sawCookie(), "" })

	store, err := NewLocal(t.TempDir())
	require.NoError(t, err)
	cp := NewCheckpointer(store)
	rev, err := cp.Checkpoint(ctx, "computer-1", machine(a.Client))
	require.NoError(t, err)
	require.Equal(t, int64(1), rev.Number)
	require.Positive(t, rev.Size)
	t.Logf("checkpoint: %d bytes", rev.Size)

	// Two checkpoints of one computer at once are serialized (botd itself
	// would refuse the second with 409 while the first exports).
	var wg sync.WaitGroup
	revs := make([]Revision, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); revs[i], errs[i] = cp.Checkpoint(ctx, "computer-1", machine(a.Client)) }()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ElementsMatch(t, []int64{2, 3}, []int64{revs[0].Number, revs[1].Number})

	// A checkpoint cut off midway (the worker's context ends) keeps the
	// previous one, and botd is free for the next.
	latest, _, err := store.Latest(ctx, "computer-1")
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	cutStore := &cancelAfterStore{Store: store, cancel: cancel, after: 64 << 10}
	_, err = NewCheckpointer(cutStore).Checkpoint(cctx, "computer-1", machine(a.Client))
	require.Error(t, err)
	require.Contains(t, err.Error(), "previous checkpoint is kept")
	still, _, err := store.Latest(ctx, "computer-1")
	require.NoError(t, err)
	require.Equal(t, latest, still)
	rev, err = cp.Checkpoint(ctx, "computer-1", machine(a.Client))
	require.NoError(t, err, "botd exports again after an aborted export")
	require.Equal(t, int64(4), rev.Number)

	// The machine goes away; a fresh one with an empty home replaces it.
	a.Stop()
	page.mu.Lock()
	page.seen = nil
	page.mu.Unlock()
	b := testbotd.Start(t, testbotd.Options{DisplayBase: 480, PortBase: 24100, Env: []string{"EGRESS_ALLOW=127.0.0.1/32"}})
	_, err = b.Client.ReadFile(ctx, "notes/hello.txt", 1<<20)
	require.Error(t, err, "the fresh machine starts empty")

	res, ok, err := cp.Restore(ctx, "computer-1", machine(b.Client))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rev.Number, res.Revision.Number)
	require.Positive(t, res.Summary.Files)

	got, err := b.Client.ReadFile(ctx, "notes/hello.txt", 1<<20)
	require.NoError(t, err)
	require.Equal(t, note, string(got))

	jar, err := os.ReadFile(filepath.Join(b.Home, ".botd", "cookies.json"))
	require.NoError(t, err, "the cookie jar came back")
	require.True(t, strings.Contains(string(jar), page.value), "the sign-in cookie is in the restored jar")

	_, err = b.Client.StartScreen(ctx, "alice")
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the tab to come back", func() (bool, string) {
		var r struct {
			Pages []string `json:"pages"`
		}
		if err := b.Client.Do(ctx, http.MethodGet, "/screens/alice/browser/pages", nil, &r); err != nil {
			return false, err.Error()
		}
		return slices.Contains(r.Pages, pageURL), fmt.Sprint(r.Pages)
	})
	waitFor(t, 30*time.Second, "the restored tab to show the signed-in page", func() (bool, string) {
		p, err := b.Client.ReadPage(ctx, "alice")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(p.Text, "signed-in cookie: "+page.value), p.URL
	})
	require.True(t, page.sawCookie(), "the restored browser sent the cookie")

	// A second restore of the same checkpoint is refused once it is damaged,
	// and nothing is imported.
	f, err := os.OpenFile(store.tarPath("computer-1"), os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("damage"), 1024)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, _, err = cp.Restore(ctx, "computer-1", machine(b.Client))
	require.ErrorIs(t, err, ErrCorrupt)
}

// cancelAfterStore cancels the checkpoint's context once after bytes of
// the export went through, as a worker shutting down mid-checkpoint would.
type cancelAfterStore struct {
	Store
	cancel context.CancelFunc
	after  int
}

func (c *cancelAfterStore) Put(ctx context.Context, key string, r io.Reader) (Revision, error) {
	n := 0
	return c.Store.Put(ctx, key, readerFunc(func(p []byte) (int, error) {
		k, err := r.Read(p)
		if n += k; n >= c.after {
			c.cancel()
		}
		return k, err
	}))
}

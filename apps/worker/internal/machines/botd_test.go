package machines_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/testbotd"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Displays 760-769 and ports 25400-25499 are this package's.
const botdDisplayBase, botdPortBase = 760, 25400

// nopHandler answers no server request (the test only initializes).
type nopHandler struct{}

func (nopHandler) HandleRequest(context.Context, string, json.RawMessage) (any, error) {
	return nil, fmt.Errorf("not handled")
}
func (nopHandler) HandleNotification(string, json.RawMessage) {}

// TestBotdMachine drives the botd machine's operations that do more than
// forward one typed call (the websocket dials, the routes the typed client
// lacks, the screen list with its lease, the workspace round trip) against a
// real botd.
func TestBotdMachine(t *testing.T) {
	b := testbotd.Start(t, testbotd.Options{DisplayBase: botdDisplayBase, PortBase: botdPortBase,
		Env: []string{"EGRESS_ALLOW=127.0.0.1/32"}}) // the page is on loopback
	var m machines.Machine = machines.NewBotd(b.URL, b.Token)
	require.NotContains(t, fmt.Sprintf("%v %+v", m, m), b.Token, "the machine prints no token")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	h, err := m.Health(ctx)
	require.NoError(t, err)
	require.True(t, h.OK)

	// The events stream opens with botd's health snapshot.
	ev, err := m.DialEvents(ctx)
	require.NoError(t, err)
	_, msg, err := ev.Read(ctx)
	require.NoError(t, err)
	var first struct {
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(msg, &first))
	require.Equal(t, shared.EventHealth, first.Type)
	ev.CloseNow()

	// A wrong token is refused on every route, the dials included.
	bad := machines.NewBotd(b.URL, "wrong-token-0123456789abcdef")
	_, err = bad.Health(ctx)
	require.Equal(t, shared.CodeUnauthorized, client.CodeOf(err), "%v", err)
	_, err = bad.DialEvents(ctx)
	require.Error(t, err)
	_, err = bad.DialAgent(ctx, nopHandler{})
	require.Error(t, err)

	// A screen, its lease visible in the list, a page in its browser.
	const screen = "alpha"
	_, err = m.StartScreen(ctx, screen)
	require.NoError(t, err)
	// Held for the whole test: with a minute, on a loaded host the lease
	// ran out before the release at the end (rehearsal 50: 404 no such
	// lease, 66 s in). Expiry has tests of its own.
	l, err := m.AcquireLease(ctx, screen, "agent", "run-1", 15*time.Minute)
	require.NoError(t, err)
	scs, err := m.Screens(ctx)
	require.NoError(t, err)
	i := slices.IndexFunc(scs, func(s client.Screen) bool { return s.ID == screen })
	require.GreaterOrEqual(t, i, 0, "%+v", scs)
	require.NotNil(t, scs[i].Lease, "the list says who holds the screen")
	require.Equal(t, "run-1", scs[i].Lease.Holder)
	require.Equal(t, "agent", scs[i].Lease.Kind)

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<title>machine page</title><p>hello from the botd machine</p>")
	}))
	defer page.Close()
	_, err = m.Open(ctx, screen, l.LeaseID, page.URL+"/here")
	require.NoError(t, err)
	var pages []string
	require.Eventually(t, func() bool {
		pages, err = m.BrowserPages(ctx, screen)
		return err == nil && slices.ContainsFunc(pages, func(u string) bool { return strings.HasPrefix(u, page.URL+"/here") })
	}, time.Minute, 200*time.Millisecond, "browser pages: %v %v", pages, err)
	_, err = m.BrowserPages(ctx, "nobody")
	require.Error(t, err, "no browser on a screen that never started")

	// The viewer link opens the screen's RFB stream; a forged one does not.
	link, err := m.ViewerToken(ctx, screen, "view", "", time.Minute)
	require.NoError(t, err)
	vnc, err := m.DialVNC(ctx, screen, link)
	require.NoError(t, err)
	_, hello, err := vnc.Read(ctx)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(hello, []byte("RFB ")), "RFB greeting, got %q", hello)
	vnc.CloseNow()
	_, err = m.DialVNC(ctx, screen, client.ViewerLink{Token: link.Token + "x"})
	require.Error(t, err)
	_, err = m.DialVNC(ctx, "other", link)
	require.Error(t, err, "a link is for its own screen only")

	// Codex app-server on the machine answers initialize.
	conn, err := m.DialAgent(ctx, nopHandler{})
	require.NoError(t, err)
	var initRes json.RawMessage
	require.NoError(t, conn.Call(ctx, codexrpc.MethodInitialize, codexrpc.InitializeParams{
		ClientInfo: codexrpc.ClientInfo{Name: "machines-test", Version: "0.1.0", Title: "machines test"},
	}, &initRes))
	conn.Close()

	// Files and exec, then the workspace out and back in.
	require.NoError(t, m.WriteFile(ctx, "notes/a.txt", []byte("kept")))
	got, err := m.ReadFile(ctx, "notes/a.txt", 1<<10)
	require.NoError(t, err)
	require.Equal(t, "kept", string(got))
	res, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"cat", "notes/a.txt"}})
	require.NoError(t, err)
	require.Equal(t, "kept", res.Stdout)
	rc, err := m.ExportWorkspace(ctx, 0)
	require.NoError(t, err)
	var tarball bytes.Buffer
	_, err = io.Copy(&tarball, rc)
	require.NoError(t, err, "a whole export ends with botd's trailers")
	rc.Close()
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(tarball.Bytes()))
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names[strings.TrimPrefix(hd.Name, "./")] = true
	}
	require.True(t, names["bot/notes/a.txt"], "the export holds the file (the workspace is bot/)")
	rc, err = m.ExportWorkspace(ctx, 1)
	if err == nil {
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
	}
	require.Error(t, err, "an export over maxBytes is refused, not cut short")
	require.NoError(t, m.WriteFile(ctx, "notes/a.txt", []byte("changed")))
	sum, err := m.ImportWorkspace(ctx, bytes.NewReader(tarball.Bytes()))
	require.NoError(t, err)
	require.Positive(t, sum.Files)
	got, err = m.ReadFile(ctx, "notes/a.txt", 1<<10)
	require.NoError(t, err)
	require.Equal(t, "kept", string(got), "the import restored the exported file")

	// Forgetting the screen stops it and drops it from the list.
	require.NoError(t, m.ReleaseLease(ctx, screen, l.LeaseID))
	require.NoError(t, m.ForgetScreen(ctx, screen))
	scs, err = m.Screens(ctx)
	require.NoError(t, err)
	require.False(t, slices.ContainsFunc(scs, func(s client.Screen) bool { return s.ID == screen }), "%+v", scs)
}

package providers

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/box"
	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// TestConformanceBox runs the table on the box kind against the emulator
// (each box a container of the stock desktop image, driven by commands),
// every exchange with the API validated against box-openapi.yaml: one
// screen (a second bot's graphical tools answer MULTI_SCREEN_UNAVAILABLE,
// its shell and files work), stop = archive and start = resume of the same
// box.
func TestConformanceBox(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (the Docker engine)")
	}
	env := emutest.Start(t)
	sealer, err := secret.LoadOrCreate(filepath.Join(tmpRoot, "box-conformance", "secret.key"))
	require.NoError(t, err)
	state := filepath.Join(tmpRoot, "box-conformance", "single-screen")
	top := t
	newProvider := func(t *testing.T) Provider {
		k, err := box.NewKey(env.APIKey, sealer)
		require.NoError(t, err)
		p, err := box.New(box.Options{APIURL: env.URL, Key: k, ReadyTimeout: 4 * time.Minute,
			HTTPClient: &http.Client{Transport: env.Checker, Timeout: 2 * time.Minute}, Transport: env.Checker})
		require.NoError(t, err)
		top.Cleanup(p.Close)
		x, err := NewBox(p, state)
		require.NoError(t, err)
		return x
	}
	p := newProvider(t)
	conform(t, backend{
		kind: KindBox, p: p, multiScreen: false,
		reopen:  newProvider,
		botUser: func(string) string { return "user" },
		// The desktop machine archives its workspace as `tar -C ws .`.
		archiveRoot: "./",
		gone: func(t *testing.T, ref string) {
			ls, err := p.(*Box).List(testCtx(t, time.Minute))
			require.NoError(t, err)
			for _, l := range ls {
				require.NotEqual(t, ref, l.Ref, "a deleted box is not listed")
			}
			cs, err := env.Docker.ContainerList(context.Background(), client.ContainerListOptions{
				All: true, Filters: client.Filters{}.Add("label", emulator.Label+"="+ref)})
			require.NoError(t, err)
			require.Empty(t, cs.Items, "the box's container is removed")
		},
	})
	counts := env.Checker.Counts()
	t.Logf("exchanges checked against box-openapi.yaml: %v (all: %d)", counts, len(env.Checker.Seen()))
	require.Positive(t, counts["api"], "the API traffic passed the checker")
	require.Positive(t, counts["api(error)"], "error answers (the destroyed box's 404s) passed the checker")
}

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

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// TestConformanceE2B runs the table on the e2b kind, template open-bot,
// against the emulator (sandboxes as containers of the computer image),
// every exchange with it validated against the vendor's spec.
func TestConformanceE2B(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (the Docker engine)")
	}
	env := emutest.Start(t, nil, nil)
	sealer, err := secret.LoadOrCreate(filepath.Join(tmpRoot, "e2b-conformance", "secret.key"))
	require.NoError(t, err)
	top := t
	newProvider := func(t *testing.T) Provider {
		k, err := e2b.NewKey(env.APIKey, sealer)
		require.NoError(t, err)
		// Every control-plane and envd exchange goes through the spec
		// Checker (a violation fails the test).
		p, err := e2b.New(e2b.Options{APIURL: env.URL, SandboxURL: env.URL, Key: k, ReadyTimeout: 4 * time.Minute,
			HTTPClient: &http.Client{Transport: env.Checker, Timeout: time.Minute}, Transport: env.Checker})
		require.NoError(t, err)
		// Closed with the whole test: the machine a reopened provider
		// returns is used by the later steps (its forwarder is the
		// provider's).
		top.Cleanup(p.Close)
		return NewE2B(p)
	}
	p := newProvider(t)
	conform(t, backend{
		kind: KindE2B, p: p, multiScreen: true,
		reopen: newProvider,
		gone: func(t *testing.T, ref string) {
			r, err := e2b.ParseRef(ref)
			require.NoError(t, err)
			ls, err := p.(*E2B).List(testCtx(t, time.Minute))
			require.NoError(t, err)
			for _, l := range ls {
				require.NotEqual(t, ref, l.Ref, "a destroyed sandbox is not listed")
			}
			cs, err := env.Docker.ContainerList(context.Background(), client.ContainerListOptions{
				All: true, Filters: client.Filters{}.Add("label", emulator.Label+"="+r.SandboxID)})
			require.NoError(t, err)
			require.Empty(t, cs.Items, "the sandbox's container is removed")
		},
	})
}

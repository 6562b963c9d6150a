package providers

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// TestConformanceDaytona runs the table on the daytona kind, snapshot
// open-bot, against the emulator (sandboxes as containers of the computer
// image), every exchange with the API and the toolbox validated against
// the vendor's spec.
func TestConformanceDaytona(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (the Docker engine)")
	}
	env := emutest.Start(t, emutest.Options{})
	sealer, err := secret.LoadOrCreate(filepath.Join(tmpRoot, "daytona-conformance", "secret.key"))
	require.NoError(t, err)
	top := t
	newProvider := func(t *testing.T) Provider {
		k, err := daytona.NewKey(env.APIKey, sealer)
		require.NoError(t, err)
		p, err := daytona.New(daytona.Options{APIURL: env.URL, Key: k, AutoStop: daytona.DefaultAutoStop, ReadyTimeout: 4 * time.Minute,
			HTTPClient: &http.Client{Transport: env.Checker, Timeout: time.Minute}, Transport: env.Checker})
		require.NoError(t, err)
		top.Cleanup(p.Close)
		return NewDaytona(p)
	}
	p := newProvider(t)
	conform(t, backend{
		kind: KindDaytona, p: p, multiScreen: true,
		reopen: newProvider,
		gone: func(t *testing.T, ref string) {
			r, err := daytona.ParseRef(ref)
			require.NoError(t, err)
			ls, err := p.(*Daytona).List(testCtx(t, time.Minute))
			require.NoError(t, err)
			for _, l := range ls {
				require.NotEqual(t, ref, l.Ref, "a deleted sandbox is not listed")
			}
			cs, err := env.Docker.ContainerList(context.Background(), client.ContainerListOptions{
				All: true, Filters: client.Filters{}.Add("label", emulator.Label+"="+r.SandboxID)})
			require.NoError(t, err)
			require.Empty(t, cs.Items, "the sandbox's container is removed")
		},
	})
	seen := map[string]int{}
	for _, x := range env.Checker.Seen() {
		seen[strings.Fields(x)[0]]++
	}
	t.Logf("exchanges checked against the spec: %v", seen)
	require.Positive(t, seen["api"], "the API traffic passed the checker")
	require.Positive(t, seen["toolbox"], "the toolbox traffic passed the checker")
	require.Positive(t, seen["preview"], "botd's traffic went through the preview URL")
}

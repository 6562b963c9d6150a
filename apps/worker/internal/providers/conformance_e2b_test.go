package providers

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/jpeg"
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
	sharedclient "github.com/open-bot/computer/pkg/shared/client"
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

// TestConformanceE2BDesktop runs the table on the e2b kind, template
// desktop (E2B's stock desktop, driven by commands through envd), against
// the emulator's stand-in for it (open-bot/e2b-desktop:dev, user `user`,
// the image's own entrypoint), every exchange validated against the
// vendor's spec.
func TestConformanceE2BDesktop(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (the Docker engine)")
	}
	env := emutest.Start(t, map[string]emulator.Template{e2b.DesktopTemplate: emutest.DesktopTemplate()}, nil)
	sealer, err := secret.LoadOrCreate(filepath.Join(tmpRoot, "e2b-desktop-conformance", "secret.key"))
	require.NoError(t, err)
	top := t
	newProvider := func(t *testing.T) Provider {
		k, err := e2b.NewKey(env.APIKey, sealer)
		require.NoError(t, err)
		p, err := e2b.New(e2b.Options{APIURL: env.URL, SandboxURL: env.URL, Key: k, Template: e2b.DesktopTemplate,
			ReadyTimeout: 4 * time.Minute,
			HTTPClient:   &http.Client{Transport: env.Checker, Timeout: time.Minute}, Transport: env.Checker})
		require.NoError(t, err)
		top.Cleanup(p.Close)
		return NewE2B(p)
	}
	p := newProvider(t)
	conform(t, backend{
		kind: KindE2B, p: p, multiScreen: true,
		reopen:  newProvider,
		botUser: func(string) string { return "user" },
		// The desktop machine archives its workspace as `tar -C ws .`.
		archiveRoot: "./",
		secondScreen: func(t *testing.T, ctx context.Context, m Machine) {
			// The first bot's screen is the sandbox's own display :0, the
			// second bot's starts on :1.
			a, err := m.StartScreen(ctx, "alice")
			require.NoError(t, err)
			require.Equal(t, ":0", a.Display)
			s, err := m.StartScreen(ctx, "bob")
			require.NoError(t, err)
			require.Equal(t, ":1", s.Display, "a second bot's screen is display :1")
			r, err := m.Exec(ctx, sharedclient.ExecRequest{Argv: []string{"xdpyinfo", "-display", ":1"}})
			require.NoError(t, err)
			require.Equal(t, 0, r.ExitCode, "display :1 answers in the sandbox: %s", r.Stderr)
			// observe returns a JPEG of the desktop: a third bot's first
			// observation (later ones carry no image while the screen is
			// unchanged) of its display :2.
			c, err := m.StartScreen(ctx, "carol")
			require.NoError(t, err)
			require.Equal(t, ":2", c.Display)
			for _, id := range []string{"carol"} {
				o := observe(t, ctx, m, id)
				raw, err := base64.StdEncoding.DecodeString(o.Image)
				require.NoError(t, err)
				img, err := jpeg.Decode(bytes.NewReader(raw))
				require.NoError(t, err, "the observation of %s is a JPEG", id)
				require.Equal(t, image.Rect(0, 0, 1280, 800), img.Bounds(), "the screenshot of %s is the whole display", id)
			}
		},
		gone: func(t *testing.T, ref string) {
			r, err := e2b.ParseRef(ref)
			require.NoError(t, err)
			require.Equal(t, e2b.DesktopTemplate, r.Template)
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

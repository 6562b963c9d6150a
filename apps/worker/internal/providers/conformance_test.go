package providers

// One table of behaviours every provider passes, run against real backends:
// local (botd children on this host), docker (the computer image on a real
// engine) and single-screen(local). No fake engine, no fake botd.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/testbin"
)

// Test ranges of this package (HELPERS.md): displays 420-469, ports
// 29000-29999 (below the ephemeral range 32768-60999, where outbound
// connections and published container ports land). 12 slots of 4 displays
// and 15 ports fit both.
const (
	testDisplayBase = 420
	testPortBase    = 29000
	testSlots       = 12
)

// unavailable skips on a laptop and fails under CI=true, where everything
// (root, the desktop tools, a Docker engine and the image) is provisioned.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but integration prerequisite missing: "+format, args...)
	}
	t.Skipf("integration prerequisite missing: "+format, args...)
}

func requireHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (botd runs as root)")
	}
	for _, u := range []string{"desktop", "bot"} {
		if exec.Command("id", u).Run() != nil {
			unavailable(t, "user %s missing (scripts/provision.sh)", u)
		}
	}
	for _, tool := range []string{"codex", "Xvfb", "x11vnc", "xfwm4"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s not on PATH (scripts/provision.sh)", tool)
		}
	}
}

var (
	botdOnce sync.Once
	botdBin  string
	botdErr  error
	tmpRoot  string

	localOnce sync.Once
	localProv *Local
	localErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "providers-test-")
	if err != nil {
		panic(err)
	}
	// botd's users must traverse down to every BOTD_HOME (FIELD-NOTES).
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	tmpRoot = dir
	code := m.Run()
	if localProv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = localProv.Close(ctx)
		cancel()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// testBotd builds botd once from this tree.
func testBotd(t testing.TB) string {
	t.Helper()
	botdOnce.Do(func() {
		botdBin, botdErr = testbin.GoBuild(filepath.Join(tmpRoot, "bin", "botd"), "github.com/open-bot/computer/apps/botd")
	})
	require.NoError(t, botdErr)
	return botdBin
}

// testLocal is the package's one local provider (one per DATA_DIR, and
// its slots are the package's displays and ports).
func testLocal(t testing.TB) *Local {
	t.Helper()
	requireHost(t)
	bin := testBotd(t)
	localOnce.Do(func() {
		localProv, localErr = NewLocal(LocalOptions{
			DataDir: filepath.Join(tmpRoot, "data"), BotdBin: bin,
			DisplayBase: testDisplayBase, PortBase: testPortBase, Slots: testSlots,
			ReadyTimeout: 3 * time.Minute,
		})
	})
	require.NoError(t, localErr)
	return localProv
}

func testToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "tok-" + hex.EncodeToString(b[:])
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// backend is one row of the conformance table.
type backend struct {
	kind        string
	p           Provider
	multiScreen bool
	// reopen is the provider as a restarted worker would make it (the same
	// one where the provider owns processes, like local).
	reopen func(t *testing.T) Provider
	// beforeDestroy, when set, runs on the live machine just before the
	// destroy step (to read what gone must find removed).
	beforeDestroy func(t *testing.T, ref string)
	// gone checks that a destroyed machine left nothing behind.
	gone func(t *testing.T, ref string)
	// botUser names the user the shell runs as (nil: bot).
	botUser func(ref string) string
	// archiveRoot is the workspace's directory inside an export or import
	// archive ("": "bot/", botd's layout).
	archiveRoot string
	// secondScreen, when set, checks more once a second screen runs.
	secondScreen func(t *testing.T, ctx context.Context, m Machine)
}

func TestConformanceLocal(t *testing.T) {
	l := testLocal(t)
	conform(t, backend{
		kind: KindLocal, p: l, multiScreen: true,
		reopen:  func(*testing.T) Provider { return l },
		botUser: func(ref string) string { _, b := l.Users(ref); return b },
		gone: func(t *testing.T, ref string) {
			_, err := os.Stat(l.dir(ref))
			require.True(t, errors.Is(err, os.ErrNotExist), "the computer's directory (home, token) must be removed: %v", err)
		},
	})
}

func TestConformanceSingleScreenLocal(t *testing.T) {
	l := testLocal(t)
	state := filepath.Join(tmpRoot, "single-screen")
	s, err := NewSingleScreen(l, state)
	require.NoError(t, err)
	conform(t, backend{
		kind: KindSingleScreen, p: s, multiScreen: false,
		botUser: func(ref string) string { _, b := l.Users(ref); return b },
		reopen: func(t *testing.T) Provider {
			// A restarted worker still knows which screen came first.
			s2, err := NewSingleScreen(l, state)
			require.NoError(t, err)
			return s2
		},
		gone: func(t *testing.T, ref string) {
			_, err := os.Stat(l.dir(ref))
			require.True(t, errors.Is(err, os.ErrNotExist))
			_, err = os.Stat(s.file(ref))
			require.True(t, errors.Is(err, os.ErrNotExist), "the first-screen record must go with the machine")
		},
	})
}

// conform runs the behaviour table against b, in order, stopping at the
// first failed step (later steps need the earlier ones).
func conform(t *testing.T, b backend) {
	ctx := testCtx(t, 15*time.Minute)
	spec := Spec{ComputerID: "conf-" + strings.ReplaceAll(b.kind, "-", ""), BotdToken: testToken()}
	var (
		ref       string
		m         Machine
		destroyed bool
		booted    time.Time
	)
	t.Cleanup(func() {
		if ref != "" && !destroyed {
			_ = b.p.Destroy(context.Background(), ref)
		}
	})
	const note = "written through the provider boundary\n"
	root := b.archiveRoot
	if root == "" {
		root = "bot/"
	}
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"describe", func(t *testing.T) {
			d := b.p.Describe()
			require.Equal(t, b.kind, d.Kind)
			require.Equal(t, b.multiScreen, d.Capabilities.MultiScreen, "describe must be honest about multiScreen")
			require.True(t, d.Capabilities.Stop && d.Capabilities.Persistent)
		}},
		{"provision", func(t *testing.T) {
			var err error
			ref, err = b.p.Provision(ctx, spec)
			require.NoError(t, err)
			require.NotEmpty(t, ref)
			m, err = b.p.Reconnect(ctx, ref, spec)
			require.NoError(t, err)
			h, err := m.Health(ctx)
			require.NoError(t, err)
			require.True(t, h.OK, "a reconnected machine is healthy")
		}},
		{"observe", func(t *testing.T) {
			require.NoError(t, m.CheckScreen(ctx, "alice"))
			o := observe(t, ctx, m, "alice")
			require.Greater(t, o.Width, 0)
			require.NotEmpty(t, o.Image, "the first observation carries the screenshot")
		}},
		{"act", func(t *testing.T) {
			lease := agentLease(t, ctx, m, "alice")
			x, y := 123, 77
			r, err := m.Act(ctx, "alice", lease, []shared.Action{{Type: shared.ActionMove, X: &x, Y: &y}, {Type: shared.ActionScreenshot}})
			require.NoError(t, err)
			var results []struct {
				OK    bool   `json:"ok"`
				Error string `json:"error"`
			}
			require.NoError(t, json.Unmarshal(r.Results, &results))
			require.Len(t, results, 2)
			for _, res := range results {
				require.True(t, res.OK, res.Error)
			}
			require.Equal(t, shared.Point{X: 123, Y: 77}, r.Observation.Pointer, "the pointer moved where the batch said")
		}},
		{"exec", func(t *testing.T) {
			r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "echo $((6*7)); id -un"}})
			require.NoError(t, err)
			require.Equal(t, 0, r.ExitCode, r.Stderr)
			bot := "bot"
			if b.botUser != nil {
				bot = b.botUser(ref)
			}
			require.Equal(t, "42\n"+bot+"\n", r.Stdout)
		}},
		{"files", func(t *testing.T) {
			c := m
			require.NoError(t, c.WriteFile(ctx, "conformance/note.txt", []byte(note)))
			got, err := c.ReadFile(ctx, "conformance/note.txt", 1<<20)
			require.NoError(t, err)
			require.Equal(t, note, string(got))
			list, err := c.ListFiles(ctx, "conformance")
			require.NoError(t, err)
			require.Contains(t, string(list), `"note.txt"`)
			r, err := c.Exec(ctx, client.ExecRequest{Argv: []string{"cat", "conformance/note.txt"}})
			require.NoError(t, err)
			require.Equal(t, note, r.Stdout, "the shell sees what the file tools wrote")
		}},
		{"second screen", func(t *testing.T) {
			err := m.CheckScreen(ctx, "bob")
			if b.multiScreen {
				require.NoError(t, err)
				o := observe(t, ctx, m, "bob")
				require.NotEmpty(t, o.Image)
				if b.secondScreen != nil {
					b.secondScreen(t, ctx, m)
				}
				return
			}
			require.Error(t, err)
			require.Equal(t, shared.CodeMultiScreen, codeOf(err), "a second screen on a single-screen backend: %v", err)
			require.NoError(t, m.CheckScreen(ctx, "alice"), "the first screen keeps working")
			// bob's shell and file tools keep working.
			r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"echo", "bob"}})
			require.NoError(t, err)
			require.Equal(t, "bob\n", r.Stdout)
			require.NoError(t, m.WriteFile(ctx, "bots/bob/ok.txt", []byte("ok")))
			got, err := m.ReadFile(ctx, "bots/bob/ok.txt", 100)
			require.NoError(t, err)
			require.Equal(t, "ok", string(got))
		}},
		{"export", func(t *testing.T) {
			files := exportWorkspace(t, ctx, m)
			require.Equal(t, note, files[root+"conformance/note.txt"], "the export holds the workspace")
		}},
		{"stop", func(t *testing.T) {
			require.NoError(t, b.p.Stop(ctx, ref))
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := m.Health(hctx)
			require.Error(t, err, "a stopped machine does not answer")
			require.NoError(t, b.p.Stop(ctx, ref), "stopping a stopped machine is fine")
		}},
		{"start", func(t *testing.T) {
			var err error
			m, err = b.p.Reconnect(ctx, ref, spec)
			require.NoError(t, err)
			got, err := m.ReadFile(ctx, "conformance/note.txt", 1<<20)
			require.NoError(t, err)
			require.Equal(t, note, string(got), "stop and start keep the home")
			h, err := m.Health(ctx)
			require.NoError(t, err)
			booted = h.BootedAt
			require.NoError(t, m.CheckScreen(ctx, "alice"))
			o := observe(t, ctx, m, "alice")
			require.NotEmpty(t, o.Image)
		}},
		{"reconnect", func(t *testing.T) {
			p2 := b.reopen(t)
			m2, err := p2.Reconnect(ctx, ref, spec)
			require.NoError(t, err)
			h, err := m2.Health(ctx)
			require.NoError(t, err)
			require.True(t, h.BootedAt.Equal(booted), "reconnect reaches the running botd, it does not start another")
			if !b.multiScreen {
				require.Equal(t, shared.CodeMultiScreen, codeOf(m2.CheckScreen(ctx, "bob")), "the first screen is remembered")
			}
			m = m2
		}},
		{"import", func(t *testing.T) {
			importWorkspace(t, ctx, m, map[string]string{root + "imported/hello.txt": "restored\n"})
			got, err := m.ReadFile(ctx, "imported/hello.txt", 100)
			require.NoError(t, err)
			require.Equal(t, "restored\n", string(got))
		}},
		{"destroy", func(t *testing.T) {
			if b.beforeDestroy != nil {
				b.beforeDestroy(t, ref)
			}
			require.NoError(t, b.p.Destroy(ctx, ref))
			destroyed = true
			_, err := b.p.Reconnect(ctx, ref, spec)
			require.ErrorIs(t, err, ErrGone, "reconnect to a destroyed machine")
			require.ErrorIs(t, b.p.Stop(ctx, ref), ErrGone)
			require.NoError(t, b.p.Destroy(ctx, ref), "destroying twice is fine")
			b.gone(t, ref)
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.FailNow()
		}
	}
}

func codeOf(err error) shared.Code {
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return client.CodeOf(err)
}

func agentLease(t *testing.T, ctx context.Context, c Machine, screen string) string {
	t.Helper()
	_, err := c.StartScreen(ctx, screen)
	require.NoError(t, err)
	l, err := c.AcquireLease(ctx, screen, "agent", "conformance-"+screen, 2*time.Minute)
	require.NoError(t, err)
	return l.LeaseID
}

func observe(t *testing.T, ctx context.Context, c Machine, screen string) client.Observation {
	t.Helper()
	o, err := c.Observe(ctx, screen, agentLease(t, ctx, c, screen))
	require.NoError(t, err)
	return o
}

// exportTar is the machine's whole workspace export (a reader that ends
// early fails).
func exportTar(t *testing.T, ctx context.Context, c Machine) []byte {
	t.Helper()
	rc, err := c.ExportWorkspace(ctx, 0)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

// exportWorkspace reads GET /workspace/export into name → content.
func exportWorkspace(t *testing.T, ctx context.Context, c Machine) map[string]string {
	t.Helper()
	files := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(exportTar(t, ctx, c)))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[h.Name] = string(b)
		}
	}
	return files
}

// importWorkspace PUTs a tar of files (archive name → content).
func importWorkspace(t *testing.T, ctx context.Context, c Machine, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o664, Size: int64(len(content)), Typeflag: tar.TypeReg, Uname: "bot", Gname: "bots", ModTime: time.Now()}))
		_, err := tw.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, importTar(ctx, c, buf.Bytes()))
}

// importTar is the machine's workspace import.
func importTar(ctx context.Context, c Machine, archive []byte) error {
	_, err := c.ImportWorkspace(ctx, bytes.NewReader(archive))
	return err
}

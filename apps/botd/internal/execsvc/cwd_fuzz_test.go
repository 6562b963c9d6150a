package execsvc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-bot/computer/apps/botd/internal/execsvc"
)

// FuzzResolveCwd: whatever cwd a caller sends, the directory a command
// would start in is the workspace or beneath it, symlinks resolved.
func FuzzResolveCwd(f *testing.F) {
	for _, s := range []string{"", ".", "..", "/", "/etc", "shared", "shared/../..", "abs-out", "abs-out/x",
		"in-link", "in-link/..", "shared//downloads/", "\x00", "\xff", strings.Repeat("a/", 3000)} {
		f.Add(s)
	}
	fx := newFixture(f, execsvc.Options{})
	if err := os.Symlink("shared/downloads", filepath.Join(fx.ws, "in-link")); err != nil {
		f.Fatal(err)
	}
	ws, err := filepath.EvalSymlinks(fx.ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cwd string) {
		dir, err := execsvc.ResolveCwd(fx.ws, cwd)
		if err != nil {
			return
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			t.Fatalf("cwd %q resolved to %q, which does not resolve: %v", cwd, dir, err)
		}
		if real != ws && !strings.HasPrefix(real, ws+"/") {
			t.Fatalf("cwd %q leads to %q, outside the workspace %q", cwd, real, ws)
		}
	})
}

package deploytest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/open-bot/computer/apps/worker/internal/testenv"
)

// run runs argv (no shell) and returns its stdout (testenv.Run).
var run = testenv.Run

var (
	sourceOnce sync.Once
	sourceText string
)

// workerReads reports whether the worker's own code (apps/worker, tests
// left out) reads the environment variable name: a quoted "NAME" in its
// source, or "BASE" for a NAME_FILE (the worker reads those as
// secretEnv(BASE)). A deploy file that sets a variable nothing reads is
// claiming something the code does not do.
func workerReads(t *testing.T, name string) bool {
	t.Helper()
	sourceOnce.Do(func() {
		var b strings.Builder
		root := filepath.Join(testenv.RepoRoot(t), "apps", "worker")
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(p)
			if err == nil {
				b.Write(src)
			}
			return nil
		})
		sourceText = b.String()
	})
	if strings.Contains(sourceText, `"`+name+`"`) {
		return true
	}
	base, ok := strings.CutSuffix(name, "_FILE")
	return ok && strings.Contains(sourceText, `"`+base+`"`)
}

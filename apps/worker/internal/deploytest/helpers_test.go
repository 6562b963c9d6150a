package deploytest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// unavailable skips on a laptop and fails under CI=true (the testenv rule).
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but integration prerequisite missing: "+format, args...)
	}
	t.Skipf("integration prerequisite missing: "+format, args...)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test's directory")
		}
		dir = parent
	}
}

// run runs argv (no shell) and returns its stdout; stderr goes in the error.
func run(ctx context.Context, name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

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
		root := filepath.Join(repoRoot(t), "apps", "worker")
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

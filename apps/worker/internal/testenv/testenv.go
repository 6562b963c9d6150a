// Package testenv holds the rules the worker's integration test packages
// share: a missing prerequisite skips on a laptop and fails under CI=true,
// and the repository's root is the directory holding go.work.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Unavailable skips t on a laptop and fails it under CI=true: no tier of
// tests may skip silently in CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but integration prerequisite missing: "+format, args...)
	}
	t.Skipf("integration prerequisite missing: "+format, args...)
}

// RepoRoot walks up from the test's directory to the one holding go.work.
func RepoRoot(t testing.TB) string {
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

// Run runs name with args (argv, no shell) and returns its stdout,
// trimmed. A failure's error names the program and its first argument
// only (the others may carry a secret's env) and ends with its stderr.
func Run(ctx context.Context, name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		first := ""
		if len(args) > 0 {
			first = " " + args[0]
		}
		return out.String(), fmt.Errorf("%s%s: %w: %s", name, first, err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// Package testenv holds the rules the worker's integration test packages
// share: a missing prerequisite skips on a laptop and fails under CI=true,
// and the repository's root is the directory holding go.work.
package testenv

import (
	"os"
	"path/filepath"
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

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestServeStartErrors: the worker refuses to start, clearly and without
// touching anything, on an unknown provider kind, a database that is not
// one, a DATA_DIR another worker uses, or a secret key readable by others.
func TestServeStartErrors(t *testing.T) {
	cfg := func(dir string) serveConfig {
		return serveConfig{DataDir: dir, MachinesDir: filepath.Join(dir, "machines"), Provider: "attach", Token: "serve-test-token-0123456789", Approvals: "decline"}
	}
	dir := t.TempDir()
	c := cfg(dir)
	c.Provider = "e3b"
	_, err := newWorker(t.Context(), c, zerolog.Nop())
	require.ErrorContains(t, err, `WORKER_PROVIDER="e3b": unknown provider kind (this worker has: attach, box, daytona, docker, e2b, kubernetes, local, single-screen)`)
	c.Provider = "e2b"
	c.Getenv = func(string) string { return "" }
	_, err = newWorker(t.Context(), c, zerolog.Nop())
	require.ErrorContains(t, err, "WORKER_PROVIDER=e2b: set E2B_API_KEY or E2B_API_KEY_FILE")

	junk := []byte("these are somebody's notes, not a database\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "worker.db"), junk, 0o600))
	_, err = newWorker(t.Context(), cfg(dir), zerolog.Nop())
	require.ErrorContains(t, err, "is not a SQLite database (left untouched")
	b, _ := os.ReadFile(filepath.Join(dir, "worker.db"))
	require.Equal(t, junk, b)

	dir2 := t.TempDir()
	w, err := newWorker(t.Context(), cfg(dir2), zerolog.Nop())
	require.NoError(t, err)
	_, err = newWorker(t.Context(), cfg(dir2), zerolog.Nop())
	require.ErrorContains(t, err, "in use by another worker")
	require.NoError(t, w.Close())
	key := filepath.Join(dir2, "secret.key")
	require.NoError(t, os.Chmod(key, 0o644))
	_, err = newWorker(t.Context(), cfg(dir2), zerolog.Nop())
	require.ErrorContains(t, err, "readable by others")
	require.NoError(t, os.Chmod(key, 0o600))
	w, err = newWorker(t.Context(), cfg(dir2), zerolog.Nop())
	require.NoError(t, err, "the same DATA_DIR opens again once it is fixed")
	require.NoError(t, w.Close())
}

// TestServeRejectsApprovalPolicy: a Codex approval policy the worker does not
// offer (on-request never asks under the threads' full-access sandbox) stops
// the start with the accepted values, before anything listens.
func TestServeRejectsApprovalPolicy(t *testing.T) {
	t.Setenv("DATA_DIR", t.TempDir())
	t.Setenv("WORKER_TOKEN", "serve-test-token-0123456789")
	t.Setenv("WORKER_LISTEN", "127.0.0.1:0")
	for _, bad := range []string{"on-request", "sometimes"} {
		t.Setenv("WORKER_APPROVAL_POLICY", bad)
		err := runServe(t.Context(), nil)
		require.ErrorContains(t, err, `approval-policy: want never or untrusted, got "`+bad+`"`)
	}
}

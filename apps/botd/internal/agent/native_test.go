package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

func TestResolveNative(t *testing.T) {
	// A fake npm layout: bin/codex.js and the platform package's binary.
	dir := t.TempDir()
	root := filepath.Join(dir, "lib", "node_modules", "@openai", "codex")
	js := filepath.Join(root, "bin", "codex.js")
	native := filepath.Join(root, "node_modules", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex")
	for _, f := range []string{js, native} {
		require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o755))
		require.NoError(t, os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755))
	}
	link := filepath.Join(dir, "codex")
	require.NoError(t, os.Symlink(js, link))
	got, env := resolveNative(link)
	require.Equal(t, native, got)
	require.Contains(t, env, "CODEX_MANAGED_PACKAGE_ROOT="+root)

	// Anything else is left as it is.
	plain := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o755))
	got, env = resolveNative(plain)
	require.Equal(t, plain, got)
	require.Nil(t, env)
	got, _ = resolveNative("no-such-codex-binary")
	require.Equal(t, "no-such-codex-binary", got)
}

// TestResolveNativeInstalledCodex: the installed Codex resolves to its
// native binary when npm installed it as a script, and is left alone when
// it is a binary already. CI provisions Codex, so there it cannot skip.
func TestResolveNativeInstalledCodex(t *testing.T) {
	testenv.RequireTools(t, "codex")
	p, err := exec.LookPath("codex")
	require.NoError(t, err)
	real, err := filepath.EvalSymlinks(p)
	require.NoError(t, err)
	got, _ := resolveNative("codex")
	if filepath.Ext(real) == ".js" {
		require.NotEqual(t, "codex", got)
		require.FileExists(t, got)
		require.NotEqual(t, ".js", filepath.Ext(got))
	} else {
		require.Equal(t, "codex", got)
	}
}

package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

func TestExecOnly(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	// A native binary (any ELF will do): read is taken from group and others.
	self, err := os.Executable()
	require.NoError(t, err)
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	elf := filepath.Join(dir, "codex")
	require.NoError(t, os.WriteFile(elf, b, 0o755))
	require.NoError(t, os.Chmod(elf, 0o755))
	changed, err := execOnly(elf)
	require.NoError(t, err)
	require.True(t, changed)
	st, err := os.Stat(elf)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o711), st.Mode().Perm())
	changed, err = execOnly(elf)
	require.NoError(t, err)
	require.False(t, changed, "already exec-only")

	// A script, a binary another user owns and a world-writable one are refused.
	script := filepath.Join(dir, "codex.js")
	require.NoError(t, os.WriteFile(script, []byte("#!/usr/bin/env node\n"), 0o755))
	_, err = execOnly(script)
	require.ErrorContains(t, err, "not a native executable")
	require.NoError(t, os.Chown(elf, 60101, 60101))
	_, err = execOnly(elf)
	require.ErrorContains(t, err, "not root's")
	require.NoError(t, os.Chown(elf, 0, 0))
	require.NoError(t, os.Chmod(elf, 0o757))
	_, err = execOnly(elf)
	require.ErrorContains(t, err, "writable by anyone")
}

package testbin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPrebuilt(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(Env, dir)
	const botd = "github.com/open-bot/computer/apps/botd"
	require.Empty(t, Prebuilt(botd), "no file: none")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "botd"), []byte("#!/bin/sh\n"), 0o644))
	require.Empty(t, Prebuilt(botd), "not executable: none")
	require.NoError(t, os.Chmod(filepath.Join(dir, "botd"), 0o755))
	require.Equal(t, filepath.Join(dir, "botd"), Prebuilt(botd))
	require.Empty(t, Prebuilt("github.com/open-bot/computer/apps/worker/internal/mockmodel/mockserve"), "only what make build builds")
	require.NoError(t, os.Symlink("/bin/true", filepath.Join(dir, "worker")))
	require.Empty(t, Prebuilt("github.com/open-bot/computer/apps/worker"), "a link: none")
	t.Setenv(Env, "")
	require.Empty(t, Prebuilt(botd), "no directory named: none")
}

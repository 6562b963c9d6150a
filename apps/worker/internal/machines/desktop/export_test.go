package desktop

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// runExportScript runs exportScript here (sh, find and GNU tar of this
// host) on ws with find expression expr, and returns the archive's names,
// the script's status and its stderr.
func runExportScript(t *testing.T, ws string, expr ...string) ([]string, int, string) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", exportScript, "sh", ws}, expr...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return tarNames(t, &out), code, errb.String()
}

// TestExportScriptRemovedMeanwhile: an entry find listed and that is gone
// when tar comes to it is left out, and the export succeeds (botd's
// export does the same); any other tar error still fails it, alone or
// beside a removed entry.
func TestExportScriptRemovedMeanwhile(t *testing.T) {
	for _, tool := range []string{"sh", "find", "tar", "grep"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the export script needs %s", tool)
	}
	mk := func() string {
		ws := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(ws, "keep"), []byte("keep"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "gone"), []byte("gone"), 0o644))
		return ws
	}

	// find prints ./gone, then deletes it: tar finds it missing.
	names, code, stderr := runExportScript(t, mk(), "-print0", "-name", "gone", "-delete")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Equal(t, []string{"./", "./keep"}, names)

	// An entry under a regular file: "Cannot stat: Not a directory".
	names, code, stderr = runExportScript(t, mk(), "-print0", "-name", "keep", "-printf", `./keep/x\0`)
	require.Equal(t, 2, code, "archive: %v", names)
	require.Contains(t, stderr, "Not a directory")

	// Both: the other error still fails the export.
	_, code, stderr = runExportScript(t, mk(), "-print0", "(", "-name", "gone", "-delete", ")", "-o", "-name", "keep", "-printf", `./keep/x\0`)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "Not a directory")
	require.Contains(t, stderr, "No such file or directory")
}

// tarNames is the sorted names of the entries of the tar in r.
func tarNames(t *testing.T, r io.Reader) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	sort.Strings(names)
	return names
}

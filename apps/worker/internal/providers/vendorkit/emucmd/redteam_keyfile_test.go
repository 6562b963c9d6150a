package emucmd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The red-team rows for the emulators' -key-file (issue 36, row 7): the
// file is made in a shared directory (/tmp), so another user may have put
// something at its path first. APIKey exits the process on an error, so
// each row runs it in a child of this test binary.

const keyfileChildEnv = "EMUCMD_REDTEAM_KEYFILE"

// TestMain runs the child: APIKey on the path keyfileChildEnv names,
// printing only the key's length (never the key).
func TestMain(m *testing.M) {
	if p := os.Getenv(keyfileChildEnv); p != "" {
		c := Cmd{Name: "redteam-emulator", Env: "REDTEAM_EMU", KeyPrefix: "rt_"}
		fmt.Println(len(c.APIKey(p)))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runAPIKey runs APIKey(path) in a child; it returns the child's output and
// whether it exited 0.
func runAPIKey(t *testing.T, path string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), keyfileChildEnv+"="+path, "REDTEAM_EMU_API_KEY=", "REDTEAM_EMU_API_KEY_FILE=")
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// nobody is the uid and gid a planted file is given (another user's).
const nobody = 65534

func rootOrSkip(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but not root: the planted files must belong to another user (nobody)")
		}
		t.Skip("needs root to plant a file owned by nobody")
	}
}

// TestRedTeamKeyFile: whatever is at -key-file's path before the emulator
// starts is neither written through nor handed the key.
func TestRedTeamKeyFile(t *testing.T) {
	rootOrSkip(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o1777)) // a /tmp-like directory

	t.Run("a world-readable file planted by another user is not given the key", func(t *testing.T) {
		path := filepath.Join(dir, "planted-key")
		planted := []byte("planted-by-nobody\n")
		require.NoError(t, os.WriteFile(path, planted, 0o666))
		require.NoError(t, os.Chmod(path, 0o666))
		require.NoError(t, os.Chown(path, nobody, nobody))
		out, ok := runAPIKey(t, path)
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, string(planted), string(got), "the key was written into a file nobody planted and reads: %s", out)
		require.False(t, ok, "the emulator started with a key file another user owns: %s", out)
		require.Contains(t, out, "already exists", "the refusal says why: %s", out)
	})

	t.Run("a symlink planted at the path does not overwrite its target", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "root-only")
		secret := []byte("root's own file\n")
		require.NoError(t, os.WriteFile(target, secret, 0o600))
		path := filepath.Join(dir, "symlinked-key")
		require.NoError(t, os.Symlink(target, path))
		require.NoError(t, os.Lchown(path, nobody, nobody))
		out, ok := runAPIKey(t, path)
		got, err := os.ReadFile(target)
		require.NoError(t, err)
		require.Equal(t, string(secret), string(got), "the symlink's target was overwritten: %s", out)
		require.False(t, ok, "the emulator followed a symlink at its key path: %s", out)
	})

	t.Run("a file of this user's but readable by others is refused", func(t *testing.T) {
		path := filepath.Join(dir, "loose-key")
		require.NoError(t, os.WriteFile(path, []byte("old\n"), 0o644))
		require.NoError(t, os.Chmod(path, 0o644))
		out, ok := runAPIKey(t, path)
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, "old\n", string(got), "a key went into a 0644 file: %s", out)
		require.False(t, ok, "%s", out)
	})

	t.Run("a fresh path gets a 0600 file of this user's", func(t *testing.T) {
		path := filepath.Join(dir, "fresh-key")
		out, ok := runAPIKey(t, path)
		require.True(t, ok, "%s", out)
		require.NotContains(t, out, "rt_", "the key was printed")
		fi, err := os.Lstat(path)
		require.NoError(t, err)
		require.True(t, fi.Mode().IsRegular())
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		require.Equal(t, uint32(os.Geteuid()), fi.Sys().(*syscall.Stat_t).Uid)
		first, err := os.ReadFile(path)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(first), "rt_"), "the file holds the made key")

		// The documented commands run again with the same -key-file: the
		// emulator's own earlier file (this user's, 0600, regular) is
		// taken and given a new key.
		out, ok = runAPIKey(t, path)
		require.True(t, ok, "a second run on the emulator's own key file: %s", out)
		second, err := os.ReadFile(path)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(second), "rt_"))
		require.False(t, bytes.Equal(first, second), "a new key each start")
		fi, err = os.Lstat(path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	})
}

package workspace_test

import (
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/workspace"
)

// mountTmpfs mounts a tmpfs of size bytes at dir for the test (a file system
// that takes a 1 PB sparse file: ext4 stops at 16 TiB). It skips where
// mounting is not allowed, unless CI=true.
func mountTmpfs(t testing.TB, dir string, size int64) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+itoa(size)+",mode=0755"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but tmpfs cannot be mounted: %v", err)
		}
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// truncate makes a sparse file of size bytes the way a bot's shell would.
func truncate(t testing.TB, p, size string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	out, err := exec.Command("truncate", "-s", size, p).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// exportMax is GET /workspace/export?maxBytes=max (0: none), the body read
// to its end.
func (c *computer) exportMax(t testing.TB, max int64) (int, []byte, http.Header) {
	t.Helper()
	u := c.url + "/workspace/export"
	if max > 0 {
		u += "?maxBytes=" + itoa(max)
	}
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b, resp.Trailer
}

// Red team: `truncate -s 3G` and `truncate -s 1P` in a bot's workspace use
// no disk; the export leaves such sparse files out (counted as skipped)
// instead of streaming gigabytes or a petabyte of zeros, and keeps the
// rest of the home. A file with a small hole is still archived whole.
func TestExportLeavesOutSparseFiles(t *testing.T) {
	u := lookupUsers(t)
	c := newComputer(t, u, workspace.Options{})
	c.put(t, "bot/bots/bob/notes.txt", "kept", u.bot.UID, uint32(osuser.BotsGID), 0o664)
	truncate(t, c.path("bot/bots/bob/sparse.bin"), "3G")
	mountTmpfs(t, c.path("bot/bots/bob/big"), 16<<20)
	truncate(t, c.path("bot/bots/bob/big/petabyte.bin"), "1P")
	// 2 MiB of data with a 64 KiB hole in the middle: not sparse enough to
	// leave out.
	small := c.path("bot/bots/bob/small-hole.bin")
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	f, err := os.Create(small)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	_, err = f.WriteAt(data, 1<<20+64<<10)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	st, body, tr := c.exportMax(t, 0)
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.NotEmpty(t, tr.Get("X-Export-Files"), "a whole export")
	require.Less(t, len(body), 8<<20, "the archive holds no zeros of the sparse files")
	got := readTar(t, body)
	require.Contains(t, got, "bot/bots/bob/notes.txt")
	require.NotContains(t, got, "bot/bots/bob/sparse.bin")
	require.NotContains(t, got, "bot/bots/bob/big/petabyte.bin")
	require.Contains(t, got, "bot/bots/bob/small-hole.bin")
	require.Len(t, got["bot/bots/bob/small-hole.bin"].body, 2<<20+64<<10)
	require.Equal(t, "2", tr.Get("X-Export-Skipped"))
}

// The export stops at the caller's maxBytes: a 413 when not even the first
// header fits, else a stream without the completion trailers and with the
// reason. It never produces what its own import refuses (more content or
// entries than the import accepts).
func TestExportStopsAtLimits(t *testing.T) {
	u := lookupUsers(t)
	c := newComputer(t, u, workspace.Options{MaxImportBytes: 3 << 20, MaxImportEntries: 50})
	big := make([]byte, 2<<20)
	_, _ = rand.Read(big)
	c.put(t, "bot/bots/bob/a.bin", string(big), u.bot.UID, uint32(osuser.BotsGID), 0o664)

	st, whole, tr := c.exportMax(t, 0)
	require.Equal(t, http.StatusOK, st)
	require.NotEmpty(t, tr.Get("X-Export-Files"))
	size := int64(len(whole))

	// At the limit: whole.
	st, b, tr := c.exportMax(t, size)
	require.Equal(t, http.StatusOK, st)
	require.NotEmpty(t, tr.Get("X-Export-Files"))
	require.Equal(t, whole, b)

	// One byte under: refused, never more than the limit sent.
	st, b, tr = c.exportMax(t, size-1)
	require.Equal(t, http.StatusOK, st, "headers were sent before the limit was reached")
	require.Empty(t, tr.Get("X-Export-Files"), "never taken for a whole archive")
	require.Contains(t, tr.Get("X-Export-Error"), "limit of")
	require.LessOrEqual(t, int64(len(b)), size-1)

	// A file larger than the limit is refused before it is read.
	st, b, tr = c.exportMax(t, 1<<20)
	require.Equal(t, http.StatusOK, st)
	require.Contains(t, tr.Get("X-Export-Error"), "a.bin")
	require.Less(t, len(b), 64<<10)

	// Nothing fits: 413 before any byte.
	st, b, _ = c.exportMax(t, 100)
	require.Equal(t, http.StatusRequestEntityTooLarge, st, "%s", b)
	require.Contains(t, string(b), "payload_too_large")

	// More content than the import accepts.
	c.put(t, "bot/bots/bob/b.bin", string(big), u.bot.UID, uint32(osuser.BotsGID), 0o664)
	st, _, tr = c.exportMax(t, 0)
	require.Equal(t, http.StatusOK, st)
	require.Empty(t, tr.Get("X-Export-Files"))
	require.Contains(t, tr.Get("X-Export-Error"), "more than an import accepts")
	require.NoError(t, os.Remove(c.path("bot/bots/bob/b.bin")))

	// More entries than the import accepts.
	for i := range 60 {
		c.put(t, "bot/bots/bob/many/"+itoa(int64(i)), "x", u.bot.UID, uint32(osuser.BotsGID), 0o664)
	}
	st, _, tr = c.exportMax(t, 0)
	require.Equal(t, http.StatusOK, st)
	require.Empty(t, tr.Get("X-Export-Files"))
	require.Contains(t, tr.Get("X-Export-Error"), "entries")
}

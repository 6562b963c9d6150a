package homes

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/worker/internal/testbotd"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Displays and loopback ports of this file's tests (no other test uses
// them): botd displays 580-587, botd view ports 15050+ and 15150+, the
// hostile export server in 15400-15499.
const (
	boundsDisplayA = 580
	boundsDisplayB = 584
	boundsPortA    = 15000
	boundsPortB    = 15100
)

// listenBand listens on the first free 127.0.0.1 port in [from, to).
func listenBand(t testing.TB, from, to int) net.Listener {
	t.Helper()
	for p := from; p < to; p++ {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			return l
		}
	}
	t.Fatalf("no free loopback port in %d-%d", from, to)
	return nil
}

// mountTmpfs mounts a tmpfs of size bytes at dir for the test; it skips
// where mounting is not allowed, unless CI=true.
func mountTmpfs(t testing.TB, dir string, size int64) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but tmpfs cannot be mounted: %v", err)
		}
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// hostileBotd is a machine whose botd lies: its export ignores maxBytes,
// streams send() bytes and then claims a whole archive (the completion
// trailer). It is the attacker a compromised machine is.
type hostileBotd struct {
	send func() []byte
}

func (h *hostileBotd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/workspace/export" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Trailer", "X-Export-Files")
	w.Header().Set("Content-Type", "application/x-tar")
	b := h.send()
	for len(b) > 0 {
		n := min(len(b), 64<<10)
		if _, err := w.Write(b[:n]); err != nil {
			return
		}
		b = b[n:]
	}
	w.Header().Set("X-Export-Files", "1")
}

// Red team, worker side: a machine whose botd ignores the cap and streams
// more than COMPUTER_HOME_MAX_BYTES (claiming a whole export) never gets a
// checkpoint past the cap: the worker counts what arrives and stops one
// byte past it; the checkpoint fails and the previous one stays
// restorable, on both stores.
func TestCheckpointCapHostileBotd(t *testing.T) {
	for _, st := range []struct {
		name string
		open func(t *testing.T) (Store, string)
	}{
		{"local", func(t *testing.T) (Store, string) {
			dir := t.TempDir()
			l, err := NewLocal(dir)
			require.NoError(t, err)
			return l, filepath.Join(dir, "homes")
		}},
		{"s3", func(t *testing.T) (Store, string) { return newFakeS3(t, s3mem.New(), t.TempDir()), "" }},
	} {
		t.Run(st.name, func(t *testing.T) {
			store, dir := st.open(t)
			first := payload(7, 512<<10)
			big := payload(8, 8<<20)
			h := &hostileBotd{send: func() []byte { return first }}
			srv := &http.Server{Handler: h}
			l := listenBand(t, 15400, 15500)
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })
			m := machine(client.New("http://"+l.Addr().String(), "hostile-token-0123456789", nil))

			cp := NewCheckpointer(store)
			cp.MaxBytes = 1 << 20
			ctx := t.Context()
			rev, err := cp.Checkpoint(ctx, "computer-h", m)
			require.NoError(t, err)
			require.Equal(t, int64(len(first)), rev.Size)

			h.send = func() []byte { return big }
			_, err = cp.Checkpoint(ctx, "computer-h", m)
			require.ErrorIs(t, err, ErrTooLarge, "%v", err)
			require.Contains(t, err.Error(), "previous checkpoint is kept")
			still, ok, err := store.Latest(ctx, "computer-h")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, rev, still)
			got, _ := readAll(t, store, "computer-h")
			require.Equal(t, sum(first), sum(got), "the previous checkpoint is whole")
			if dir != "" {
				names, err := readDirNames(dir)
				require.NoError(t, err)
				require.Equal(t, []string{"computer-h"}, names, "no staged file is left")
			}
		})
	}
}

// entryNames lists the stored tar's entries.
func entryNames(t *testing.T, s Store, key string) map[string]int64 {
	t.Helper()
	b, _ := readAll(t, s, key)
	tr := tar.NewReader(bytes.NewReader(b))
	out := map[string]int64{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out[h.Name] = h.Size
	}
}

func truncate(t testing.TB, p, size string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	out, err := exec.Command("truncate", "-s", size, p).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// Red team (issue 25): `truncate -s 3G bots/bob/sparse.bin` used no disk
// and made the next checkpoint write 3,223,366,656 bytes; `-s 1P` filled
// the worker's disk. Now both files are left out at the source (botd's
// export), the checkpoint holds the rest of the home, stays small, and
// restores.
func TestCheckpointSparseFilesRealBotd(t *testing.T) {
	testbotd.Require(t)
	ctx := t.Context()
	b := testbotd.Start(t, testbotd.Options{DisplayBase: boundsDisplayA, PortBase: boundsPortA})
	require.NoError(t, b.Client.WriteFile(ctx, "bots/bob/notes.txt", []byte("the rest of the home\n")))
	store, err := NewLocal(t.TempDir())
	require.NoError(t, err)
	cp := NewCheckpointer(store) // the default cap (10 GiB): the source must refuse

	truncate(t, filepath.Join(b.Home, "bot/bots/bob/sparse.bin"), "3G")
	rev, err := cp.Checkpoint(ctx, "computer-s", machine(b.Client))
	require.NoError(t, err)
	t.Logf("checkpoint with a 3 GB sparse file: %d bytes", rev.Size)
	require.Less(t, rev.Size, int64(8<<20), "the 3 GB of holes are not in the checkpoint")
	names := entryNames(t, store, "computer-s")
	require.Contains(t, names, "bot/bots/bob/notes.txt")
	require.NotContains(t, names, "bot/bots/bob/sparse.bin")

	// 1 PB: on a tmpfs inside the workspace (ext4 stops at 16 TiB).
	mountTmpfs(t, filepath.Join(b.Home, "bot/bots/bob/big"), 16<<20)
	truncate(t, filepath.Join(b.Home, "bot/bots/bob/big/petabyte.bin"), "1P")
	rev, err = cp.Checkpoint(ctx, "computer-s", machine(b.Client))
	require.NoError(t, err)
	t.Logf("checkpoint with a 1 PB sparse file: %d bytes", rev.Size)
	require.Less(t, rev.Size, int64(8<<20))
	names = entryNames(t, store, "computer-s")
	require.Contains(t, names, "bot/bots/bob/notes.txt")
	require.NotContains(t, names, "bot/bots/bob/big/petabyte.bin")

	// It restores: the notes come back.
	require.NoError(t, os.Remove(filepath.Join(b.Home, "bot/bots/bob/notes.txt")))
	res, ok, err := cp.Restore(ctx, "computer-s", machine(b.Client))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rev.Number, res.Revision.Number)
	got, err := b.Client.ReadFile(ctx, "bots/bob/notes.txt", 1<<20)
	require.NoError(t, err)
	require.Equal(t, "the rest of the home\n", string(got))
}

// exportSize is the byte count of a whole export of m's home now.
func exportSize(t *testing.T, c *client.Client) int64 {
	t.Helper()
	rc, err := c.ExportWorkspace(t.Context())
	require.NoError(t, err)
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	require.NoError(t, err)
	return n
}

// A home at the cap: a checkpoint whose tar is exactly COMPUTER_HOME_MAX_BYTES
// is kept; one byte over fails (checkpoint_failed in a run's events), and
// the previous revision is still the latest and restores. Codex writes
// under bot/.codex on its own, so the home's size can move between the
// measure and the checkpoint: each case is tried a few times, and every
// checkpoint that succeeds must fit its cap.
func TestCheckpointAtTheCapRealBotd(t *testing.T) {
	testbotd.Require(t)
	ctx := t.Context()
	b := testbotd.Start(t, testbotd.Options{DisplayBase: boundsDisplayB, PortBase: boundsPortB})
	first := make([]byte, 1<<20)
	_, _ = rand.Read(first)
	require.NoError(t, b.Client.WriteFile(ctx, "bots/bob/first.bin", first))
	store, err := NewLocal(t.TempDir())
	require.NoError(t, err)
	cp := NewCheckpointer(store)
	const tries = 5

	// At the cap: kept.
	var kept Revision
	for i := 0; ; i++ {
		require.Less(t, i, tries, "a home exactly at the cap was never checkpointed")
		size := exportSize(t, b.Client)
		cp.MaxBytes = size
		rev, err := cp.Checkpoint(ctx, "computer-c", machine(b.Client))
		if err != nil {
			require.ErrorIs(t, err, ErrTooLarge, "%v", err)
			t.Logf("the home grew between the measure and the checkpoint: %v", err)
			continue
		}
		require.LessOrEqual(t, rev.Size, size, "a checkpoint fits its cap")
		kept = rev
		if rev.Size == size {
			break
		}
	}

	// The home grows; the cap is one byte under its tar: refused.
	second := make([]byte, 64<<10)
	_, _ = rand.Read(second)
	require.NoError(t, b.Client.WriteFile(ctx, "bots/bob/second.bin", second))
	for i := 0; ; i++ {
		require.Less(t, i, tries, "a home one byte over the cap was never refused")
		cp.MaxBytes = exportSize(t, b.Client) - 1
		rev, err := cp.Checkpoint(ctx, "computer-c", machine(b.Client))
		if err == nil {
			require.LessOrEqual(t, rev.Size, cp.MaxBytes, "a checkpoint fits its cap")
			t.Logf("the home shrank between the measure and the checkpoint")
			kept = rev
			continue
		}
		require.ErrorIs(t, err, ErrTooLarge, "%v", err)
		require.Contains(t, err.Error(), "previous checkpoint is kept")
		t.Logf("over the cap: %v", err)
		break
	}
	latest, ok, err := store.Latest(ctx, "computer-c")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, kept, latest, "the previous revision is still the latest")

	// ... and restores.
	require.NoError(t, os.Remove(filepath.Join(b.Home, "bot/bots/bob/first.bin")))
	res, ok, err := cp.Restore(ctx, "computer-c", machine(b.Client))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, kept.Number, res.Revision.Number)
	got, err := b.Client.ReadFile(ctx, "bots/bob/first.bin", 2<<20)
	require.NoError(t, err)
	require.Equal(t, sum(first), sum(got))
}

// statfsFree is the free bytes of the file system holding dir.
func statfsFree(t testing.TB, dir string) int64 {
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	return int64(st.Bavail) * int64(st.Bsize)
}

// watchReader yields n bytes of payload and records the least free space
// it saw on dir's file system between reads.
type watchReader struct {
	t       testing.TB
	dir     string
	src     []byte
	off     int
	minFree int64
}

func (w *watchReader) Read(p []byte) (int, error) {
	if f := statfsFree(w.t, w.dir); f < w.minFree {
		w.minFree = f
	}
	if w.off >= len(w.src) {
		return 0, io.EOF
	}
	n := copy(p, w.src[w.off:])
	w.off += n
	return n, nil
}

// The worker's disk (DATA_DIR holds the database and every team's
// checkpoints) keeps COMPUTER_HOME_MIN_FREE_BYTES: a Put is refused before
// it writes when the disk is already below it, and a Put that would go
// below it stops there (staged in a temp file, never renamed), the
// previous checkpoint kept and restorable.
func TestLocalKeepsFreeSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	mountTmpfs(t, dataDir, 32<<20)
	l, err := NewLocal(dataDir)
	require.NoError(t, err)
	l.MinFree = 8 << 20
	ctx := t.Context()
	a := payload(1, 1<<20)
	rev, err := l.Put(ctx, "k", bytes.NewReader(a))
	require.NoError(t, err)

	// Runs out midway: 40 MiB onto a disk with about 30 MiB free.
	w := &watchReader{t: t, dir: dataDir, src: payload(2, 40<<20), minFree: statfsFree(t, dataDir)}
	_, err = l.Put(ctx, "k", w)
	require.ErrorIs(t, err, ErrNoSpace, "%v", err)
	require.Contains(t, err.Error(), "previous checkpoint is kept")
	t.Logf("least free space seen while staging: %d bytes (reserve %d)", w.minFree, l.MinFree)
	require.GreaterOrEqual(t, w.minFree, l.MinFree-(1<<20), "the Put stopped at the reserve, not at a full disk")
	latest, _, err := l.Latest(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, rev, latest)
	got, _ := readAll(t, l, "k")
	require.Equal(t, sum(a), sum(got))
	names, err := readDirNames(filepath.Join(dataDir, "homes"))
	require.NoError(t, err)
	require.Equal(t, []string{"k"}, names, "the staged file is gone")

	// Already below the reserve: refused before a byte is read or written.
	filler := filepath.Join(dataDir, "filler")
	free := statfsFree(t, dataDir)
	require.NoError(t, os.WriteFile(filler, make([]byte, free-(6<<20)), 0o600))
	w = &watchReader{t: t, dir: dataDir, src: payload(3, 1024), minFree: statfsFree(t, dataDir)}
	_, err = l.Put(ctx, "k", w)
	require.ErrorIs(t, err, ErrNoSpace, "%v", err)
	require.Zero(t, w.off, "nothing was read before the check")
	got, _ = readAll(t, l, "k")
	require.Equal(t, sum(a), sum(got))
	require.True(t, strings.Contains(err.Error(), "COMPUTER_HOME_MIN_FREE_BYTES"), err.Error())
}

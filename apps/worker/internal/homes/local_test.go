package homes

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func localHarness() harness {
	return harness{
		open: func(t *testing.T) Store {
			s, err := NewLocal(t.TempDir())
			require.NoError(t, err)
			return s
		},
		corrupt: func(t *testing.T, s Store, key string) {
			f, err := os.OpenFile(s.(*Local).tarPath(key), os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("garbage!"), 4096)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		},
		truncate: func(t *testing.T, s Store, key string) {
			p := s.(*Local).tarPath(key)
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(p, st.Size()/2))
		},
	}
}

func TestLocalConformance(t *testing.T) { runConformance(t, localHarness()) }

func TestLocalLayout(t *testing.T) {
	dir := t.TempDir()
	s, err := NewLocal(dir)
	require.NoError(t, err)
	a := payload(1, 4096)
	_, err = s.Put(t.Context(), "home-1", bytes.NewReader(a))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "homes", "home-1"))
	require.NoError(t, err)
	require.Equal(t, a, b)
	meta, err := os.ReadFile(filepath.Join(dir, "home-revisions", "home-1.json"))
	require.NoError(t, err)
	require.Contains(t, string(meta), sum(a))
	require.NotContains(t, string(meta), "pending")
	for _, d := range []string{"homes", "home-revisions"} {
		st, err := os.Stat(filepath.Join(dir, d))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
		ents, err := os.ReadDir(filepath.Join(dir, d))
		require.NoError(t, err)
		require.Len(t, ents, 1, "no staged file left in %s", d)
	}
}

// A kill leaves a staged file behind; the next store removes it and the
// previous checkpoint restores.
func TestLocalStaleStagedFile(t *testing.T) {
	dir := t.TempDir()
	s, err := NewLocal(dir)
	require.NoError(t, err)
	a := payload(1, 1<<20)
	_, err = s.Put(t.Context(), "k", bytes.NewReader(a))
	require.NoError(t, err)
	stale := filepath.Join(dir, "homes", ".k.staging-123456")
	require.NoError(t, os.WriteFile(stale, payload(2, 512<<10), 0o600))
	staleMeta := filepath.Join(dir, "home-revisions", ".k.json.tmp-99")
	require.NoError(t, os.WriteFile(staleMeta, []byte(`{"revision":{"number":7`), 0o600))

	s2, err := NewLocal(dir)
	require.NoError(t, err)
	require.NoFileExists(t, stale)
	require.NoFileExists(t, staleMeta)
	got, rev := readAll(t, s2, "k")
	require.Equal(t, sum(a), sum(got))
	require.Equal(t, int64(1), rev.Number)
}

// A kill at each step of a Put: before the swap the previous checkpoint
// restores; after it (metadata not yet advanced) the new, complete one does.
func TestLocalKilledPut(t *testing.T) {
	for _, c := range []struct {
		step    string
		wantNew bool
	}{{"pending", false}, {"renamed", true}} {
		t.Run(c.step, func(t *testing.T) {
			dir := t.TempDir()
			s, err := NewLocal(dir)
			require.NoError(t, err)
			a, b := payload(1, 1<<20), payload(2, 2<<20)
			_, err = s.Put(t.Context(), "k", bytes.NewReader(a))
			require.NoError(t, err)
			killed := errors.New("killed")
			s.crash = func(step string) error {
				if step == c.step {
					return killed
				}
				return nil
			}
			_, err = s.Put(t.Context(), "k", bytes.NewReader(b))
			require.ErrorIs(t, err, killed)

			s2, err := NewLocal(dir) // the restarted worker
			require.NoError(t, err)
			got, rev := readAll(t, s2, "k")
			if c.wantNew {
				require.Equal(t, sum(b), sum(got))
				require.Equal(t, int64(2), rev.Number)
			} else {
				require.Equal(t, sum(a), sum(got))
				require.Equal(t, int64(1), rev.Number)
			}
			meta, err := os.ReadFile(filepath.Join(dir, "home-revisions", "k.json"))
			require.NoError(t, err)
			require.NotContains(t, string(meta), "pending", "the pending entry is settled")
			// And the store goes on numbering from there.
			r, err := s2.Put(t.Context(), "k", bytes.NewReader(a))
			require.NoError(t, err)
			require.Equal(t, rev.Number+1, r.Number)
		})
	}
}

// enospcWriter stands in for a disk that fills after limit bytes.
type enospcWriter struct {
	w     io.Writer
	limit int
}

func (e *enospcWriter) Write(p []byte) (int, error) {
	if len(p) > e.limit {
		n, _ := e.w.Write(p[:e.limit])
		e.limit = 0
		return n, &os.PathError{Op: "write", Path: "staged", Err: syscall.ENOSPC}
	}
	e.limit -= len(p)
	return e.w.Write(p)
}

func TestLocalDiskFullHook(t *testing.T) {
	s, err := NewLocal(t.TempDir())
	require.NoError(t, err)
	a := payload(1, 1<<20)
	_, err = s.Put(t.Context(), "k", bytes.NewReader(a))
	require.NoError(t, err)
	s.wrapWriter = func(w io.Writer) io.Writer { return &enospcWriter{w: w, limit: 256 << 10} }
	_, err = s.Put(t.Context(), "k", bytes.NewReader(payload(2, 1<<20)))
	require.ErrorIs(t, err, ErrNoSpace)
	require.Contains(t, err.Error(), "previous checkpoint is kept")
	s.wrapWriter = nil
	got, _ := readAll(t, s, "k")
	require.Equal(t, sum(a), sum(got))
}

// A real full disk: a small tmpfs as DATA_DIR.
func TestLocalDiskFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("mounting a tmpfs needs root, and CI=true")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "mount: %s", out)
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })

	s, err := NewLocal(dir)
	require.NoError(t, err)
	s.MinFree = 0 // the file system itself runs out here (TestLocalKeepsFreeSpace: the reserve)
	a := payload(1, 3<<20)
	_, err = s.Put(t.Context(), "k", bytes.NewReader(a))
	require.NoError(t, err)
	_, err = s.Put(t.Context(), "k", bytes.NewReader(payload(2, 4<<20)))
	require.ErrorIs(t, err, ErrNoSpace)
	t.Log(err)
	got, rev := readAll(t, s, "k")
	require.Equal(t, sum(a), sum(got))
	require.Equal(t, int64(1), rev.Number)
	ents, err := os.ReadDir(filepath.Join(dir, "homes"))
	require.NoError(t, err)
	require.Len(t, ents, 1, "the staged file was removed")
	// Space is back: the next checkpoint fits.
	_, err = s.Put(t.Context(), "k", bytes.NewReader(payload(3, 2<<20)))
	require.NoError(t, err)
}

func readDirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

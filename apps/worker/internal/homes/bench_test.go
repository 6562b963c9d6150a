package homes

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchTar writes a workspace tar of nfiles files totalling about mb MiB
// (incompressible bytes, sizes varying around the mean, in 100 folders) and
// returns its path and size.
func benchTar(b *testing.B, dir string, mb, nfiles int) (string, int64) {
	p := filepath.Join(dir, "workspace.tar")
	f, err := os.Create(p)
	require.NoError(b, err)
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	r := rand.New(rand.NewPCG(1, 2))
	mean := int64(mb) << 20 / int64(nfiles)
	buf := make([]byte, 2*mean+1)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	now := time.Now()
	for d := range 100 {
		require.NoError(b, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("bot/dir%02d/", d), Mode: 0o755, Uname: "bot", Gname: "bot", ModTime: now}))
	}
	for i := range nfiles {
		n := mean/2 + r.Int64N(mean+1) // mean/2 .. 3mean/2
		off := r.Int64N(mean / 2)
		require.NoError(b, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("bot/dir%02d/file%05d.bin", i%100, i), Mode: 0o644, Size: n, Uname: "bot", Gname: "bot", ModTime: now}))
		_, err := tw.Write(buf[off : off+n])
		require.NoError(b, err)
	}
	require.NoError(b, tw.Close())
	require.NoError(b, bw.Flush())
	require.NoError(b, f.Close())
	st, err := os.Stat(p)
	require.NoError(b, err)
	return p, st.Size()
}

// BenchmarkHomeStore: checkpoint (Put of a workspace tar) and restore (Open,
// verified, read to the end) of a generated workspace of
// BENCH_WORKSPACE_MB MiB (default 1024) in BENCH_WORKSPACE_FILES files
// (default 10,000), on the local store and on the S3 store (minio-go against
// gofakes3 on 127.0.0.1 with an on-disk backend — the figures measure this
// client and that in-process server, not a real S3 service). The default
// size writes several GB, so it runs only with BENCH_BIG=1.
func BenchmarkHomeStore(b *testing.B) {
	if os.Getenv("BENCH_BIG") != "1" {
		b.Skip("set BENCH_BIG=1 to generate and store a 1 GiB workspace")
	}
	mb, nfiles := envInt("BENCH_WORKSPACE_MB", 1024), envInt("BENCH_WORKSPACE_FILES", 10000)
	dir := b.TempDir()
	src, size := benchTar(b, dir, mb, nfiles)

	stores := []struct {
		name string
		open func(b *testing.B) Store
	}{
		{"local", func(b *testing.B) Store {
			s, err := NewLocal(b.TempDir())
			require.NoError(b, err)
			return s
		}},
		{"s3", func(b *testing.B) Store {
			fsDir := b.TempDir()
			backend, err := s3afero.MultiBucket(afero.NewBasePathFs(afero.NewOsFs(), fsDir))
			require.NoError(b, err)
			return newFakeS3(b, backend, b.TempDir())
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			var putDur, openDur time.Duration
			for b.Loop() {
				f, err := os.Open(src)
				require.NoError(b, err)
				t0 := time.Now()
				rev, err := s.Put(b.Context(), "bench", f)
				putDur += time.Since(t0)
				f.Close()
				require.NoError(b, err)
				require.Equal(b, size, rev.Size)

				t0 = time.Now()
				rc, _, err := s.Open(b.Context(), "bench")
				require.NoError(b, err)
				n, err := io.Copy(io.Discard, rc)
				openDur += time.Since(t0)
				rc.Close()
				require.NoError(b, err)
				require.Equal(b, size, n)
			}
			runs := float64(b.N)
			mbs := func(d time.Duration) float64 { return float64(size) / (1 << 20) / (d.Seconds() / runs) }
			b.ReportMetric(putDur.Seconds()/runs, "checkpoint_s")
			b.ReportMetric(mbs(putDur), "checkpoint_MB/s")
			b.ReportMetric(openDur.Seconds()/runs, "restore_s")
			b.ReportMetric(mbs(openDur), "restore_MB/s")
			b.ReportMetric(float64(nfiles), "files")
			b.ReportMetric(float64(size)/(1<<20), "MiB")
		})
	}
}

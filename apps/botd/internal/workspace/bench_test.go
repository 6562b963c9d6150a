package workspace_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/workspace"
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkExportImport measures GET /workspace/export and PUT
// /workspace/import over HTTP (auth, loopback) on a generated workspace of
// BENCH_WORKSPACE_MB (default 1024) MiB in BENCH_WORKSPACE_FILES (default
// 10,000) files. It writes gigabytes, so it runs only with BENCH_BIG=1.
// export_MB/s streams the archive to a client that discards it (page cache
// warm: the files were just written); import_MB/s reads a tar file from disk
// and restores it into a fresh computer, syncfs included.
func BenchmarkExportImport(b *testing.B) {
	if os.Getenv("BENCH_BIG") != "1" {
		b.Skip("set BENCH_BIG=1 to generate and move a 1 GB workspace")
	}
	u := lookupUsers(b)
	mb, nfiles := envInt("BENCH_WORKSPACE_MB", 1024), envInt("BENCH_WORKSPACE_FILES", 10000)
	src := newComputer(b, u, workspace.Options{})
	total := generate(b, src, int64(mb)<<20, nfiles, u.bot)
	tarPath := filepath.Join(b.TempDir(), "ws.tar")

	var exportDur, importDur time.Duration
	var tarSize int64
	for i := 0; i < b.N; i++ {
		// Export: to a discarding client, then once more to a file for import.
		start := time.Now()
		n := fetch(b, src, io.Discard)
		exportDur += time.Since(start)
		f, err := os.Create(tarPath)
		require.NoError(b, err)
		tarSize = fetch(b, src, f)
		require.NoError(b, f.Close())
		require.Equal(b, n, tarSize)

		dst := newComputer(b, u, workspace.Options{})
		f, err = os.Open(tarPath)
		require.NoError(b, err)
		req, _ := http.NewRequestWithContext(context.Background(), "PUT", dst.url+"/workspace/import", f)
		req.ContentLength = tarSize
		req.Header.Set("Authorization", "Bearer "+token)
		start = time.Now()
		resp, err := dst.client.Do(req)
		require.NoError(b, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		importDur += time.Since(start)
		f.Close()
		require.Equal(b, 200, resp.StatusCode, string(body))
		require.NoError(b, os.RemoveAll(dst.home))
	}
	mbs := func(d time.Duration) float64 { return float64(total) * float64(b.N) / (1 << 20) / d.Seconds() }
	b.ReportMetric(mbs(exportDur), "export_MB/s")
	b.ReportMetric(mbs(importDur), "import_MB/s")
	b.ReportMetric(float64(nfiles), "files")
	b.ReportMetric(float64(total)/(1<<20), "MiB")
}

// generate writes nfiles files of about total bytes in directories of 100,
// as bot:bots 0664, and returns the bytes written.
func generate(b *testing.B, c *computer, total int64, nfiles int, bot osuser.User) int64 {
	b.Helper()
	per := total / int64(nfiles)
	buf := make([]byte, per+4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	var written int64
	for i := 0; i < nfiles; i++ {
		dir := c.path(fmt.Sprintf("bot/bench/d%03d", i/100))
		if i%100 == 0 {
			require.NoError(b, os.MkdirAll(dir, 0o775))
			require.NoError(b, os.Chown(dir, int(bot.UID), osuser.BotsGID))
		}
		p := filepath.Join(dir, fmt.Sprintf("f%05d.bin", i))
		off := i % 4096
		require.NoError(b, os.WriteFile(p, buf[off:off+int(per)], 0o664))
		require.NoError(b, os.Chown(p, int(bot.UID), osuser.BotsGID))
		written += per
	}
	return written
}

// fetch GETs the export into w and returns its size.
func fetch(b *testing.B, c *computer, w io.Writer) int64 {
	b.Helper()
	req, _ := http.NewRequest("GET", c.url+"/workspace/export", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.client.Do(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	require.Equal(b, 200, resp.StatusCode)
	n, err := io.CopyBuffer(w, resp.Body, make([]byte, 1<<20))
	require.NoError(b, err)
	return n
}

package screen

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fragmentSizes reads a recording's top-level MP4 boxes and returns the size
// of every fragment in it (a moof and the mdat after it, as fragWriter
// commits them whole); it fails the test on a box that does not parse or a
// moof without its mdat.
func fragmentSizes(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var (
		out  []int64
		moof int64 = -1 // the pending moof's size, -1 when none
	)
	for off := int64(0); off < int64(len(b)); {
		require.LessOrEqual(t, off+8, int64(len(b)), "%s: a box header cut at %d", path, off)
		size, typ := int64(binary.BigEndian.Uint32(b[off:])), string(b[off+4:off+8])
		if size == 1 {
			require.LessOrEqual(t, off+16, int64(len(b)), "%s: a large box header cut at %d", path, off)
			size = int64(binary.BigEndian.Uint64(b[off+8:]))
		}
		require.True(t, size >= 8 && off+size <= int64(len(b)), "%s: box %q of %d bytes at %d overruns the file (%d bytes)", path, typ, size, off, len(b))
		switch typ {
		case "moof":
			require.Equal(t, int64(-1), moof, "%s: two moofs in a row at %d", path, off)
			moof = size
		case "mdat":
			require.NotEqual(t, int64(-1), moof, "%s: an mdat without its moof at %d", path, off)
			out = append(out, moof+size)
			moof = -1
		}
		off += size
	}
	require.Equal(t, int64(-1), moof, "%s: a moof without its mdat at the end", path)
	return out
}

// videoSpan is how much time a recording's video covers: from its first
// frame's presentation time to the end of its last frame, as ffprobe reads
// the packets.
func videoSpan(t *testing.T, path string) float64 {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0",
		"-show_entries", "packet=pts_time,duration_time", "-of", "csv=p=0", path).CombinedOutput()
	require.NoError(t, err, "ffprobe %s: %s", path, out)
	first, end, n := 0.0, 0.0, 0
	for _, line := range strings.Fields(string(out)) {
		f := strings.Split(strings.TrimSuffix(line, ","), ",")
		pts, err := strconv.ParseFloat(f[0], 64)
		require.NoError(t, err, "ffprobe packet line %q", line)
		dur := 0.0
		if len(f) > 1 {
			if d, err := strconv.ParseFloat(f[1], 64); err == nil {
				dur = d
			}
		}
		if n == 0 || pts < first {
			first = pts
		}
		if pts+dur > end {
			end = pts + dur
		}
		n++
	}
	require.NotZero(t, n, "ffprobe found no video packets in %s", path)
	return end - first
}

// smallNoise plays random noise in a 160x100 window at the screen's top
// left, so a recording's fragments are many and of a steady size: with
// full-screen noise two or three fit in 2 MiB, the first of them mostly
// the still desktop, and the largest in the file says little of the size
// of the one that did not fit.
func smallNoise(t *testing.T, e *itEnv, ctx context.Context, id string) {
	t.Helper()
	_, err := e.procs(t, id).launch(ctx, "small-noise", []string{"ffplay", "-loglevel", "error", "-noborder", "-left", "0", "-top", "0",
		"-x", "160", "-y", "100", "-f", "lavfi", "-i", "nullsrc=s=160x100:r=15,geq=random(1)*255:128:128"})
	require.NoError(t, err)
}

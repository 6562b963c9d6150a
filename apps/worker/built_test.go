package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"testing"

	"github.com/open-bot/computer/pkg/shared/testbin"
	"github.com/stretchr/testify/require"
)

// Programs the tests run (botd, the worker itself) are built once per test
// process and shared: go build links even when nothing changed (botd about
// 2 CPU-seconds, the worker about 10), and dozens of tests start a botd.
// The binaries are read-only to the tests; a test that must change one
// builds its own.

const (
	botdPkg   = "github.com/open-bot/computer/apps/botd"
	workerPkg = "github.com/open-bot/computer/apps/worker"
)

type builtProgram struct {
	once sync.Once
	path string
	err  error
}

var (
	built    sync.Map // package path → *builtProgram
	builtDir struct {
		sync.Mutex
		dir string
	}
)

// goBuilt is pkg's program, built on first use into a directory of this
// process's (mode 0755, as the tests' own directories were: botd's users
// reach it).
func goBuilt(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := built.LoadOrStore(pkg, &builtProgram{})
	b := v.(*builtProgram)
	b.once.Do(func() {
		dir, err := builtRoot()
		if err != nil {
			b.err = err
			return
		}
		b.path, b.err = testbin.GoBuild(filepath.Join(dir, path.Base(pkg)), pkg)
	})
	require.NoError(t, b.err)
	return b.path
}

func builtRoot() (string, error) {
	builtDir.Lock()
	defer builtDir.Unlock()
	if builtDir.dir == "" {
		dir, err := os.MkdirTemp("", "built-")
		if err != nil {
			return "", err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", err
		}
		builtDir.dir = dir
	}
	return builtDir.dir, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	builtDir.Lock()
	if builtDir.dir != "" {
		_ = os.RemoveAll(builtDir.dir)
	}
	builtDir.Unlock()
	os.Exit(code)
}

// TestFreeAddrBandPerShard: each shard's ports are its own part of
// 13000-13999, and the parts do not overlap.
func TestFreeAddrBandPerShard(t *testing.T) {
	seen := map[int]string{}
	for i := range 3 {
		t.Setenv("WORKER_TEST_SHARD", fmt.Sprintf("%d/3", i))
		from, size := freeAddrBand()
		require.Equal(t, 333, size)
		for p := from; p < from+size; p++ {
			require.Empty(t, seen[p], "port %d is in two shards' bands", p)
			seen[p] = fmt.Sprint(i)
		}
		addr := freeAddr(t)
		var port int
		_, err := fmt.Sscanf(addr, "127.0.0.1:%d", &port)
		require.NoError(t, err)
		require.True(t, port >= from && port < from+size, "shard %d/3 got %s outside %d-%d", i, addr, from, from+size-1)
	}
	for _, v := range []string{"", "3/3", "x", "1/0", "-1/2"} {
		t.Setenv("WORKER_TEST_SHARD", v)
		from, size := freeAddrBand()
		require.Equal(t, [2]int{13000, 1000}, [2]int{from, size}, "WORKER_TEST_SHARD=%q", v)
	}
}

// Package kubetest keeps the tests that share the test cluster
// (scripts/kube.sh) out of each other's way across the processes of one
// `go test ./...`: a test that only uses the cluster holds it shared; one
// that disrupts a part of it for everyone (a kubelet restart) holds it
// alone, after the others and before the next.
package kubetest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Shared holds the cluster of kubeconfig kc with other users until t ends.
func Shared(t testing.TB, kc string) { hold(t, kc, unix.LOCK_SH) }

// Exclusive holds the cluster of kubeconfig kc alone until t ends.
func Exclusive(t testing.TB, kc string) { hold(t, kc, unix.LOCK_EX) }

func hold(t testing.TB, kc string, how int) {
	t.Helper()
	abs, err := filepath.Abs(kc)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(abs))
	path := filepath.Join(os.TempDir(), "open-bot-kube-tests-"+hex.EncodeToString(sum[:6])+".lock")
	// Its own open file description: flock locks of two of them conflict
	// even in one process.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
}

// Script is scripts/kube.sh, found above the test's directory.
func Script(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "scripts", "kube.sh")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("scripts/kube.sh not found above the test's directory")
		}
		dir = parent
	}
}

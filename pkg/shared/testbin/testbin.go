// Package testbin lets tests run the programs `make test` built once,
// instead of linking their own copy in every test process. go build links
// even when nothing changed (the worker about 10 CPU-seconds, botd about
// 2), and a `make test` has a dozen test processes that each built botd
// or the worker.
//
// scripts/test.sh copies make build's bin/botd and bin/worker (the same
// GOFLAGS as the tests' go build) into a root-owned 0755 directory and
// names it in OPENBOT_TEST_BIN. Without it, GoBuild builds as before. The
// programs are read-only to the tests; a test that must change one builds
// its own.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Env names the directory of prebuilt programs.
const Env = "OPENBOT_TEST_BIN"

// prebuilt maps the packages make build builds to their programs' names.
var prebuilt = map[string]string{
	"github.com/open-bot/computer/apps/botd":   "botd",
	"github.com/open-bot/computer/apps/worker": "worker",
}

// Prebuilt is pkg's program from OPENBOT_TEST_BIN, or "" when there is none.
func Prebuilt(pkg string) string {
	name, ok := prebuilt[pkg]
	dir := os.Getenv(Env)
	if !ok || dir == "" {
		return ""
	}
	p := filepath.Join(dir, name)
	st, err := os.Lstat(p)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return ""
	}
	return p
}

// GoBuild returns pkg's program: the prebuilt one when there is one, else
// `go build -o out pkg` (pkg an import path).
func GoBuild(out, pkg string) (string, error) {
	if p := Prebuilt(pkg); p != "" {
		return p, nil
	}
	if o, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", pkg, err, o)
	}
	return out, nil
}

package agent

import (
	"os/exec"
	"path/filepath"
	"strings"
)

// resolveNative returns the native Codex binary behind npm's node launcher
// (and the environment the launcher would give it), or bin unchanged.
//
// Why: on Node < 22 the launcher (bin/codex.js) spawns the native binary as
// a child instead of exec'ing it. botd's children die with botd through
// Pdeathsig, but that child of a child would not: a botd killed hard (OOM,
// SIGKILL) would leave an orphan app-server holding the Codex port, and the
// next botd's Codex could never start. Started directly, the app-server is
// botd's own child.
func resolveNative(bin string) (path string, env []string) {
	p, err := exec.LookPath(bin)
	if err != nil {
		return bin, nil
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil || !strings.HasSuffix(real, ".js") {
		return bin, nil
	}
	root := filepath.Dir(filepath.Dir(real)) // …/@openai/codex
	matches, _ := filepath.Glob(filepath.Join(root, "node_modules", "@openai", "codex-linux-*", "vendor", "*", "bin", "codex"))
	if len(matches) != 1 {
		return bin, nil
	}
	return matches[0], []string{"CODEX_MANAGED_BY_NPM=1", "CODEX_MANAGED_PACKAGE_ROOT=" + root}
}

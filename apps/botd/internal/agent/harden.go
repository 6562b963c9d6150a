package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// execOnly makes the Codex binary bin executable but unreadable for all but
// root (group and others lose read), and reports whether it changed it.
//
// Why: Codex runs as bot, like every process the bot's shell starts, and a
// process's owner may ptrace it, take its file descriptors (pidfd_getfd) and
// write its memory, unless the process is not dumpable. Codex's app-server
// does not make itself so; the kernel does it for any program its user
// cannot read (execve's would_dump). Exec-only, the app-server's stdin and
// stdout (botd's socket pair) stay botd's and Codex's alone: a bot process
// can kill its Codex, never speak for it.
//
// A script cannot be made exec-only (its interpreter reads it), nor a binary
// root does not own: both are refused, so botd never runs a Codex the bot
// could take over.
func execOnly(bin string) (bool, error) {
	p, err := exec.LookPath(bin)
	if err != nil {
		return false, fmt.Errorf("codex binary: %w", err)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false, fmt.Errorf("codex binary: %w", err)
	}
	f, err := os.Open(real)
	if err != nil {
		return false, fmt.Errorf("codex binary: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("codex binary: %w", err)
	}
	if !st.Mode().IsRegular() {
		return false, fmt.Errorf("codex binary %s is not a regular file", real)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != 0 {
		return false, fmt.Errorf("codex binary %s is not root's: the bot could not be kept out of its processes", real)
	}
	if st.Mode().Perm()&0o002 != 0 {
		return false, fmt.Errorf("codex binary %s is writable by anyone", real)
	}
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != "\x7fELF" {
		return false, errors.Join(fmt.Errorf("codex binary %s is not a native executable (a script's interpreter must read it, so its process could be taken over by bot)", real), err)
	}
	if st.Mode().Perm()&0o044 == 0 {
		return false, nil
	}
	if err := f.Chmod(st.Mode().Perm() &^ 0o044); err != nil {
		return false, fmt.Errorf("make codex binary %s exec-only: %w", real, err)
	}
	return true, nil
}

// Package testenv is for tests only: it decides whether an integration test
// can run here. On a laptop a missing tool or root skips; under CI=true it
// fails, because CI provisions everything and a skip there would hide a gap.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CI reports whether we run under CI=true.
func CI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t, or fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true but integration prerequisite missing: "+format, args...)
	}
	t.Skipf("integration prerequisite missing: "+format, args...)
}

// RequireRoot needs euid 0 (starting children as other users).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// RequireTools needs every named executable on PATH.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			Unavailable(t, "%s not on PATH (run scripts/provision.sh)", tool)
		}
	}
}

// RequireUsers needs the computer's accounts (desktop, bot, group bots).
func RequireUsers(t testing.TB) {
	t.Helper()
	for _, u := range []string{"desktop", "bot"} {
		if err := exec.Command("id", u).Run(); err != nil {
			Unavailable(t, "user %s missing (run scripts/provision.sh)", u)
		}
	}
}

// Context is a context that ends when the test does or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Alive reports whether pid is a live process. A zombie still answers
// kill(pid, 0), so its state is read from /proc instead.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

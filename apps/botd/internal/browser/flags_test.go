package browser

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"--no-first-run":             "--no-first-run",
		"":                           "''",
		"MAP * ~NOTFOUND":            "'MAP * ~NOTFOUND'",
		"it's":                       `'it'\''s'`,
		"--user-data-dir=/a b/$HOME": `'--user-data-dir=/a b/$HOME'`,
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestScreenFlags(t *testing.T) {
	f := ScreenFlags(FlagOptions{SocksAddr: "127.0.0.1:1080", ProfileDir: "/home/desktop/screens/ann/chromium"})
	for _, want := range []string{
		"--proxy-server=socks5://127.0.0.1:1080",
		"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
		"--user-data-dir=/home/desktop/screens/ann/chromium",
		"--window-size=1280,800", "--start-maximized",
		"--password-store=basic", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--no-default-browser-check",
	} {
		if !slices.Contains(f, want) {
			t.Errorf("missing %s", want)
		}
	}
	for _, bad := range []string{"--no-sandbox", "--remote-debugging-pipe"} {
		if slices.Contains(f, bad) {
			t.Errorf("unexpected %s", bad)
		}
	}
	if !slices.Contains(ScreenFlags(FlagOptions{NoSandbox: true}), "--no-sandbox") {
		t.Error("--no-sandbox missing when the probe failed")
	}
	for _, a := range f {
		if strings.Contains(a, "remote-debugging-port") {
			t.Errorf("a DevTools port flag: %s", a)
		}
	}
}

// wrapperLogic is what Debian's /usr/bin/chromium does with its arguments
// around /etc/chromium.d: source the snippets, move the --flags to the end,
// and exec with "$@". It prints the final arguments, one per line.
const wrapperLogic = `
. "$SNIPPET"
extra_args=0
while [ $# -gt 0 -a $# -ne $extra_args ]; do
  case "$1" in
    -- ) shift; break ;;
    --* ) set -- "$@" "$1"; extra_args=$((extra_args+1)); shift ;;
    * ) break ;;
  esac
done
for a in "$@"; do printf '%s\n' "$a"; done
`

// TestChromiumDSnippet runs rootfs/etc/chromium.d/open-bot the way the
// wrapper does (in sh, which Debian's wrapper uses, and in bash), in a
// directory full of files, so a glob of the resolver rule's * would show.
func TestChromiumDSnippet(t *testing.T) {
	// go test runs a package's tests in its directory; runtime.Caller's
	// file is not a path under -trimpath.
	snippet, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "rootfs", "etc", "chromium.d", "open-bot"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snippet); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"a", "b", "NOTFOUND"} {
		_ = os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	o := FlagOptions{SocksAddr: "127.0.0.1:1080", ProfileDir: "/home/desktop/screens/it's me/chromium", NoSandbox: true}
	testenv.RequireTools(t, "sh", "bash") // both: Debian's wrapper uses sh, people bash
	for _, shell := range []string{"sh", "bash"} {
		for _, args := range [][]string{{"https://example.org/?q=a b"}, {"--incognito", "https://example.org/?q=a b"}} {
			cmd := exec.Command(shell, append([]string{"-c", wrapperLogic, "chromium"}, args...)...)
			cmd.Dir = dir
			cmd.Env = []string{"SNIPPET=" + snippet, ChromiumArgsEnvVar + "=" + ChromiumArgsEnv(o), "PATH=/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v: %s", shell, err, out)
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			// The wrapper moves every --flag after the URL, in order.
			w := append([]string{"https://example.org/?q=a b"}, ScreenFlags(o)...)
			if len(args) == 2 {
				w = append(w, "--incognito")
			}
			if !slices.Equal(got, w) {
				t.Errorf("%s %v:\n got %q\nwant %q", shell, args, got, w)
			}
		}
		// Without the variable, the session's args file is used.
		rt := t.TempDir()
		if err := os.WriteFile(filepath.Join(rt, ArgsFile), []byte(ChromiumArgsEnv(o)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(shell, "-c", wrapperLogic, "chromium", "https://x.test/")
		cmd.Dir = dir
		cmd.Env = []string{"SNIPPET=" + snippet, "XDG_RUNTIME_DIR=" + rt, "PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if w := append([]string{"https://x.test/"}, ScreenFlags(o)...); err != nil || string(out) != strings.Join(w, "\n")+"\n" {
			t.Errorf("%s with the args file: %q %v", shell, out, err)
		}
		// Without either the snippet changes nothing.
		cmd = exec.Command(shell, "-c", wrapperLogic, "chromium", "https://x.test/")
		cmd.Env = []string{"SNIPPET=" + snippet}
		out, err = cmd.CombinedOutput()
		if err != nil || string(out) != "https://x.test/\n" {
			t.Errorf("%s without the variable: %q %v", shell, out, err)
		}
	}
}

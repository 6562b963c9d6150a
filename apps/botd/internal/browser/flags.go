package browser

import (
	"strconv"
	"strings"

	"github.com/open-bot/computer/pkg/shared"
)

// ResolverRule makes Chromium resolve no names itself: every hostname goes
// to the SOCKS proxy unresolved, so DNS happens where the connection leaves.
const ResolverRule = "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"

// FlagOptions are the inputs of a screen's Chromium flags.
type FlagOptions struct {
	// SocksAddr is the egress proxy (host:port).
	SocksAddr string
	// ProfileDir is the screen's --user-data-dir.
	ProfileDir string
	// Width and Height are the screen size (default 1280x800).
	Width, Height int
	// NoSandbox is set when the start-up sandbox probe failed.
	NoSandbox bool
}

// ScreenFlags are the flags every Chromium of a screen gets, whether botd
// starts it or a person starts it from the screen's menu (through
// /etc/chromium.d/open-bot and OPEN_BOT_CHROMIUM_ARGS). They never include
// --remote-debugging-pipe, which only botd's own launch adds.
func ScreenFlags(o FlagOptions) []string {
	w, h := o.Width, o.Height
	if w <= 0 || h <= 0 {
		w, h = 1280, 800
	}
	flags := []string{
		"--proxy-server=socks5://" + o.SocksAddr,
		// Loopback too goes through the proxy (Chromium bypasses it for
		// localhost and 127/8 by default): a page never reaches botd,
		// x11vnc or Codex directly, and the proxy's policy decides.
		"--proxy-bypass-list=<-loopback>",
		"--host-resolver-rules=" + ResolverRule,
		"--user-data-dir=" + o.ProfileDir,
		"--window-size=" + strconv.Itoa(w) + "," + strconv.Itoa(h),
		"--window-position=0,0",
		"--start-maximized",
		"--password-store=basic",
		"--disable-dev-shm-usage",
		// Quiet: no first-run UI, no calls home, no prompts.
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--disable-default-apps",
		"--disable-breakpad",
		"--metrics-recording-only",
		"--disable-client-side-phishing-detection",
		"--disable-domain-reliability",
		"--no-pings",
		"--disable-features=" + shared.ChromiumDisabledFeatures,
		"--restore-last-session",
	}
	if o.NoSandbox {
		flags = append(flags, "--no-sandbox")
	}
	return flags
}

// ShellQuote quotes one word for a POSIX shell: inside single quotes, with
// each embedded single quote closed, backslash-escaped and reopened. The
// result is never split or globbed.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=/.,:@%+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ChromiumArgsEnv is the value of OPEN_BOT_CHROMIUM_ARGS for a screen's
// desktop session: the screen's flags, each shell-quoted, so that
// /etc/chromium.d/open-bot can eval them into the wrapper's arguments with
// the * of the resolver rule intact.
func ChromiumArgsEnv(o FlagOptions) string {
	flags := ScreenFlags(o)
	q := make([]string, len(flags))
	for i, f := range flags {
		q[i] = ShellQuote(f)
	}
	return strings.Join(q, " ")
}

// ChromiumArgsEnvVar is the environment variable /etc/chromium.d/open-bot reads.
const ChromiumArgsEnvVar = "OPEN_BOT_CHROMIUM_ARGS"

package desktop

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/transient"
)

// ProfilesDir is the workspace directory that holds each screen's Chromium
// profile (ProfilesDir/<screen>): the browser's sign-ins and tabs travel
// with the workspace export, as the seed has it for E2B and Box ("Browser
// profiles live under the portable workspace").
const ProfilesDir = ".browser-profiles"

// profileDir is screen id's --user-data-dir (ids are [A-Za-z0-9_-]).
func (m *Machine) profileDir(id string) string {
	return path.Join(m.o.Workspace, ProfilesDir, id)
}

// browserScript manages one screen's Chromium: $1 the operation, $2 the
// profile (--user-data-dir), $3 the screen's id, $4 a URL (open). The
// browser this machine started is recorded by its pid in
// $TMPDIR/open-bot-desktop/browsers/<id>.pid (its handle); a browser holds
// the profile when its main process (no --type=) names exactly this
// --user-data-dir (matched as a pattern that does not match its own
// command line), so a pid file that names any other process is ignored.
//
//	open URL   opens URL in the screen's browser on $DISPLAY: handed to the
//	           running one (Chromium's own singleton opens a tab), else a
//	           new one is started that restores the profile's last session
//	           too. Without Chromium, xdg-open.
//	restore    starts the screen's browser on its last session when the
//	           profile exists and no browser holds it on $DISPLAY.
//	close      closes every browser holding the profile cleanly (SIGINT:
//	           Chromium saves its session and flushes its cookies; SIGKILL
//	           after 30 s) and waits until no process of it is left; it
//	           prints the display the browser ran on ("" when none ran).
//	           A process is left while its command line names the profile
//	           (a child's rewritten one too) and, for the main process,
//	           while any thread of it runs: Chromium's first thread exits,
//	           its command line then reads empty, while other threads go
//	           on writing Preferences and the session for a second or more
//	           (TestBrowserCloseWaitsForExit; an export listed such a file
//	           and lost it before tar read it).
//	           Not SIGTERM: Chromium takes that for the session's end and
//	           exits without writing its cookie store (Chromium 156: a
//	           cookie set 10 s before was gone after SIGTERM, kept after
//	           SIGINT and sent again by the restarted browser).
//
// Like botd, Chromium gets --no-sandbox only where its sandbox cannot work
// (user, PID and network namespaces unavailable to the user, as in an
// unprivileged container); a vendor's VM sandbox keeps it. It gets
// --password-store=basic, so the cookies it encrypts do not depend on a
// keyring outside the profile and decrypt on a replacement.
//
// A browser on another display than $DISPLAY (a screen that moved to
// another slot) is closed before a new one starts: a profile is never
// shown on two displays. Lock files of a browser on another host (a
// profile imported from elsewhere) are removed before a start, since
// Chromium would refuse the profile as "in use by another computer".
const browserScript = `set -u
op="$1"; dir="$2"; id="$3"; url="${4:-}"
run="${TMPDIR:-/tmp}/open-bot-desktop/browsers"; pf="$run/$id.pid"
pat="--user-data-d[i]r=$(printf '%s' "$dir" | sed 's/[][\\.*^$]/\\&/g')"
holders() { grep -lzx -- "$pat" /proc/[0-9]*/cmdline 2>/dev/null | while read -r f; do grep -qz -- '^--type=' "$f" 2>/dev/null || { p="${f#/proc/}"; echo "${p%/cmdline}"; }; done; }
anyleft() { grep -lz -- "$pat\\( \\|\$\\)" /proc/[0-9]*/cmdline >/dev/null 2>&1; }
gone() {
  [ -d "/proc/$1" ] || return 0
  set -- "$(ls "/proc/$1/task" 2>/dev/null | wc -l)" "$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)"
  [ "$1" -le 1 ] && { [ "$2" = Z ] || [ "$2" = X ] || [ -z "$2" ]; }
}
left() { anyleft && return 0; for p in $ps; do gone "$p" || return 0; done; return 1; }
shown() { grep -zx -- 'DISPLAY=.*' "/proc/$1/environ" 2>/dev/null | tr -d '\0' | sed 's/^DISPLAY=//'; }
close() {
  ps=$(holders); [ -n "$ps" ] || { rm -f "$pf"; return 0; }
  for p in $ps; do shown "$p"; echo; break; done
  for p in $ps; do kill -INT "$p" 2>/dev/null; done
  i=0; while left; do
    i=$((i+1))
    if [ $i = 300 ]; then for p in $ps; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done; fi
    if [ $i -gt 400 ]; then echo "a browser on $dir did not exit" >&2; exit 1; fi
    sleep 0.1
  done
  rm -f "$pf"
}
bin=""; for b in chromium chromium-browser google-chrome google-chrome-stable; do command -v "$b" >/dev/null 2>&1 && { bin="$b"; break; }; done
case "$op" in
close) close; exit 0 ;;
restore) [ -d "$dir" ] && [ -n "$bin" ] || exit 0 ;;
open) [ -n "$bin" ] || { setsid xdg-open "$url" >/dev/null 2>&1 </dev/null & echo $!; exit 0; } ;;
*) echo "unknown operation $op" >&2; exit 2 ;;
esac
sb=""; unshare --user --pid --net true 2>/dev/null || sb="--no-sandbox"
for p in $(holders); do
  if [ "$(shown "$p")" = "$DISPLAY" ]; then
    [ "$op" = open ] && timeout 30 "$bin" $sb --user-data-dir="$dir" "$url" >/dev/null 2>&1 </dev/null
    echo "$p"; exit 0
  fi
  close >/dev/null; break
done
mkdir -p "$dir" "$run" || exit 1
if l=$(readlink "$dir/SingletonLock" 2>/dev/null); then
  case "$l" in "$(uname -n)"-*) ;; *) rm -f "$dir/SingletonLock" "$dir/SingletonSocket" "$dir/SingletonCookie" ;; esac
fi
set -- --no-first-run --no-default-browser-check --start-maximized --password-store=basic --restore-last-session --disable-features=` + shared.ChromiumDisabledFeatures + ` --user-data-dir="$dir"
[ -n "$sb" ] && set -- "$sb" "$@"
[ "$op" = open ] && set -- "$@" "$url"
setsid "$bin" "$@" >/dev/null 2>&1 </dev/null & p=$!
echo "$p" >"$pf"; echo "$p"`

// browser runs browserScript's op for screen id on slot's display and
// returns what it printed (trimmed).
func (m *Machine) browser(ctx context.Context, op, id string, slot int, url string) (string, error) {
	argv := []string{"sh", "-c", browserScript, "sh", op, m.profileDir(id), id}
	if url != "" {
		argv = append(argv, url)
	}
	env := map[string]string{"HOME": m.o.Home}
	if slot >= 0 {
		env = m.displayEnv(slot)
	}
	r, err := m.b.Exec(ctx, Cmd{Argv: argv, User: m.o.User, Cwd: m.o.Home, Env: env, MaxOutput: 4 << 10})
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return "", fmt.Errorf("browser %s on screen %s: exit %d: %s", op, id, r.ExitCode, firstLine(r.Stderr))
	}
	return strings.TrimSpace(string(r.Stdout)), nil
}

// restoreBrowser starts screen id's browser on its last session when the
// screen has a profile (a browser ran there before, or the workspace
// imported one), so a replacement's screen comes back signed in and on the
// same tabs. Failures are not the screen's: it runs without a browser.
func (m *Machine) restoreBrowser(ctx context.Context, id string, slot int) {
	m.browserMu.Lock()
	defer m.browserMu.Unlock()
	if _, err := m.browser(ctx, "restore", id, slot, ""); err != nil {
		m.browserFailed(id, err)
	}
}

// browserFailed tells /events that screen id's browser did not start
// (botd's process event for a screen's Chromium).
func (m *Machine) browserFailed(id string, err error) {
	m.events.publish(shared.EventProcess, map[string]string{"name": "chromium:" + id, "screen": id, "state": string(shared.StateCrashed), "error": firstLine([]byte(err.Error()))})
}

// closeBrowser closes screen id's browser cleanly (browserScript close).
func (m *Machine) closeBrowser(ctx context.Context, id string) error {
	m.browserMu.Lock()
	defer m.browserMu.Unlock()
	_, err := m.browser(ctx, "close", id, -1, "")
	return err
}

// quiesced is a browser closed for a workspace transfer: its screen and
// the display it ran on.
type quiesced struct {
	id, display string
}

// quiesceBrowsers closes every known screen's browser cleanly, so its
// profile on disk is whole (cookies flushed, session saved, no locks
// held), and holds every browser start until resume, which starts each
// closed browser again on its display, on its last session: the same
// tabs. resume must be called exactly once.
func (m *Machine) quiesceBrowsers(ctx context.Context) (resume func(), err error) {
	m.browserMu.Lock()
	// Every known screen, and every profile in the workspace: a browser
	// this machine started before the worker restarted is closed too.
	seen := map[string]bool{}
	m.mu.Lock()
	for id := range m.screens {
		seen[id] = true
	}
	m.mu.Unlock()
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"find", path.Join(m.o.Workspace, ProfilesDir), "-mindepth", "1", "-maxdepth", "1", "-type", "d", "-printf", "%f\\n"},
		User: m.o.User, Cwd: m.o.Home, MaxOutput: 64 << 10})
	if err != nil {
		m.browserMu.Unlock()
		return nil, fmt.Errorf("desktop machine: list the browser profiles: %w", err)
	}
	for _, id := range strings.Split(string(r.Stdout), "\n") {
		if idPattern.MatchString(id) {
			seen[id] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var closed []quiesced
	resume = func() {
		defer m.browserMu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), m.o.StartTimeout)
		defer cancel()
		for _, q := range closed {
			slot, err := strconv.Atoi(strings.TrimPrefix(q.display, ":"))
			if err != nil || !strings.HasPrefix(q.display, ":") {
				continue
			}
			if _, err := m.browser(rctx, "restore", q.id, slot, ""); err != nil {
				m.browserFailed(q.id, err)
			}
		}
	}
	for _, id := range ids {
		out, err := m.browser(ctx, "close", id, -1, "")
		if err != nil {
			resume()
			return nil, fmt.Errorf("desktop machine: quiesce the browser of screen %s: %w", id, err)
		}
		if out != "" {
			closed = append(closed, quiesced{id: id, display: out})
		}
	}
	return resume, nil
}

// exportScript writes the workspace ($1) as a tar to stdout: every entry
// find prints with the expression in the further arguments (exportFind),
// in find's order, directories without recursion. tar's status is the
// script's; a find that failed fails it too. An entry removed between
// find and tar is left out, as botd's export leaves out what was removed
// meanwhile: tar's status 2 counts as 0 when its only errors were
// "Cannot stat/open: No such file or directory" (a profile's temporary
// file, say: CI on e4c3cb0 saw a Chromium .org.chromium.Chromium.* go).
// Any other error, a file that changed as tar read it (status 1)
// included, still fails the export.
const exportScript = `set -u
ws="$1"; shift
list=$(mktemp "${TMPDIR:-/tmp}/open-bot-export.XXXXXX") || exit 1
errs=$(mktemp "${TMPDIR:-/tmp}/open-bot-export.XXXXXX") || { rm -f "$list"; exit 1; }
trap 'rm -f "$list" "$errs"' EXIT
cd "$ws" || exit 1
find . "$@" >"$list" || { echo "find failed" >&2; exit 3; }
LC_ALL=C tar --numeric-owner --null --no-recursion -T "$list" -cf - 2>"$errs"; rc=$?
if [ "$rc" = 2 ] && [ -s "$errs" ] && ! grep -qv -e ': Cannot stat: No such file or directory$' -e ': Cannot open: No such file or directory$' -e '^tar: Exiting with failure status due to previous errors$' "$errs"; then
  rc=0
else
  cat "$errs" >&2
fi
exit "$rc"`

// globQuote escapes find's glob characters in a literal name.
func globQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// exportFind is the find expression of the workspace export: inside a
// screen's profile (ProfilesDir/<screen>/…) the transient directories
// (pruned, with everything in them) and transient non-directories of
// pkg/shared/transient are left out, botd's one list; everything else is
// printed, NUL-terminated.
func exportFind() []string {
	var dirs, files []string
	for _, d := range transient.Dirs() {
		dirs = append(dirs, "-o", "-name", globQuote(d))
	}
	for _, p := range transient.FilePrefixes() {
		files = append(files, "-o", "-name", globQuote(p)+"*")
	}
	for _, f := range transient.FileNames() {
		files = append(files, "-o", "-name", globQuote(f))
	}
	e := []string{"-path", "./" + ProfilesDir + "/*/*", "(", "(", "-type", "d", "("}
	e = append(e, dirs[1:]...)
	e = append(e, ")", "-prune", ")", "-o", "(", "!", "-type", "d", "(")
	e = append(e, files[1:]...)
	e = append(e, ")", ")", ")", "-o", "-print0")
	return e
}

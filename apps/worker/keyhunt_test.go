package main

// The key hunter (issue 30, requirement 2): "on desktop machines no file,
// environment, argv or process of the sandbox ever holds" the model key.
// huntSecret searches a sandbox's container for secrets as root, through
// `docker exec` (what the sandbox's own users can do is no limit on it):
// every regular file of its filesystems, every process's environ and
// cmdline, and every file a process holds open after it was deleted.
// TestKeyHuntFindsCanary is its positive control on each desktop backend:
// a canary planted the ways the key could hide is found in each place.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
)

// keyHashPrefix is the first 16 hex digits of key's SHA-256: the form a
// hash of the key would take in a log line or a file. (No code in the
// repository hashes a secret for its logs today; the capability and
// token checks keep whole SHA-256 sums in memory, and a whole hex sum
// contains this prefix, so the search for it finds those too.)
func keyHashPrefix(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])[:16]
}

// keyNeedles is what a hunt for key searches for: the key and its hash
// prefix.
func keyNeedles(key string) []string { return []string{key, keyHashPrefix(key)} }

// huntScript searches for the needles on its stdin (one a line; they stay
// in the shell's memory: no file, argv or environment of the hunt holds
// one). Mode "all" (as root): every regular file under each top-level
// entry of / but /proc and /sys (devices, FIFOs and sockets skipped;
// symlinks not followed), then the processes. Mode "pids" (as the
// processes' user): the processes given. For a process: its cmdline, its
// environ when it can be opened (else a "-denied pid uid gid" record,
// the ids being its effective ones), and the deleted files it holds open
// (/proc/pid/fd/* linking to "… (deleted)", memfds included). Records are
// grep -oZ's "path\0match\n", then "-done\0\n".
const huntScript = `set -u
export LC_ALL=C
pats=$(cat)
[ -n "$pats" ] || { echo "huntSecret: no needles" >&2; exit 2; }
mode=$1; shift
if [ "$mode" = all ]; then
  set --
  for d in /* /.[!.]* /..?*; do
    case $d in /proc|/sys) continue;; esac
    if [ -L "$d" ] || ! [ -e "$d" ]; then continue; fi
    set -- "$@" "$d"
  done
  printf '%s\n' "$pats" | grep -rHosaFZ -D skip -f - -- "$@"
  set --
  for p in /proc/[0-9]*; do set -- "$@" "${p#/proc/}"; done
fi
n=$#; fds=
for pid; do
  p=/proc/$pid
  [ -e "$p" ] || continue
  if (true <"$p/environ") 2>/dev/null; then
    set -- "$@" "$p/environ"
  elif [ -e "$p/environ" ]; then
    printf -- '-denied\000%s %s\n' "$pid" "$(awk '/^Uid:/{u=$3} /^Gid:/{g=$3} END{print u, g}' "$p/status" 2>/dev/null)"
  fi
  set -- "$@" "$p/cmdline"
  fds="$fds $p/fd"
done
shift $n
if [ -n "$fds" ]; then
  for f in $(find $fds -mindepth 1 -maxdepth 1 -lname '*(deleted)' 2>/dev/null); do set -- "$@" "$f"; done
fi
[ $# -eq 0 ] || printf '%s\n' "$pats" | grep -HosaFZ -D skip -f - -- "$@"
printf -- '-done\000\n'
`

// huntRecord is one record of huntScript's output.
type huntRecord struct{ path, match string }

// runHunt runs huntScript in container as user (docker exec -u) with the
// needles on its stdin, and parses its records (which must end with
// -done).
func runHunt(t testing.TB, container, user string, needles []string, args ...string) []huntRecord {
	t.Helper()
	cmd := exec.Command("docker", append([]string{"exec", "-i", "-u", user, container, "sh", "-c", huntScript, "sh"}, args...)...)
	cmd.Stdin = strings.NewReader(strings.Join(needles, "\n") + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "huntSecret in %s as %s: %s", container, user, stderr.String())
	out := stdout.Bytes()
	var recs []huntRecord
	done := false
	for len(out) > 0 {
		z := bytes.IndexByte(out, 0)
		require.GreaterOrEqual(t, z, 0, "huntSecret in %s: a record without its NUL", container)
		nl := bytes.IndexByte(out[z+1:], '\n')
		require.GreaterOrEqual(t, nl, 0, "huntSecret in %s: a record without its end", container)
		r := huntRecord{path: string(out[:z]), match: string(out[z+1 : z+1+nl])}
		out = out[z+1+nl+1:]
		if r.path == "-done" {
			done = true
			continue
		}
		recs = append(recs, r)
	}
	require.True(t, done, "huntSecret in %s as %s: the search did not finish: %s", container, user, stderr.String())
	return recs
}

// huntSecret searches container (a sandbox's container on the local
// engine) for each needle, as root, and returns where each was found, as
// "needle <i>: <place>" (i: its index among needles; the needles
// themselves are never returned or logged), sorted. Places are "file
// <path>" (every regular file of the container's filesystems: the root
// overlay, /home, /tmp, /root, /run, /dev/shm and every other mount but
// /proc and /sys), "environ of pid <pid> (<comm>)", "cmdline of pid
// <pid> (<comm>)" and "deleted open file /proc/<pid>/fd/<n> (<comm>)".
// The needles reach the search on its stdin: no argv, environment or file
// of the search holds one. Root in a container cannot open the environ of
// another user's process (it lacks CAP_SYS_PTRACE), so those are read by
// a second search as that process's user; an environ neither can read
// fails the test (the hunt would be incomplete). Each needle must be at
// least 8 bytes, without a newline or NUL, and no needle may contain
// another (grep -o reports the longest match at a place).
func huntSecret(t testing.TB, container string, needles ...string) []string {
	t.Helper()
	require.NotEmpty(t, needles, "huntSecret: no needles")
	for i, n := range needles {
		require.GreaterOrEqual(t, len(n), 8, "huntSecret: needle %d is shorter than 8 bytes", i)
		require.False(t, strings.ContainsAny(n, "\n\x00"), "huntSecret: needle %d holds a newline or NUL", i)
		for j, m := range needles {
			require.False(t, i != j && strings.Contains(n, m), "huntSecret: needle %d contains needle %d", i, j)
		}
	}
	start := time.Now()
	recs := runHunt(t, container, "0", needles, "all")
	// The environs root could not open, by their user.
	byUser := map[string][]string{}
	var rest []huntRecord
	for _, r := range recs {
		if r.path != "-denied" {
			rest = append(rest, r)
			continue
		}
		f := strings.Fields(r.match)
		if len(f) < 3 {
			continue // the process ended before its ids were read
		}
		byUser[f[1]+":"+f[2]] = append(byUser[f[1]+":"+f[2]], f[0])
	}
	var unread []string
	for user, pids := range byUser {
		for _, r := range runHunt(t, container, user, needles, append([]string{"pids"}, pids...)...) {
			if r.path == "-denied" {
				unread = append(unread, "pid "+strings.Fields(r.match)[0]+" (user "+user+")")
				continue
			}
			rest = append(rest, r)
		}
	}
	// Where, per needle.
	seen := map[string]bool{}
	var pids []string
	type hit struct {
		needle      int
		kind, where string
		pid         string
	}
	var hits []hit
	for _, r := range rest {
		i := slices.Index(needles, r.match)
		if i < 0 {
			t.Errorf("huntSecret in %s: %s matched something that is no needle", container, r.path)
			continue
		}
		h := hit{needle: i}
		rel, inProc := strings.CutPrefix(r.path, "/proc/")
		switch parts := strings.Split(rel, "/"); {
		case !inProc:
			h.kind, h.where = "file", r.path
		case len(parts) == 2 && parts[1] == "environ":
			h.kind, h.pid = "environ of pid", parts[0]
		case len(parts) == 2 && parts[1] == "cmdline":
			h.kind, h.pid = "cmdline of pid", parts[0]
		case len(parts) == 3 && parts[1] == "fd":
			h.kind, h.where, h.pid = "deleted open file", r.path, parts[0]
		default:
			h.kind, h.where = "file", r.path
		}
		key := fmt.Sprint(h)
		if seen[key] {
			continue
		}
		seen[key] = true
		hits = append(hits, h)
		if h.pid != "" && !slices.Contains(pids, h.pid) {
			pids = append(pids, h.pid)
		}
	}
	comms := processNames(t, container, pids)
	out := make([]string, 0, len(hits))
	for _, h := range hits {
		place := h.kind + " " + h.where
		switch h.kind {
		case "environ of pid", "cmdline of pid":
			place = h.kind + " " + h.pid + " (" + comms[h.pid] + ")"
		case "deleted open file":
			place += " (" + comms[h.pid] + ")"
		}
		out = append(out, fmt.Sprintf("needle %d: %s", h.needle, place))
	}
	slices.Sort(out)
	t.Logf("huntSecret %s: %d needle(s), %d place(s) found, %d environ(s) read as their user (%d user(s)), in %s",
		container, len(needles), len(out), countPids(byUser), len(byUser), time.Since(start).Round(10*time.Millisecond))
	if len(unread) > 0 {
		slices.Sort(unread)
		t.Errorf("huntSecret in %s: the environment of %s could be read neither as root nor as its user: the hunt is incomplete", container, strings.Join(unread, ", "))
	}
	return out
}

func countPids(m map[string][]string) int {
	n := 0
	for _, p := range m {
		n += len(p)
	}
	return n
}

// processNames is each pid's comm in container ("gone" for one that ended).
func processNames(t testing.TB, container string, pids []string) map[string]string {
	t.Helper()
	names := map[string]string{}
	if len(pids) == 0 {
		return names
	}
	out, err := exec.Command("docker", append([]string{"exec", "-u", "0", container, "sh", "-c",
		`for p; do printf '%s %s\n' "$p" "$(cat /proc/$p/comm 2>/dev/null || echo gone)"; done`, "sh"}, pids...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if pid, comm, ok := strings.Cut(l, " "); ok {
			names[pid] = comm
		}
	}
	return names
}

// canaryPlaces is where plantCanary put a canary.
type canaryPlaces struct {
	// File is a file under the user's home holding the canary; HashFile
	// one holding its hash prefix (a log line).
	File, HashFile string
	// Shm is a file in /dev/shm holding the canary.
	Shm string
	// PID is the process with the canary in its environment and argv,
	// holding open (on fd 3) a deleted file with the canary.
	PID string
}

// plantCanary plants canary in container as user, the ways the model key
// could hide: files (under the user's home, with the canary and with its
// hash prefix, and in /dev/shm), and a process (sh, then sleep) with the
// canary in its environment and its argv, holding open a deleted file
// that has the canary. The canary travels on stdin. All of it is removed
// when the test ends.
func plantCanary(t testing.TB, container, user, canary string) canaryPlaces {
	t.Helper()
	home := "/home/" + user
	tag := randomHex(t, 6)
	pl := canaryPlaces{
		File:     home + "/.cache/keyhunt-" + tag + "/planted.txt",
		HashFile: home + "/.cache/keyhunt-" + tag + "/log.txt",
		Shm:      "/dev/shm/keyhunt-" + tag,
	}
	const plant = `set -eu
IFS= read -r v; IFS= read -r h
umask 077
mkdir -p "$(dirname "$1")"
printf 'api_key=%s\n' "$v" >"$1"
printf 'key sha256:%s\n' "$h" >"$2"
printf '%s\n' "$v" >"$3"
printf '%s\n' "$v" >"$4"
HUNT_CANARY=$v; export HUNT_CANARY
setsid sh -c 'exec 3<"$1"; rm -f -- "$1"; sleep 300; exit 0' keyhunt-canary "$4" "$v" </dev/null >/dev/null 2>&1 &
echo $!`
	gone := "/tmp/keyhunt-" + tag + "-deleted"
	cmd := exec.Command("docker", "exec", "-i", "-u", user, container, "sh", "-c", plant, "sh", pl.File, pl.HashFile, pl.Shm, gone)
	cmd.Stdin = strings.NewReader(canary + "\n" + keyHashPrefix(canary) + "\n")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "plant the canary: %s", out)
	pl.PID = strings.TrimSpace(string(out))
	_, err = strconv.Atoi(pl.PID)
	require.NoError(t, err, "the canary process's pid: %q", out)
	t.Cleanup(func() {
		_ = exec.Command("docker", "exec", "-u", "0", container, "sh", "-c", `kill "$1" 2>/dev/null; pkill -P "$1" 2>/dev/null; rm -rf -- "$(dirname "$2")" "$3" "$4"; true`,
			"sh", pl.PID, pl.File, pl.Shm, gone).Run()
	})
	// The process holds the deleted file once it has run its first line.
	require.Eventually(t, func() bool {
		return exec.Command("docker", "exec", "-u", user, container, "test", "!", "-e", gone).Run() == nil
	}, 10*time.Second, 100*time.Millisecond, "the canary process deletes its open file")
	return pl
}

// randomHex is n random bytes in hex.
func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// requireCanaryFound asserts that huntSecret, given the canary's needles
// (keyNeedles), found the canary in each place plantCanary put it.
func requireCanaryFound(t testing.TB, found []string, pl canaryPlaces) {
	t.Helper()
	for _, want := range []string{
		"needle 0: file " + pl.File,
		"needle 1: file " + pl.HashFile,
		"needle 0: file " + pl.Shm,
		"needle 0: environ of pid " + pl.PID + " (sh)",
		"needle 0: cmdline of pid " + pl.PID + " (sh)",
		"needle 0: deleted open file /proc/" + pl.PID + "/fd/3 (sh)",
	} {
		require.Contains(t, found, want, "the hunter missed a planted canary: %q", found)
	}
}

// TestKeyHuntFindsCanary: huntSecret's positive control on each desktop
// backend (E2B template desktop, Daytona snapshot desktop, Box, on their
// emulators, each a computer made through the worker): a canary planted
// as the sandbox's user (files under its home and in /dev/shm, a hash
// prefix in a log line, a process's environment and argv, a deleted file
// a process holds open) is found in every one of those places, and a
// needle never planted is found nowhere.
func TestKeyHuntFindsCanary(t *testing.T) {
	backends := []struct {
		name string
		make func(t *testing.T) (container string)
	}{
		{"e2b-desktop", func(t *testing.T) string {
			emu := bothTemplates(t)
			e := templateWorker(t, e2bEnv(emu, nil), filepath.Join(openDir(t, "wire-khe2b-"), "machines"))
			ref := desktopComputer(t, e, map[string]any{"scope": map[string]string{"team": "kh"}, "template": e2b.DesktopTemplate})
			return sandboxOf(t, ref)
		}},
		{"daytona-desktop", func(t *testing.T) string {
			emu := bothSnapshots(t)
			e := templateWorker(t, daytonaEnv(emu, nil), filepath.Join(openDir(t, "wire-khdt-"), "machines"))
			ref := desktopComputer(t, e, map[string]any{"scope": map[string]string{"team": "kh"}, "template": daytona.DesktopSnapshot})
			return daytonaContainer(t, ref)
		}},
		{"box", func(t *testing.T) string {
			emu := boxEmulator(t)
			e := templateWorker(t, boxEnv(emu, nil), filepath.Join(openDir(t, "wire-khbox-"), "machines"))
			ref := desktopComputer(t, e, map[string]any{"scope": map[string]string{"team": "kh"}})
			return boxContainer(t, emu, ref)
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			container := b.make(t)
			canary := "keyhunt-canary-" + randomHex(t, 16)
			pl := plantCanary(t, container, "user", canary)
			start := time.Now()
			found := huntSecret(t, container, append(keyNeedles(canary), "never-planted-"+randomHex(t, 16))...)
			took := time.Since(start)
			requireCanaryFound(t, found, pl)
			for _, f := range found {
				require.False(t, strings.HasPrefix(f, "needle 2:"), "a needle never planted was found: %s", f)
			}
			t.Logf("%s: the canary found in %d places (%s) in %s", b.name, len(found), strings.Join(found, "; "), took.Round(10*time.Millisecond))
		})
	}
}

// desktopComputer makes a computer on e with body (running, with bot
// alice) and returns its provider ref.
func desktopComputer(t *testing.T, e *workerEnv, body map[string]any) string {
	t.Helper()
	status, cc, d := createComputer(t, e, body)
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, d.do(t, "POST", "/bots", map[string]string{"id": "alice"}, nil))
	c, err := e.w.Store.GetComputer(t.Context(), d.computer)
	require.NoError(t, err)
	require.NotEmpty(t, c.ProviderRef)
	return c.ProviderRef
}

package deploytest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/testenv"
)

// unit is a systemd unit file: section -> key -> every value given.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestWorkerSystemdUnit: deploy/systemd/open-bot-worker.service runs
// `worker serve` with the hardening docs/operations.md names, its state
// directory the one writable place and holding DATA_DIR and the machines
// directory, the token as a credential file the worker's token-file check
// accepts, secrets only in the root-only environment file; every variable it
// and worker.env.example set is one the worker reads, and the two show a
// worker group's settings to uncomment (its token as a credential); and
// `systemd-analyze verify` has nothing to say about it (systemd need not be
// PID 1 for that).
func TestWorkerSystemdUnit(t *testing.T) {
	root := testenv.RepoRoot(t)
	path := filepath.Join(root, "deploy", "systemd", "open-bot-worker.service")
	u := parseUnit(t, path)
	s := u["Service"]
	one := func(k string) string {
		t.Helper()
		if len(s[k]) != 1 {
			t.Errorf("[Service] %s given %d times, want once: %q", k, len(s[k]), s[k])
			return ""
		}
		return s[k][0]
	}
	if f := strings.Fields(one("ExecStart")); len(f) != 2 || f[1] != "serve" || !filepath.IsAbs(f[0]) {
		t.Errorf("ExecStart %q: want /abs/path/to/worker serve", s["ExecStart"])
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes", "ProtectHome": "yes",
		"StateDirectory": "open-bot", "UMask": "0077",
	} {
		if got := one(k); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if s["User"] != nil || s["DynamicUser"] != nil {
		t.Errorf("User/DynamicUser set: the docker provider's token files must be root's (botd refuses others)")
	}
	env := map[string]string{}
	for _, e := range s["Environment"] {
		k, v, _ := strings.Cut(strings.Trim(e, `"`), "=")
		env[k] = v
	}
	for _, k := range []string{"DATA_DIR", "WORKER_MACHINES_DIR"} {
		if !strings.HasPrefix(env[k], "/var/lib/open-bot/") {
			t.Errorf("%s=%q is not in the state directory /var/lib/open-bot (the one place ProtectSystem=strict leaves writable)", k, env[k])
		}
	}
	if env["WORKER_TOKEN_FILE"] != "%d/worker-token" {
		t.Errorf("WORKER_TOKEN_FILE=%q, want %%d/worker-token (the credential)", env["WORKER_TOKEN_FILE"])
	}
	cred := false
	for _, c := range s["LoadCredential"] {
		if strings.HasPrefix(c, "worker-token:/") {
			cred = true
		}
	}
	if !cred {
		t.Errorf("LoadCredential=worker-token:… missing: %q", s["LoadCredential"])
	}
	if ef := one("EnvironmentFile"); !filepath.IsAbs(strings.TrimPrefix(ef, "-")) {
		t.Errorf("EnvironmentFile=%q", ef)
	}
	// Secrets never by value in the unit (world-readable).
	for k := range env {
		switch k {
		case "WORKER_TOKEN", "WORKER_OPERATOR_TOKEN", "WORKER_GROUP_TOKEN", "WORKER_DATABASE_URL", "MODEL_API_KEY", "E2B_API_KEY", "DAYTONA_API_KEY", "BOX_API_KEY":
			t.Errorf("the unit sets %s by value: secrets go in the root-only environment file or a credential", k)
		}
		if !workerReads(t, k) {
			t.Errorf("the unit sets %s, which the worker does not read", k)
		}
	}
	// The example environment file: only variables the worker reads.
	ex, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "worker.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, line := range strings.Split(string(ex), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "#")
		k, _, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") || strings.ToUpper(k) != k {
			continue
		}
		named[k] = true
		if !workerReads(t, k) {
			t.Errorf("worker.env.example sets %s, which the worker does not read", k)
		}
	}
	// A worker group's settings are there to uncomment; its token comes
	// by a credential, like the worker's.
	for _, k := range []string{"WORKER_GROUP_LISTEN", "WORKER_GROUP_ADDR", "WORKER_GROUP_LEASE"} {
		if !named[k] {
			t.Errorf("worker.env.example does not show %s (a worker group's setting)", k)
		}
	}
	if named["WORKER_GROUP_TOKEN"] {
		t.Errorf("worker.env.example shows WORKER_GROUP_TOKEN by value: it comes by LoadCredential (WORKER_GROUP_TOKEN_FILE=%%d/group-token)")
	}
	if raw, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(string(raw), "#Environment=WORKER_GROUP_TOKEN_FILE=%d/group-token") ||
		!strings.Contains(string(raw), "#LoadCredential=group-token:/") {
		t.Errorf("the unit does not show the group token's credential (LoadCredential=group-token:…, WORKER_GROUP_TOKEN_FILE=%%d/group-token) to uncomment")
	}

	t.Run("systemd-analyze verify", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			testenv.Unavailable(t, "systemd-analyze not on PATH (Debian's systemd package)")
		}
		// verify wants ExecStart's program to exist: this test's own
		// binary stands in for the installed worker.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		prog := strings.Fields(s["ExecStart"][0])[0]
		tmp := filepath.Join(t.TempDir(), "open-bot-worker.service")
		if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(string(raw), prog, self)), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// verify exits 0 on an unknown key or a value it cannot parse
		// ("ignoring"): any output at all is a finding.
		out, err := exec.CommandContext(ctx, "systemd-analyze", "verify", tmp).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	})
}

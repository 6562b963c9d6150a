package box_test

// noEnv (seed 000: boxes are created and resumed "with noEnv: true, as
// required when a third party supplies the API key"): the emulator's
// account has dashboard secrets (an env var and a secret file, emutest's
// AccountSecret), which a box made or resumed without noEnv holds; every
// create and resume the adapter sends carries noEnv: true, so none of its
// boxes ever holds them.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines/desktop"
	"github.com/open-bot/computer/apps/worker/internal/providers/box"
	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator/emutest"
	"github.com/open-bot/computer/pkg/shared/client"
)

// accountProbe prints what of the account's secrets a box's command sees:
// the env var's value and the secret file's contents.
const accountProbe = `printf 'env=%s\n' "$` + emutest.AccountSecretEnv + `"; printf 'file=%s\n' "$(cat "/home/user/` + emutest.AccountSecretFile + `" 2>/dev/null)"`

// boxCall calls the emulator's API straight (through the spec checker),
// as a client that is not the adapter would.
func boxCall(t *testing.T, env *emutest.Server, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, env.URL+box.Base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+env.APIKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := env.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if out != nil {
		require.NoError(t, json.Unmarshal(buf.Bytes(), out), "%s", buf.String())
	}
	return resp.StatusCode
}

// TestBoxEmulatorAccountEnv is the positive control of TestBoxNoEnv: the
// emulator does apply the account's secrets to a box created without
// noEnv (its commands see the env var, the file is in its home), takes
// them away when the box is resumed with noEnv: true, and records each
// create and resume as received.
func TestBoxEmulatorAccountEnv(t *testing.T) {
	root(t)
	env := emutest.Start(t)
	var made struct{ Box box.Box }
	require.Equal(t, http.StatusCreated, boxCall(t, env, http.MethodPost, "/boxes", `{"ttlSeconds":600}`, &made))
	id := made.Box.ID
	t.Cleanup(func() { boxCall(t, env, http.MethodDelete, "/boxes/"+id, "", nil) })
	probe := func() string {
		var r box.CommandResult
		body, err := json.Marshal(map[string]any{"command": accountProbe, "timeoutSeconds": 20})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, boxCall(t, env, http.MethodPost, "/boxes/"+id+"/commands", string(body), &r))
		require.Zero(t, r.ExitCode, r.Stderr)
		return r.Stdout
	}
	holds := "env=" + env.AccountSecret + "\nfile=" + emutest.AccountSecretEnv + "=" + env.AccountSecret + "\n"
	require.Equal(t, holds, probe(), "a box created without noEnv holds the account's secrets")

	require.Equal(t, http.StatusOK, boxCall(t, env, http.MethodPost, "/boxes/"+id+"/resume", `{"ttlSeconds":600,"noEnv":true}`, nil))
	require.Equal(t, "env=\nfile="+emutest.AccountSecretEnv+"="+env.AccountSecret+"\n", probe(),
		"resumed with noEnv, its commands lose the env var (the file written before stays)")

	noEnv := true
	require.Equal(t, []emulator.LifeCall{{Op: "create", Box: id}, {Op: "resume", Box: id, NoEnv: &noEnv}}, env.Emulator.LifeCalls())
}

// TestBoxNoEnv: every create and resume the adapter sends carries noEnv:
// true (the emulator's record: the create, the resume of Reconnect, the
// refresher's resumes of a box in use, the resume after a stop), and the
// box never holds the account's secrets: not in its commands' environment,
// not as a file.
func TestBoxNoEnv(t *testing.T) {
	root(t)
	env := emutest.Start(t)
	p := newProvider(t, env, env.APIKey, func(o *box.Options) { o.RefreshEvery = 300 * time.Millisecond })
	ctx := t.Context()
	ref, err := p.Provision(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), ref) })
	m, err := p.Reconnect(ctx, ref)
	require.NoError(t, err)
	clean := func(m *desktop.Machine) {
		t.Helper()
		r, err := m.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", accountProbe}})
		require.NoError(t, err)
		require.True(t, r.Stdout == "env=\nfile=\n", "the box holds the account's secrets: %q",
			strings.ReplaceAll(r.Stdout, env.AccountSecret, "<account secret>"))
	}
	clean(m)
	// In use: the refresher resumes the running box (a new TTL).
	first := env.Emulator.ExpiresAt(ref)
	waitUntil(t, ctx, 30*time.Second, "the refresher to resume the box in use", func() bool {
		clean(m)
		return env.Emulator.ExpiresAt(ref).After(first)
	})
	// Stopped (archived), then resumed under the same id.
	require.NoError(t, p.Stop(ctx, ref))
	m, err = p.Reconnect(ctx, ref)
	require.NoError(t, err)
	clean(m)

	calls := env.Emulator.LifeCalls()
	ops := map[string]int{}
	for _, c := range calls {
		require.Equal(t, ref, c.Box)
		require.NotNil(t, c.NoEnv, "the %s of box %s carried no noEnv", c.Op, c.Box)
		require.True(t, *c.NoEnv, "the %s of box %s carried noEnv: false", c.Op, c.Box)
		ops[c.Op]++
	}
	require.Equal(t, 1, ops["create"], "%+v", calls)
	require.GreaterOrEqual(t, ops["resume"], 3, "Reconnect's, the refresher's and the one after the stop: %+v", calls)
	t.Logf("creates and resumes, all with noEnv: true: %v", ops)
}

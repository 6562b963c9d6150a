package main

// Box as the seed says (issue 30, requirement 4): the worker creates and
// resumes boxes with noEnv: true, so the Box account's own dashboard
// secrets (the emulator's account has an env var and a secret file, which
// a box made or resumed without noEnv holds) never enter a computer's box;
// and the box's one desktop is the bot's screen, index 0 (display :0).

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/box"
	boxemutest "github.com/open-bot/computer/apps/worker/internal/providers/box/emulator/emutest"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// boxStatus is box ref's status as the emulator's API answers it.
func boxStatus(t *testing.T, emu *boxemutest.Server, ref string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, emu.URL+box.Base+"/boxes/"+ref, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+emu.APIKey)
	resp, err := emu.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct{ Box box.Box }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Box.Status
}

// TestBoxNoEnvThroughWorker: through the worker's own flows on the Box
// emulator (create a computer, stop it and start it again: the box
// archived and resumed under the same id; lose the box behind the worker's
// back and recover: a replacement box), every create and resume the
// emulator received carried noEnv: true, and after each step the
// account's secret is nowhere in the box (huntSecret, as root: files,
// every process's environment and argv), and the bot's screen is the
// box's own desktop, slot 0 on :0. TestBoxEmulatorAccountEnv (package
// box) is the positive control: a box made without noEnv does hold it.
func TestBoxNoEnvThroughWorker(t *testing.T) {
	emu := boxEmulator(t)
	dir := openDir(t, "wire-boxnoenv-")
	e := templateWorker(t, boxEnv(emu, nil), filepath.Join(dir, "machines"))
	const bot = "alice"
	status, cc, d := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "noenv"}})
	require.Equal(t, http.StatusCreated, status, "%+v", cc.Error)
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, http.StatusCreated, d.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	ctx := t.Context()

	// check: the box behind the computer now holds none of the account's
	// secrets, and the bot's screen is its desktop :0.
	check := func(step string) string {
		t.Helper()
		c, err := e.w.Store.GetComputer(ctx, d.computer)
		require.NoError(t, err)
		require.Empty(t, huntSecret(t, boxContainer(t, emu, c.ProviderRef), emu.AccountSecret),
			"%s: the Box account's secret is in the box", step)
		m, err := e.w.Computers.Machine(ctx, d.computer)
		require.NoError(t, err)
		s, err := m.StartScreen(ctx, bot)
		require.NoError(t, err)
		require.Equal(t, 0, s.Slot, "%s: the bot's screen is the box's own desktop", step)
		require.Equal(t, ":0", s.Display, step)
		return c.ProviderRef
	}
	first := check("created")

	// Stopped: the box is archived; started: resumed under the same id.
	var life struct {
		Computer struct{ State, LastError string } `json:"computer"`
	}
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/stop", nil, &life))
	require.Equal(t, store.StateStopped, life.Computer.State, life.Computer.LastError)
	require.Equal(t, "archived", boxStatus(t, emu, first))
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/start", nil, &life))
	require.Equal(t, "running", life.Computer.State, life.Computer.LastError)
	require.Equal(t, first, check("resumed after a stop"), "the same box, resumed")

	// Lost behind the worker's back: recover makes a replacement box.
	deleteBox(t, emu, first)
	require.Equal(t, http.StatusOK, d.do(t, "POST", "/recover", nil, &life))
	require.Equal(t, "running", life.Computer.State, life.Computer.LastError)
	second := check("replaced")
	require.NotEqual(t, first, second)

	// What the emulator received: every create and resume with noEnv.
	calls := emu.Emulator.LifeCalls()
	per := map[string]map[string]int{first: {}, second: {}}
	for _, c := range calls {
		require.NotNil(t, c.NoEnv, "the worker's %s of box %s carried no noEnv", c.Op, c.Box)
		require.True(t, *c.NoEnv, "the worker's %s of box %s carried noEnv: false", c.Op, c.Box)
		require.Contains(t, per, c.Box, "a create or resume of a box no computer had")
		per[c.Box][c.Op]++
	}
	require.Equal(t, 1, per[first]["create"], "%+v", calls)
	require.GreaterOrEqual(t, per[first]["resume"], 2, "the resume after the create and the one after the stop: %+v", calls)
	require.Equal(t, 1, per[second]["create"], "%+v", calls)
	require.GreaterOrEqual(t, per[second]["resume"], 1, "%+v", calls)
	t.Logf("creates and resumes the emulator received, all with noEnv: true: %v", per)
}

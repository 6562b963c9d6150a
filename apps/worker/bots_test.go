package main

// Bots on a real botd (Xvfb, xfce, Chromium, Codex): bot ids have no '-'
// (so a "<bot>-<suffix>" screen is never another bot's) and a bot stored
// before the rule is refused with what to do; DELETE …/bots/{bot} is
// refused while the bot has a run, then stops the bot's screens and
// forgets their profiles, leaving the other bot's screen and the bot's
// folder alone (unless ?purge=true); a Private computer takes exactly one
// bot, whose home and working directory is the whole workspace.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared/client"
)

// recordingModel is the scripted model behind a handler that keeps every
// request body (what Codex sent: instructions, working directory).
type recordingModel struct {
	model  *mockmodel.Server
	mu     sync.Mutex
	bodies []string
}

func (m *recordingModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.bodies = append(m.bodies, string(b))
	m.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	m.model.ServeHTTP(w, r)
}

// since returns the bodies recorded from index n on.
func (m *recordingModel) since(n int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.bodies[n:]...)
}

func (m *recordingModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.bodies)
}

// errMessage is an error envelope's message.
func errMessage(t testing.TB, body string) string {
	t.Helper()
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &env), body)
	return env.Error.Message
}

// botdScreens is botd's screen list: id → state.
func botdScreens(t testing.TB, botd *client.Client) map[string]string {
	t.Helper()
	var list struct {
		Screens []struct{ ID, State string } `json:"screens"`
	}
	require.NoError(t, botd.Do(t.Context(), http.MethodGet, "/screens", nil, &list))
	out := map[string]string{}
	for _, s := range list.Screens {
		out[s.ID] = s.State
	}
	return out
}

func TestRemoveBotsAndPrivateComputer(t *testing.T) {
	var answerAtOnce atomic.Bool // else: observe, then think until the test ends
	hang := make(chan struct{})
	rec := &recordingModel{model: mockmodel.New(func(outs []mockmodel.Output) mockmodel.Step {
		if answerAtOnce.Load() {
			return mockmodel.Step{Message: "done"}
		}
		if len(outs) == 0 {
			return mockmodel.Step{Tool: "computer_observe", Args: map[string]any{}}
		}
		<-hang
		return mockmodel.Step{Message: "resumed and done"}
	}).RequireKey(scriptedKey)}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) }) // runs before srv.Close
	c := startComputer(t, srv.URL, 640, "VIEW_PORT_BASE=16500", "MAX_SCREENS=3")
	botd := client.New(c.url, c.token, nil)
	profile := func(screen string) string { return filepath.Join(c.home, "desktop", "screens", screen) }
	exists := func(p string) bool {
		_, err := os.Stat(p)
		require.True(t, err == nil || errors.Is(err, os.ErrNotExist), "%v", err)
		return err == nil
	}

	eachStore(t, func(t *testing.T, dbURL string) {
		answerAtOnce.Store(false)
		e := startWorkerWith(t, c, "scripted-model", withDatabase(dbURL), "alice", "bob")
		requirePostgresUsed(t, e, dbURL)
		ctx := t.Context()
		at := func(method, path string, body any) (int, string) {
			return raw(t, method, e.url+"/v1/computers/"+e.computer+path, e.token, e.capa, body)
		}

		// Bot ids have no '-' (nor capitals): refused with the rule.
		for _, id := range []string{"alice-2", "Alice", "_x", "a/b", strings.Repeat("a", 64)} {
			st, body := at("POST", "/bots", map[string]string{"id": id})
			require.Equal(t, http.StatusBadRequest, st, "%q: %s", id, body)
			require.Contains(t, errMessage(t, body), "no '-'", id)
		}
		// A bot stored before the rule is refused with what to do, and can
		// be removed.
		require.NoError(t, e.w.Store.AddBot(ctx, store.Bot{ComputerID: e.computer, ID: "old-bot", TeamID: "team:t1"}))
		st, body := at("POST", "/tools/file_list", map[string]any{"botId": "old-bot", "args": map[string]string{"path": ""}})
		require.Equal(t, http.StatusBadRequest, st, body)
		require.Contains(t, errMessage(t, body), `remove it (DELETE /v1/computers/{id}/bots/old-bot) and add it again under an id like "old_bot"`)
		st, body = at("DELETE", "/bots/old-bot", nil)
		require.Equal(t, http.StatusOK, st, body)

		// alice's screens (her own and a helper) and bob's, each with its
		// browser profile; a file in alice's folder.
		for _, s := range []struct{ bot, screen string }{{"alice", ""}, {"alice", "alice-helper"}, {"bob", ""}} {
			args := map[string]any{}
			if s.screen != "" {
				args["screen"] = s.screen
			}
			st, res := e.tool(t, s.bot, "computer_observe", args)
			require.Equal(t, http.StatusOK, st)
			require.True(t, res.Success, "%s on %q: %s", s.bot, s.screen, res.text())
		}
		for _, id := range []string{"alice", "alice-helper", "bob"} {
			require.True(t, exists(profile(id)), "%s has a profile", id)
		}
		writeBotFile(t, e, "alice", "bots/alice/keep.txt")

		// While alice has a run, she cannot be removed.
		run := e.startRun(t, "alice", "Look at the screen.")
		waitFor(t, "alice's run to be mid-turn", 3*time.Minute, func() bool {
			return len(e.getRun(t, run).ToolCalls) >= 1
		})
		st, body = at("DELETE", "/bots/alice", nil)
		require.Equal(t, http.StatusConflict, st, body)
		require.Contains(t, errMessage(t, body), "has a run")
		require.Equal(t, "running", botdScreens(t, botd)["alice"], "the refusal stopped nothing")
		e.stopRun(t, run)

		// Removed: her screens stopped and forgotten with their profiles;
		// bob's screen, and her folder, untouched.
		st, body = at("DELETE", "/bots/alice", nil)
		require.Equal(t, http.StatusOK, st, body)
		var removed struct {
			Screens []string `json:"forgottenScreens"`
			Purged  bool     `json:"purged"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &removed))
		require.ElementsMatch(t, []string{"alice", "alice-helper"}, removed.Screens)
		require.False(t, removed.Purged)
		screens := botdScreens(t, botd)
		require.NotContains(t, screens, "alice")
		require.NotContains(t, screens, "alice-helper")
		require.Equal(t, "running", screens["bob"], "bob's screen is left alone")
		require.False(t, exists(profile("alice")), "alice's profile is forgotten")
		require.False(t, exists(profile("alice-helper")), "alice's helper's profile is forgotten")
		require.True(t, exists(profile("bob")), "bob's profile is kept")
		require.True(t, exists(filepath.Join(c.home, "bot", "bots", "alice", "keep.txt")), "bots/alice/ stays without purge")
		st, body = at("POST", "/tools/file_list", map[string]any{"botId": "alice", "args": map[string]string{"path": ""}})
		require.Equal(t, http.StatusNotFound, st, "alice is gone: %s", body)
		st, body = at("DELETE", "/bots/alice", nil)
		require.Equal(t, http.StatusNotFound, st, body)
		var got struct {
			Computer struct {
				Bots []struct{ ID string } `json:"bots"`
			} `json:"computer"`
		}
		require.Equal(t, http.StatusOK, e.do(t, "GET", "", nil, &got))
		require.Len(t, got.Computer.Bots, 1)
		require.Equal(t, "bob", got.Computer.Bots[0].ID)

		// Added again and removed with purge: bots/alice/ goes too.
		st, body = at("POST", "/bots", map[string]string{"id": "alice"})
		require.Equal(t, http.StatusCreated, st, body)
		st, body = at("DELETE", "/bots/alice?purge=true", nil)
		require.Equal(t, http.StatusOK, st, body)
		require.False(t, exists(filepath.Join(c.home, "bot", "bots", "alice")), "purge removed bots/alice/")
		require.True(t, exists(filepath.Join(c.home, "bot", "bots", "bob")), "and nothing else")
		st, body = at("DELETE", "/bots/bob?purge=yes", nil)
		require.Equal(t, http.StatusBadRequest, st, body)

		// A Private computer takes exactly one bot; its home and working
		// directory is the whole workspace, and its instructions say so.
		st, pid, body := e.tryCreate(t, c, map[string]any{"session": "p1"}, "private")
		require.Equal(t, http.StatusCreated, st, body)
		var pc struct {
			Capability string `json:"capability"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &pc))
		p := *e
		p.computer, p.capa = pid, pc.Capability
		pat := func(method, path string, body any) (int, string) {
			return raw(t, method, p.url+"/v1/computers/"+p.computer+path, p.token, p.capa, body)
		}
		st, body = pat("POST", "/bots", map[string]string{"id": "solo"})
		require.Equal(t, http.StatusCreated, st, body)
		require.Contains(t, body, `"dir":"."`)
		st, body = pat("POST", "/bots", map[string]string{"id": "second"})
		require.Equal(t, http.StatusConflict, st, body)
		require.Contains(t, errMessage(t, body), "exactly one bot (solo)")
		st, body = pat("DELETE", "/bots/solo?purge=true", nil)
		require.Equal(t, http.StatusBadRequest, st, body)

		st, res := p.tool(t, "solo", "shell", map[string]any{"argv": []string{"pwd", "-P"}})
		require.Equal(t, http.StatusOK, st)
		var pwd struct{ Stdout string }
		require.NoError(t, json.Unmarshal([]byte(res.text()), &pwd), res.text())
		workspace := strings.TrimSpace(pwd.Stdout)
		require.True(t, strings.HasSuffix(workspace, "/bot"), "the workspace: %q", workspace)
		answerAtOnce.Store(true)
		from := rec.count()
		id := p.startRun(t, "solo", "Say done.")
		final, _ := waitRun(t, &p, id, 3*time.Minute)
		require.Equal(t, runs.StatusCompleted, final.Status, "%+v", final)
		bodies := rec.since(from)
		require.NotEmpty(t, bodies)
		all := strings.Join(bodies, "\n")
		cwd := regexp.MustCompile(`<cwd>[^<]*</cwd>`).FindString(all)
		require.True(t, strings.Contains(all, "Your home and working directory is the whole workspace"), "the private bot's instructions say so (cwd %s)", cwd)
		require.False(t, strings.Contains(all, "bots/solo"), "no bots/<id> folder on a Private computer (cwd %s)", cwd)
		require.Equal(t, "<cwd>"+workspace+"</cwd>", cwd, "the thread works in the whole workspace")
		require.False(t, exists(filepath.Join(workspace, "bots", "solo")), "no bots/solo was made")

		// Once its bot is removed, the Private computer takes another.
		st, body = pat("DELETE", "/bots/solo", nil)
		require.Equal(t, http.StatusOK, st, body)
		st, body = pat("POST", "/bots", map[string]string{"id": "second"})
		require.Equal(t, http.StatusCreated, st, body)
		// Nothing of this variant is left on the shared botd for the next.
		st, body = pat("DELETE", "/bots/second", nil)
		require.Equal(t, http.StatusOK, st, body)
		st, body = at("DELETE", "/bots/bob?purge=true", nil)
		require.Equal(t, http.StatusOK, st, body)
	})
}

package main

// The provider's description through the API and the dashboard, and a
// single-screen backend keeping its one screen: on the single-screen
// provider (over local botd machines) GET /v1/computers/{id} says
// multiScreen false; once bot alice has the primary screen, bob's
// takeover, his request_takeover inside a run and a dashboard view of his
// screen answer MULTI_SCREEN_UNAVAILABLE and start no display, while his
// shell and file tools keep working and alice's takeover works.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

func TestSingleScreenKeepsOneScreen(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	// bob's run: request_takeover, then done. The takeover's answer is kept.
	var mu sync.Mutex
	var takeoverAnswer string
	model := mockmodel.New(func(outs []mockmodel.Output) mockmodel.Step {
		switch len(outs) {
		case 0:
			return mockmodel.Step{Tool: "request_takeover", Args: map[string]any{"reason": "please sign in"}}
		case 1:
			mu.Lock()
			takeoverAnswer = fmt.Sprintf("%+v", outs[0])
			mu.Unlock()
			return mockmodel.Step{Tool: "file_write", Args: map[string]any{"path": "bots/bob/after.txt", "content": "files still work\n"}}
		}
		return mockmodel.Step{Message: "done"}
	}).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	t.Cleanup(modelSrv.Close)
	dir := openDir(t, "wire-single-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindSingleScreen, "WORKER_BOTD_BIN": buildBotd(t, dir),
		// Displays 645-652 and ports 16600-16621: this test's own.
		"WORKER_LOCAL_DISPLAY_BASE": "645", "WORKER_LOCAL_PORT_BASE": "16600", "WORKER_LOCAL_SLOTS": "2",
		"MODEL_UPSTREAM_URL": modelSrv.URL + "/v1", "MODEL_API_KEY": scriptedKey,
		// Over local machines even where a Docker engine answers: a
		// container could not reach this loopback model server.
		"DOCKER_HOST": "unix://" + filepath.Join(dir, "no-docker.sock"),
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), "alice")
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/bots", map[string]string{"id": "bob"}, nil))
	botd, err := e.w.Computers.Machine(t.Context(), e.computer)
	require.NoError(t, err)
	hasScreen := func(id string) bool {
		scs, err := botd.Screens(t.Context())
		require.NoError(t, err)
		for _, s := range scs {
			if s.ID == id {
				return true
			}
		}
		return false
	}

	// The provider's description.
	var got struct {
		Computer struct {
			Provider    string `json:"provider"`
			Description *struct {
				Kind         string `json:"kind"`
				Capabilities struct {
					MultiScreen, Stop, Persistent bool
				} `json:"capabilities"`
			} `json:"description"`
		} `json:"computer"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "GET", "", nil, &got))
	require.NotNil(t, got.Computer.Description)
	require.Equal(t, providers.KindSingleScreen, got.Computer.Description.Kind)
	require.False(t, got.Computer.Description.Capabilities.MultiScreen)
	require.True(t, got.Computer.Description.Capabilities.Stop)
	require.True(t, got.Computer.Description.Capabilities.Persistent)

	// alice takes the primary screen; bob's graphical tools are refused.
	st, res := e.tool(t, "alice", "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, st)
	require.True(t, res.Success, res.text())
	_, res = e.tool(t, "bob", "computer_observe", map[string]any{})
	require.False(t, res.Success)
	require.Contains(t, res.text(), "MULTI_SCREEN_UNAVAILABLE")
	// Elements and recordings are the inner machine's on the screen that
	// passes (the wrapper unwraps), and refused on the others.
	st, res = e.tool(t, "alice", "computer_observe", map[string]any{"elements": true})
	require.Equal(t, http.StatusOK, st)
	require.True(t, res.Success, res.text())
	require.NotContains(t, res.text(), "elements_unavailable")
	_, res = e.tool(t, "bob", "computer_observe", map[string]any{"elements": true})
	require.False(t, res.Success)
	require.Contains(t, res.text(), "MULTI_SCREEN_UNAVAILABLE")
	var rec struct {
		ID string `json:"id"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/bots/alice/recordings", map[string]any{"maxSeconds": 30}, &rec))
	require.NotEmpty(t, rec.ID)
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/bots/alice/recordings/"+rec.ID+"/stop", nil, nil))
	st, body := raw(t, "POST", e.url+"/v1/computers/"+e.computer+"/bots/bob/recordings", e.token, e.capa, map[string]any{})
	require.Equal(t, http.StatusServiceUnavailable, st, body)
	require.Contains(t, body, `"code":"MULTI_SCREEN_UNAVAILABLE"`)

	// Take control of bob's screen: MULTI_SCREEN_UNAVAILABLE, no display.
	st, body = raw(t, "POST", e.url+"/v1/computers/"+e.computer+"/bots/bob/takeover", e.token, e.capa, nil)
	require.Equal(t, http.StatusServiceUnavailable, st, body)
	require.Contains(t, body, `"code":"MULTI_SCREEN_UNAVAILABLE"`)
	require.NotContains(t, body, "controlUrl")
	require.False(t, hasScreen("bob"), "no second display was started for a person")
	// alice's screen, the primary, is taken and released as ever.
	status, link, msg := takeoverCall(t, e, "POST", "alice", "")
	require.Equal(t, http.StatusOK, status, msg)
	require.NotEmpty(t, link.URL)
	status, _, msg = takeoverCall(t, e, "DELETE", "alice", "")
	require.Equal(t, http.StatusOK, status, msg)

	// bob's shell and files keep working.
	st, res = e.tool(t, "bob", "shell", map[string]any{"argv": []string{"echo", "hello from bob"}})
	require.Equal(t, http.StatusOK, st)
	require.True(t, res.Success, res.text())
	require.Contains(t, res.text(), "hello from bob")
	writeBotFile(t, e, "bob", "bots/bob/note.txt")

	// In a run, bob's request_takeover is MULTI_SCREEN_UNAVAILABLE: the run
	// never waits for a person, carries no control link, and goes on.
	id := e.startRun(t, "bob", "Ask a person to sign in.")
	final, _ := waitRun(t, e, id, 3*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, "%+v", final)
	stored, err := e.w.Runs.StoredEvents(t.Context(), id)
	require.NoError(t, err)
	for _, ev := range stored {
		b, _ := json.Marshal(ev)
		require.NotContains(t, string(b), "waiting_takeover", "the run never waited")
		require.NotContains(t, string(b), "controlUrl")
	}
	mu.Lock()
	answer := takeoverAnswer
	mu.Unlock()
	require.Contains(t, answer, "MULTI_SCREEN_UNAVAILABLE", "the model is told why")
	require.Len(t, final.ToolCalls, 2)
	require.False(t, final.ToolCalls[0].Success)
	require.True(t, final.ToolCalls[1].Success, "files keep working in the run: %s", final.ToolCalls[1].Output)
	require.False(t, hasScreen("bob"), "no display was started for bob's request")

	// The dashboard shows the description and refuses a view of bob's
	// screen; alice's is viewed.
	loginLink, err := e.w.People.LoginLink(e.url)
	require.NoError(t, err)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar}
	resp, err := hc.Get(loginLink)
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = hc.Get(e.url + "/dashboard/api/state")
	require.NoError(t, err)
	var state struct {
		Computers []struct {
			ID           string `json:"id"`
			Capabilities *struct {
				MultiScreen, Stop, Persistent bool
			} `json:"capabilities"`
		} `json:"computers"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&state))
	resp.Body.Close()
	require.Len(t, state.Computers, 1)
	require.NotNil(t, state.Computers[0].Capabilities)
	require.False(t, state.Computers[0].Capabilities.MultiScreen)
	require.True(t, state.Computers[0].Capabilities.Stop)
	view := func(screen string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/dashboard/api/computers/"+e.computer+"/screens/"+screen+"/view", nil)
		req.Header.Set("X-Dashboard", "1")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	st, body = view("bob")
	require.Equal(t, http.StatusServiceUnavailable, st, body)
	require.Contains(t, body, `"code":"MULTI_SCREEN_UNAVAILABLE"`)
	require.NotContains(t, body, `"ws"`)
	st, body = view("alice")
	require.Equal(t, http.StatusOK, st, body)
	require.Contains(t, body, `"ws"`)
	require.False(t, hasScreen("bob"))
}

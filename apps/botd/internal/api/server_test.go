package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
)

const token = "test-token-0123456789abcdef"

func newTestServer(t *testing.T) (*httptest.Server, *health.Hub, *health.Model) {
	t.Helper()
	hub := health.NewHub()
	model := health.NewModel(hub, time.Now())
	s := New(Options{Token: token, Log: zerolog.Nop(), Hub: hub, Health: model})
	s.Mux().HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Name string `json:"name"`
			N    int    `json:"n"`
		}
		if err := httpx.DecodeJSON(w, r, &body, 64); err != nil {
			httpx.WriteErr(w, err)
			return
		}
		httpx.WriteJSON(w, http.StatusOK, body)
	})
	s.Mux().HandleFunc("GET /panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(hub.Close)
	return ts, hub, model
}

func do(t *testing.T, method, url, auth, body string) (int, shared.ErrorEnvelope, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	switch auth {
	case "":
	case "upgrade": // no bearer; headers of a websocket upgrade
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
	default:
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env shared.ErrorEnvelope
	_ = json.Unmarshal(b, &env)
	return resp.StatusCode, env, string(b)
}

func TestAuthAndEnvelope(t *testing.T) {
	ts, _, _ := newTestServer(t)
	for _, tc := range []struct {
		name, method, path, auth, body string
		status                         int
		code                           shared.Code
	}{
		{"healthz is public", "GET", "/healthz", "", "", 200, ""},
		{"health needs a token", "GET", "/health", "", "", 401, shared.CodeUnauthorized},
		{"wrong token", "GET", "/health", "wrong-token-0123456789abcdef", "", 401, shared.CodeUnauthorized},
		{"token prefix is not the token", "GET", "/health", token[:len(token)-1], "", 401, shared.CodeUnauthorized},
		{"query token refused without upgrade", "GET", "/health?token=" + token, "", "", 401, shared.CodeUnauthorized},
		{"query token refused on a POST that claims an upgrade", "POST", "/echo?token=" + token, "upgrade", `{"name":"x"}`, 401, shared.CodeUnauthorized},
		{"health with token", "GET", "/health", token, "", 200, ""},
		{"unknown route", "GET", "/nope", token, "", 404, shared.CodeNotFound},
		{"unknown route without token is 401 (fail closed)", "GET", "/nope", "", "", 401, shared.CodeUnauthorized},
		{"wrong method", "DELETE", "/health", token, "", 405, shared.CodeMethodNotAllowed},
		{"malformed JSON", "POST", "/echo", token, `{"name":`, 400, shared.CodeInvalidJSON},
		{"wrong type names the field", "POST", "/echo", token, `{"n":"x"}`, 400, shared.CodeInvalidJSON},
		{"unknown field", "POST", "/echo", token, `{"nam":"x"}`, 400, shared.CodeInvalidJSON},
		{"trailing garbage", "POST", "/echo", token, `{"name":"x"} {}`, 400, shared.CodeInvalidJSON},
		{"oversized body", "POST", "/echo", token, `{"name":"` + strings.Repeat("a", 100) + `"}`, 413, shared.CodeTooLarge},
		{"good body", "POST", "/echo", token, `{"name":"x","n":2}`, 200, ""},
		{"panic is a 500 envelope", "GET", "/panic", token, "", 500, shared.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, env, raw := do(t, tc.method, ts.URL+tc.path, tc.auth, tc.body)
			require.Equal(t, tc.status, status, raw)
			require.Equal(t, tc.code, env.Error.Code, raw)
			if tc.code != "" {
				require.NotEmpty(t, env.Error.Message)
				require.NotContains(t, raw, token)
			}
		})
	}
	_, env, _ := do(t, "POST", ts.URL+"/echo", token, `{"n":"x"}`)
	require.Contains(t, env.Error.Message, `"n"`)
}

func TestEventsPushHealthAndAcceptQueryToken(t *testing.T) {
	ts, hub, model := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/events"

	_, resp, err := websocket.Dial(ctx, wsURL+"?token=wrong", nil)
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	c, _, err := websocket.Dial(ctx, wsURL+"?token="+token, nil)
	require.NoError(t, err)
	defer c.CloseNow()
	read := func() shared.Event {
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var ev shared.Event
		require.NoError(t, json.Unmarshal(b, &ev))
		return ev
	}
	first := read()
	require.Equal(t, shared.EventHealth, first.Type)

	state := shared.StateStarting
	model.SetSources(health.Sources{Agent: func() shared.ProcessState { return state }})
	ev := read()
	require.Equal(t, shared.EventHealth, ev.Type)
	require.Contains(t, toJSON(t, ev.Data), `"agent":"starting"`)
	state = shared.StateRunning
	model.Changed()
	ev = read()
	require.Contains(t, toJSON(t, ev.Data), `"ok":true`)
	model.Changed() // unchanged: nothing is sent
	hub.Publish("custom", map[string]int{"n": 1})
	require.Equal(t, "custom", read().Type)
}

// TestEventsNothingLostRightAfterDial: an event published the moment the
// dial returns (a client that acts at once) still reaches the client, after
// the greeting. The server subscribes before the upgrade completes; when it
// subscribed after Accept, such events were lost (issue 16).
func TestEventsNothingLostRightAfterDial(t *testing.T) {
	ts, hub, _ := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/events?token=" + token
	for i := range 50 {
		c, _, err := websocket.Dial(ctx, wsURL, nil)
		require.NoError(t, err)
		hub.Publish("custom", map[string]int{"n": i})
		var types []string
		for len(types) < 2 {
			_, b, err := c.Read(ctx)
			require.NoError(t, err, "dial %d: events so far %v", i, types)
			var ev shared.Event
			require.NoError(t, json.Unmarshal(b, &ev))
			types = append(types, ev.Type)
		}
		require.Equal(t, []string{shared.EventHealth, "custom"}, types, "dial %d", i)
		c.CloseNow()
	}
}

func toJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

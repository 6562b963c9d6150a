package tools

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines"
)

func TestInNamespace(t *testing.T) {
	for _, tc := range []struct {
		bot, screen string
		want        bool
	}{
		{"alice", "alice", true},
		{"alice", "alice-helper", true},
		{"alice", "alice-1-2", true},
		{"alice", "alicex", false},
		{"alice", "bob", false},
		{"alice", "bob-alice", false},
		{"alice", "alice/../bob", false},
		{"alice", "", false},
		{"", "alice", false},
		{"alice", "alice-" + strings.Repeat("x", 64), false},
		// Bot ids have no '-' (nor capitals), so bot a never owns bot a-b's
		// screen: there is no bot a-b.
		{"a", "a-b", true},
		{"a-b", "a-b", false},
		{"a-b", "a-b-c", false},
		{"Alice", "Alice", false},
		{"_a", "_a", false},
		{"a_b", "a_b-1", true},
	} {
		require.Equal(t, tc.want, InNamespace(tc.bot, tc.screen), "%s on %s", tc.bot, tc.screen)
	}
}

// fakeBotd records the paths it is asked for; it answers like botd would.
type fakeBotd struct {
	mu    sync.Mutex
	paths []string
}

func (f *fakeBotd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasSuffix(r.URL.Path, "/start"):
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"MULTI_SCREEN_UNAVAILABLE","message":"every screen is held"}}`))
	case r.URL.Path == "/exec":
		_, _ = w.Write([]byte(`{"exitCode":0,"stdout":"hi\n","stderr":"","truncated":false}`))
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no"}}`))
	}
}

func TestCallsFailReadablyAndShellWorksWithoutScreens(t *testing.T) {
	fb := &fakeBotd{}
	srv := httptest.NewServer(fb)
	defer srv.Close()
	s, err := NewSession(machines.NewBotd(srv.URL, "t"), "alice", "run-1")
	require.NoError(t, err)
	ctx := context.Background()

	for _, tc := range []struct {
		tool, args, want string
	}{
		{"computer_act", `{"actions":"click"}`, "invalid arguments"},
		{"computer_act", `{"actions":[{"type":"fly"}]}`, "invalid_action"},
		{"computer_act", `{"actions":[{"type":"click","x":5000,"y":1}]}`, "outside the screen"},
		{"computer_observe", `{"screen":"bob"}`, "not yours"},
		{"computer_observe", `{"bogus":1}`, "unknown field"},
		{"computer_observe", `[1,2]`, "invalid arguments"},
		{"shell", `{"argv":[]}`, "at least one"},
		{"no_such_tool", `{}`, "no tool named"},
		{"computer_observe", `{}`, "MULTI_SCREEN_UNAVAILABLE"},
	} {
		res := Call(ctx, s, tc.tool, json.RawMessage(tc.args))
		require.False(t, res.Success, "%s %s", tc.tool, tc.args)
		require.Contains(t, res.Content[0].Text, tc.want, "%s %s", tc.tool, tc.args)
	}
	for _, p := range fb.paths {
		require.NotContains(t, p, "/screens/bob", "another bot's screen was addressed")
	}
	res := Call(ctx, s, "shell", json.RawMessage(`{"argv":["echo","hi"]}`))
	require.True(t, res.Success, res.Content)
	require.Contains(t, res.Content[0].Text, `"stdout":"hi\n"`)
}

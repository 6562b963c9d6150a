package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"image/jpeg"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/tools"
)

// Displays and ports of the MCP tests (no other test uses them).
const (
	mcpDisplayBase  = 960
	mcpViewPortBase = "VIEW_PORT_BASE=27400"
)

// mcpHeaders sends the session's credentials on every request; the bot can
// be switched mid-session (to show a session stays bound).
type mcpHeaders struct {
	token, capa string
	bot         atomic.Value // string
}

func (h *mcpHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	if h.capa != "" {
		r.Header.Set("X-Computer-Capability", h.capa)
	}
	if b, _ := h.bot.Load().(string); b != "" {
		r.Header.Set("X-Bot-Id", b)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(ctx context.Context, url, token, capa, bot string) (*gomcp.ClientSession, *mcpHeaders, error) {
	h := &mcpHeaders{token: token, capa: capa}
	h.bot.Store(bot)
	c := gomcp.NewClient(&gomcp.Implementation{Name: "open-bot-go-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &gomcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: h}, MaxRetries: -1}, nil)
	return cs, h, err
}

func mcpText(r *gomcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*gomcp.TextContent); ok {
			b.WriteString(t.Text + "\n")
		}
	}
	return b.String()
}

func mcpImages(r *gomcp.CallToolResult) []*gomcp.ImageContent {
	var out []*gomcp.ImageContent
	for _, c := range r.Content {
		if i, ok := c.(*gomcp.ImageContent); ok {
			out = append(out, i)
		}
	}
	return out
}

// mcpCode is a tool error's stable code (its structured content).
func mcpCode(t testing.TB, r *gomcp.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(r.StructuredContent)
	require.NoError(t, err)
	var v struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	return v.Error.Code
}

// requireFrame checks an observation: a JPEG of the screen when changed,
// no image bytes when unchanged. It reports whether it was unchanged.
func requireFrame(t testing.TB, r *gomcp.CallToolResult) bool {
	t.Helper()
	require.False(t, r.IsError, mcpText(r))
	var meta struct {
		Width, Height int
		Unchanged     bool
	}
	txt := mcpText(r)
	found := false
	for _, c := range r.Content {
		if tc, ok := c.(*gomcp.TextContent); ok && strings.HasPrefix(tc.Text, "{") {
			// The metadata, maybe followed by a line about an unchanged screen.
			require.NoError(t, json.NewDecoder(strings.NewReader(tc.Text)).Decode(&meta), txt)
			found = true
		}
	}
	require.True(t, found, "the frame's metadata: %s", txt)
	imgs := mcpImages(r)
	if meta.Unchanged {
		require.Empty(t, imgs, "an unchanged frame comes without bytes")
		return true
	}
	require.Len(t, imgs, 1, txt)
	require.Equal(t, "image/jpeg", imgs[0].MIMEType)
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(imgs[0].Data))
	require.NoError(t, err, "the image content is a JPEG")
	require.Equal(t, meta.Width, cfg.Width)
	require.Equal(t, meta.Height, cfg.Height)
	return false
}

// TestMCPGoClient drives the worker's /mcp with the Go SDK's client against
// a real botd: the tools and their schemas, observe (JPEG image content),
// act, shell, file_write then file_read, and bad input, each a clear MCP
// error with the session still usable; and `worker mcp --stdio` bridging a
// local client to it.
func TestMCPGoClient(t *testing.T) {
	c := startComputer(t, "http://127.0.0.1:1", mcpDisplayBase, mcpViewPortBase)
	e := startWorker(t, c, "alice", "bob")
	ctx := t.Context()

	// Refused at connect, each with its reason.
	for _, tc := range []struct {
		name, token, capa, bot, want string
	}{
		{"no bearer", "", e.capa, "alice", "Unauthorized"},
		{"wrong bearer", "not-the-worker-token-0000", e.capa, "alice", "Unauthorized"},
		{"no capability", e.token, "", "alice", "not_found: no computer has this X-Computer-Capability"},
		{"wrong capability", e.token, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "alice", "not_found: no computer has this X-Computer-Capability"},
		{"no bot", e.token, e.capa, "", "X-Bot-Id is required"},
		{"a bot not on the computer", e.token, e.capa, "carol", "not_found"},
		{"an invalid bot id", e.token, e.capa, "alice-2", "no '-'"},
	} {
		_, _, err := mcpConnect(ctx, e.url, tc.token, tc.capa, tc.bot)
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
		t.Logf("refused at connect (%s): %v", tc.name, err)
	}

	cs, hdr, err := mcpConnect(ctx, e.url, e.token, e.capa, "alice")
	require.NoError(t, err)
	defer cs.Close()

	// The tools are the worker's, with their schemas.
	lt, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
		want, ok := tools.Find(tl.Name)
		require.True(t, ok, tl.Name)
		require.Equal(t, want.Description, tl.Description)
		got, err := json.Marshal(tl.InputSchema)
		require.NoError(t, err)
		require.JSONEq(t, want.Schema, string(got), tl.Name)
	}
	var want []string
	for _, tl := range tools.All {
		if tl.Name != "request_takeover" {
			want = append(want, tl.Name)
		}
	}
	require.ElementsMatch(t, want, names)

	// observe: JPEG image content; the session holds its lease, so looking
	// again at a still screen gives a frame without bytes.
	r, err := cs.CallTool(ctx, &gomcp.CallToolParams{Name: "computer_observe", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.False(t, requireFrame(t, r), "the first frame has bytes")
	unchanged := false
	for i := 0; i < 5 && !unchanged; i++ {
		r, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "computer_observe", Arguments: map[string]any{}})
		require.NoError(t, err)
		unchanged = requireFrame(t, r)
	}
	require.True(t, unchanged, "a still screen comes back unchanged, without bytes")

	// act: a click, with the screenshot at the end.
	r, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "computer_act", Arguments: map[string]any{
		"actions": []map[string]any{{"type": "click", "x": 640, "y": 400, "button": "left"}}}})
	require.NoError(t, err)
	requireFrame(t, r)

	// shell, file_write then file_read.
	r, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "shell", Arguments: map[string]any{"argv": []string{"bash", "-lc", "echo hello-from-$USER"}}})
	require.NoError(t, err)
	require.False(t, r.IsError, mcpText(r))
	require.Contains(t, mcpText(r), "hello-from-")
	r, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "file_write", Arguments: map[string]any{"path": "bots/alice/mcp.txt", "content": "written over MCP"}})
	require.NoError(t, err)
	require.False(t, r.IsError, mcpText(r))
	r, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "file_read", Arguments: map[string]any{"path": "bots/alice/mcp.txt"}})
	require.NoError(t, err)
	require.False(t, r.IsError, mcpText(r))
	require.Equal(t, "written over MCP\n", mcpText(r))

	// Bad input: each a clear error, the session usable after it.
	usable := func(what string) {
		t.Helper()
		r, err := cs.CallTool(ctx, &gomcp.CallToolParams{Name: "file_read", Arguments: map[string]any{"path": "bots/alice/mcp.txt"}})
		require.NoError(t, err, "after %s", what)
		require.False(t, r.IsError, "after %s: %s", what, mcpText(r))
	}
	toolErr := func(what, name string, args any, code, msg string) {
		t.Helper()
		r, err := cs.CallTool(ctx, &gomcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err, what)
		require.True(t, r.IsError, "%s: %s", what, mcpText(r))
		require.Equal(t, code, mcpCode(t, r), what)
		require.Contains(t, mcpText(r), msg, what)
		t.Logf("tool error (%s): %s", what, strings.TrimSpace(mcpText(r)))
		usable(what)
	}
	toolErr("another bot's screen", "computer_observe", map[string]any{"screen": "bob"}, "forbidden", `screen "bob" is not yours`)
	toolErr("another bot's helper screen", "computer_act", map[string]any{"screen": "bob-x", "actions": []map[string]any{{"type": "click", "x": 1, "y": 1}}}, "forbidden", "is not yours")
	toolErr("argv not an array", "shell", map[string]any{"argv": "ls"}, "bad_request", "invalid arguments")
	toolErr("an unknown argument", "file_read", map[string]any{"path": "x", "nope": 1}, "bad_request", `unknown field "nope"`)
	toolErr("arguments not an object", "file_read", []string{"x"}, "bad_request", "invalid arguments")
	toolErr("no actions", "computer_act", map[string]any{"actions": []any{}}, "invalid_action", "")
	toolErr("a click off the screen", "computer_act", map[string]any{"actions": []map[string]any{{"type": "click", "x": 5000, "y": 1}}}, "invalid_action", "")

	_, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	require.Error(t, err, "an unknown tool")
	require.Contains(t, err.Error(), "no_such_tool")
	t.Logf("unknown tool: %v", err)
	usable("an unknown tool")
	_, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "request_takeover", Arguments: map[string]any{"reason": "x"}})
	require.Error(t, err, "request_takeover is only inside a run")
	usable("request_takeover")

	// The session stays bound to alice: bob's header on it is refused.
	hdr.bot.Store("bob")
	r, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "file_read", Arguments: map[string]any{"path": "bots/alice/mcp.txt"}})
	require.NoError(t, err)
	require.True(t, r.IsError)
	require.Equal(t, "forbidden", mcpCode(t, r))
	require.Contains(t, mcpText(r), `bound to bot "alice"`)
	// A capability that stops holding mid-session (a wrong one) is refused.
	hdr.bot.Store("alice")
	hdr.capa = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	_, err = cs.CallTool(ctx, &gomcp.CallToolParams{Name: "file_read", Arguments: map[string]any{"path": "bots/alice/mcp.txt"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "not_found")
	hdr.capa = e.capa
	usable("a wrong capability mid-session")

	// bob, in his own session, sees his own screen and not alice's.
	bs, _, err := mcpConnect(ctx, e.url, e.token, e.capa, "bob")
	require.NoError(t, err)
	defer bs.Close()
	r, err = bs.CallTool(ctx, &gomcp.CallToolParams{Name: "computer_observe", Arguments: map[string]any{"screen": "alice"}})
	require.NoError(t, err)
	require.True(t, r.IsError)
	require.Equal(t, "forbidden", mcpCode(t, r))

	// `worker mcp --stdio`: a local client over stdin/stdout, bridged.
	bin := goBuilt(t, workerPkg)
	stdio := func(capa string) *exec.Cmd {
		cmd := exec.Command(bin, "mcp", "--stdio", "--url", e.url, "--bot", "alice")
		cmd.Env = append(os.Environ(), "WORKER_TOKEN="+e.token, "WORKER_CAPABILITY="+capa, "WORKER_TOKEN_FILE=")
		return cmd
	}
	sc := gomcp.NewClient(&gomcp.Implementation{Name: "open-bot-stdio-test", Version: "1"}, nil)
	ss, err := sc.Connect(ctx, &gomcp.CommandTransport{Command: stdio(e.capa)}, nil)
	require.NoError(t, err)
	lt, err = ss.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, lt.Tools, len(want))
	r, err = ss.CallTool(ctx, &gomcp.CallToolParams{Name: "file_read", Arguments: map[string]any{"path": "bots/alice/mcp.txt"}})
	require.NoError(t, err)
	require.Equal(t, "written over MCP\n", mcpText(r))
	r, err = ss.CallTool(ctx, &gomcp.CallToolParams{Name: "computer_observe", Arguments: map[string]any{}})
	require.NoError(t, err)
	requireFrame(t, r)
	r, err = ss.CallTool(ctx, &gomcp.CallToolParams{Name: "computer_observe", Arguments: map[string]any{"screen": "bob"}})
	require.NoError(t, err)
	require.True(t, r.IsError)
	require.Equal(t, "forbidden", mcpCode(t, r))
	require.NoError(t, ss.Close())
	// Through the bridge, a wrong capability is refused with the reason.
	_, err = sc.Connect(ctx, &gomcp.CommandTransport{Command: stdio("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")}, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "no computer has this X-Computer-Capability")
	t.Logf("refused through the stdio bridge: %v", err)
}

// TestMCPTypeScriptClient drives the worker's /mcp with the official
// TypeScript SDK (@modelcontextprotocol/sdk, from npm, run by node):
// observe → act → shell → file_read against a real botd.
func TestMCPTypeScriptClient(t *testing.T) {
	requireIntegration(t, "node", "npm")
	dir, err := filepath.Abs("internal/mcp/tsclient")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-fund", "--no-audit")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "npm ci: %s", out)
	}
	c := startComputer(t, "http://127.0.0.1:1", mcpDisplayBase+2, "VIEW_PORT_BASE=27500")
	e := startWorker(t, c, "alice")

	cmd := exec.CommandContext(t.Context(), "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MCP_URL="+e.url+"/mcp", "WORKER_TOKEN="+e.token, "WORKER_CAPABILITY="+e.capa, "WORKER_BOT=alice")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node client.mjs: %s\n%s", out, stderr.String())

	type content struct {
		Type, Text, MimeType, Head string
		Bytes                      int
	}
	steps := map[string]struct {
		Names         []string
		ActSchemaType string
		IsError       bool
		Content       []content
		Marker        string
	}{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s struct{ Step string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), sc.Text())
		v := steps[s.Step]
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v))
		steps[s.Step] = v
		t.Logf("ts client: %.300s", sc.Text())
	}
	require.True(t, slices.Contains(steps["tools"].Names, "computer_observe"))
	require.True(t, slices.Contains(steps["tools"].Names, "file_read"))
	require.Equal(t, "object", steps["tools"].ActSchemaType)
	for _, step := range []string{"observe", "act"} {
		s := steps[step]
		require.False(t, s.IsError, step)
		var img *content
		for i := range s.Content {
			if s.Content[i].Type == "image" {
				img = &s.Content[i]
			}
		}
		if step == "act" && img == nil {
			// A click that changed nothing: the frame comes without bytes.
			require.Contains(t, s.Content[len(s.Content)-1].Text, `"unchanged":true`, "act: %+v", s)
			continue
		}
		require.NotNil(t, img, "%s returns an image", step)
		require.Equal(t, "image/jpeg", img.MimeType)
		require.Equal(t, "ffd8ff", img.Head, "a JPEG")
		require.Greater(t, img.Bytes, 1000)
	}
	require.False(t, steps["shell"].IsError)
	require.Contains(t, steps["shell"].Content[0].Text, "wrote")
	require.False(t, steps["file_read"].IsError)
	require.NotEmpty(t, steps["marker"].Marker)
	require.Equal(t, steps["marker"].Marker, steps["file_read"].Content[0].Text)
	require.True(t, steps["other_screen"].IsError)
	require.Contains(t, steps["other_screen"].Content[0].Text, "forbidden")
}

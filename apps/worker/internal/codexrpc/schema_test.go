package codexrpc

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTypesMatchInstalledCodexSchema checks every field the worker sends or
// reads against the schema the installed Codex generates, so a protocol
// change shows up here rather than as a stalled turn.
func TestTypesMatchInstalledCodexSchema(t *testing.T) {
	if _, err := exec.LookPath("codex"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but codex is missing (scripts/provision.sh)")
		}
		t.Skip("codex not installed")
	}
	dir := t.TempDir()
	out, err := exec.Command("codex", "app-server", "generate-json-schema", "--experimental", "--out", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	defs := map[string]map[string]any{}
	for _, f := range []string{"codex_app_server_protocol.schemas.json", "codex_app_server_protocol.v2.schemas.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		var doc struct {
			Definitions map[string]map[string]any `json:"definitions"`
		}
		require.NoError(t, json.Unmarshal(b, &doc))
		for k, v := range doc.Definitions {
			defs[k] = v
		}
	}
	for name, v := range map[string]any{
		"InitializeParams": InitializeParams{}, "ClientInfo": ClientInfo{}, "InitializeCapabilities": InitializeCapabilities{},
		"ThreadStartParams": ThreadStartParams{}, "ThreadStartResponse": ThreadStartResponse{},
		"ThreadResumeParams": ThreadResumeParams{}, "ThreadResumeResponse": ThreadResumeResponse{},
		"TurnStartParams": TurnStartParams{}, "TurnStartResponse": TurnStartResponse{}, "Turn": Turn{}, "TurnError": TurnError{},
		"TurnCompletedNotification": TurnCompletedNotification{}, "TurnInterruptParams": TurnInterruptParams{},
		"ErrorNotification": ErrorNotification{}, "DynamicToolCallParams": DynamicToolCallParams{},
		"DynamicToolCallResponse": DynamicToolCallResponse{}, "ToolRequestUserInputParams": ToolRequestUserInputParams{},
		"ToolRequestUserInputQuestion": ToolRequestUserInputQuestion{}, "ToolRequestUserInputResponse": ToolRequestUserInputResponse{},
		"ToolRequestUserInputAnswer": ToolRequestUserInputAnswer{}, "CommandExecutionRequestApprovalResponse": DecisionResponse{},
		"FileChangeRequestApprovalResponse": DecisionResponse{}, "McpServerElicitationRequestResponse": ElicitationResponse{},
	} {
		def, ok := defs[name]
		require.True(t, ok, "the schema has no %s", name)
		props, _ := def["properties"].(map[string]any)
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			tag := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			_, ok := props[tag]
			require.True(t, ok, "%s.%s is not in Codex's schema", name, tag)
		}
		if req, ok := def["required"].([]any); ok && strings.HasSuffix(name, "Params") {
			// What the server requires of what we send must be in our type.
			for _, r := range req {
				found := false
				for i := 0; i < rt.NumField(); i++ {
					if strings.Split(rt.Field(i).Tag.Get("json"), ",")[0] == r {
						found = true
					}
				}
				if name == "ThreadStartParams" || name == "TurnStartParams" || name == "InitializeParams" {
					require.True(t, found, "%s requires %v, which our type lacks", name, r)
				}
			}
		}
	}
	// The server requests the worker answers are exactly the server's.
	b, err := os.ReadFile(filepath.Join(dir, "ServerRequest.json"))
	require.NoError(t, err)
	handled := []string{MethodToolCall, MethodCommandApproval, MethodFileChangeApproval, MethodPermissionsApproval, MethodUserInput, MethodElicitation, MethodApplyPatchApproval, MethodExecCommandApproval}
	for _, m := range handled {
		require.Contains(t, string(b), `"`+m+`"`, "Codex no longer sends %s", m)
	}
}

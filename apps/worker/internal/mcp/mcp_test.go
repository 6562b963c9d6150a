package mcp

import (
	"encoding/base64"
	"testing"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared"
)

func TestResult(t *testing.T) {
	jpg := []byte{0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3}
	r := Result(tools.Result{Success: true, Content: []tools.Content{
		{Type: "text", Text: `{"unchanged":false}`},
		{Type: "image", ImageURL: "data:image/jpeg;base64," + base64.StdEncoding.EncodeToString(jpg)},
	}})
	require.False(t, r.IsError)
	require.Len(t, r.Content, 2)
	img, ok := r.Content[1].(*gomcp.ImageContent)
	require.True(t, ok)
	require.Equal(t, "image/jpeg", img.MIMEType)
	require.Equal(t, jpg, img.Data, "the bytes themselves (the SDK base64s them on the wire)")

	r = Result(tools.Result{Success: true, Content: []tools.Content{{Type: "text", Text: `{"unchanged":true}`}}})
	require.Len(t, r.Content, 1, "an unchanged frame has no image")

	r = Result(tools.Result{Success: false, Code: shared.CodeForbidden, Content: []tools.Content{{Type: "text", Text: "error: forbidden: no"}}})
	require.True(t, r.IsError)
	require.Equal(t, map[string]any{"error": map[string]any{"code": shared.CodeForbidden, "message": "error: forbidden: no"}}, r.StructuredContent)
}

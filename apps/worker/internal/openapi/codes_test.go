package openapi

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorCodesDocumented: every error code pkg/shared declares (a const
// of type Code) is in the document's ErrorCode enum, and the enum holds
// nothing else, so a new code cannot reach a client the types refuse.
func TestErrorCodesDocumented(t *testing.T) {
	files, err := filepath.Glob("../../../../pkg/shared/*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var declared []string
	fset := token.NewFileSet()
	for _, f := range files {
		if filepath.Ext(f) != ".go" || len(f) > 8 && f[len(f)-8:] == "_test.go" {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || id.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					require.True(t, ok, "a Code constant that is not a string literal in %s", f)
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					declared = append(declared, s)
				}
			}
		}
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Enum []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(Document, &doc))
	enum := doc.Components.Schemas["ErrorCode"].Enum
	sort.Strings(declared)
	sort.Strings(enum)
	require.Equal(t, declared, enum, "pkg/shared's codes and openapi.json's ErrorCode enum")
}

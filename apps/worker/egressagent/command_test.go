package egressagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandFlags(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no flags", nil, "required"},
		{"no token file", []string{"--botd", "http://127.0.0.1:1"}, "required"},
		{"missing token file", []string{"--botd", "http://127.0.0.1:1", "--token-file", filepath.Join(dir, "nope")}, "read token file"},
		{"empty token file", []string{"--botd", "http://127.0.0.1:1", "--token-file", empty}, "is empty"},
		{"unknown flag", []string{"--token", "secret"}, "not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Command(context.Background(), tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

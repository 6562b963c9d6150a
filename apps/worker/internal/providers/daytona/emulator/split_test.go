package emulator

import (
	"reflect"
	"testing"
)

// TestSplitCommand: process/execute's command is split into words as a
// shell splits them (quotes, backslashes), with no expansion; the adapter's
// `sh -c '…'` quoting (shQuote) comes through whole.
func TestSplitCommand(t *testing.T) {
	for in, want := range map[string][]string{
		`echo hello  world`:             {"echo", "hello", "world"},
		`sh -c 'echo "$HOME"; exit 3'`:  {"sh", "-c", `echo "$HOME"; exit 3`},
		`sh -c 'it'\''s'`:               {"sh", "-c", "it's"},
		`printf "a\"b\\c $x"`:           {"printf", `a"b\c $x`},
		`a\ b ''`:                       {"a b", ""},
		"tr '\\0' ' ' </proc/1/cmdline": {"tr", `\0`, " ", "</proc/1/cmdline"},
	} {
		got, err := splitCommand(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := splitCommand(`echo 'open`); err == nil {
		t.Error("an unterminated quote is an error")
	}
}

package shared

import (
	"reflect"
	"testing"
)

// TestSplitWords: words as a shell (and shlex.split) splits them: quotes,
// backslashes, no expansion; the Daytona adapter's `sh -c '…'` quoting
// comes through whole, as do OSWorld's python -c commands.
func TestSplitWords(t *testing.T) {
	for in, want := range map[string][]string{
		`echo hello  world`:             {"echo", "hello", "world"},
		`sh -c 'echo "$HOME"; exit 3'`:  {"sh", "-c", `echo "$HOME"; exit 3`},
		`sh -c 'it'\''s'`:               {"sh", "-c", "it's"},
		`printf "a\"b\\c $x"`:           {"printf", `a"b\c $x`},
		`a\ b ''`:                       {"a b", ""},
		"tr '\\0' ' ' </proc/1/cmdline": {"tr", `\0`, " ", "</proc/1/cmdline"},
		`python -c "print('a b')"`:      {"python", "-c", "print('a b')"},
		`ls  -la '/tmp/x y'`:            {"ls", "-la", "/tmp/x y"},
	} {
		got, err := SplitWords(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("SplitWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`echo 'open`, `echo "open`} {
		if _, err := SplitWords(bad); err == nil {
			t.Errorf("SplitWords(%q): an unterminated quote is an error", bad)
		}
	}
}

package files_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzPaths drives every file route with arbitrary paths against a real
// workspace holding symlinks that lead outside. Whatever the path: the
// secret outside is never served, nothing appears or changes outside the
// workspace, and botd never answers 500.
func FuzzPaths(f *testing.F) {
	for _, s := range []string{
		"", ".", "..", "/", "/etc/passwd", "../outside/secret", "shared/../../outside/secret",
		"abs-out/secret", "rel-out/secret", "rel-out/../outside/secret", "passwd", "inner",
		"shared/hello.txt", "shared//hello.txt", "./shared/./hello.txt", "shared/\x00", "\xff",
		"abs-out", "rel-out/", "bots/a/b/c", "shared/hello.txt/x", "a\\..\\..\\outside",
		"%2e%2e/outside", "shared/.botd-tmp-x",
	} {
		f.Add(s, []byte("fuzz"))
	}
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, p string, body []byte) {
		restore(t, fx)
		for _, call := range []struct{ method, route string }{
			{"GET", "/files"}, {"GET", "/files/list"}, {"PUT", "/files"}, {"GET", "/files"}, {"DELETE", "/files"},
		} {
			st, b := fx.do(t, call.method, call.route, p, body, true)
			if st >= 500 {
				t.Fatalf("%s %s %q: status %d: %s", call.method, call.route, p, st, b)
			}
			if bytes.Contains(b, []byte("TOP-SECRET")) {
				t.Fatalf("%s %s %q leaked the secret", call.method, call.route, p)
			}
		}
		checkOutside(t, fx)
	})
}

// restore puts back what a DELETE or PUT in the previous round replaced.
func restore(t *testing.T, fx *fixture) {
	links := map[string]string{"abs-out": fx.outside, "rel-out": "../../outside", "passwd": "/etc/passwd", "inner": "shared/hello.txt"}
	for name, target := range links {
		p := filepath.Join(fx.ws, name)
		if cur, err := os.Readlink(p); err == nil && cur == target {
			continue
		}
		_ = os.RemoveAll(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.MkdirAll(filepath.Join(fx.ws, "shared"), 0o775)
	if err := os.WriteFile(filepath.Join(fx.ws, "shared", "hello.txt"), []byte("hello"), 0o664); err != nil {
		t.Fatal(err)
	}
}

// checkOutside fails when anything beside the workspace changed: the
// outside directory holds exactly its secret, and BOTD_HOME's top level
// and the base dir have exactly their starting entries.
func checkOutside(t *testing.T, fx *fixture) {
	t.Helper()
	want := map[string][]string{
		fx.base:    {"home", "outside"},
		fx.outside: {"secret"},
		fx.home:    {".botd", "bot", "desktop"},
	}
	for dir, names := range want {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if len(got) != len(names) {
			t.Fatalf("%s now holds %v, want %v", dir, got, names)
		}
		for i := range got {
			if got[i] != names[i] {
				t.Fatalf("%s now holds %v, want %v", dir, got, names)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(fx.outside, "secret")); err != nil || string(b) != "TOP-SECRET" {
		t.Fatalf("the secret outside changed: %q %v", b, err)
	}
	if fi, err := os.Lstat("/etc/passwd"); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("/etc/passwd changed: %v", err)
	}
}

package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/open-bot/computer/apps/worker/internal/testenv"
)

// doc is one Markdown file split into prose (code spans blanked) and code
// (fenced blocks line by line, inline spans whole).
type doc struct {
	rel   string   // path from the repository root, slash-separated
	prose []string // lines outside fences, inline code replaced by spaces; prose[i] is line i+1 of the file
	code  []string // each fenced line and each inline code span
	heads []string // heading texts outside fences
}

var (
	fenceRE = regexp.MustCompile("^\\s*(```|~~~)")
	spanRE  = regexp.MustCompile("(?s)(`+)(.+?)(`+)")
	headRE  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

func readDoc(t *testing.T, root, rel string) doc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	d := doc{rel: rel}
	var para []string
	flush := func() {
		if len(para) == 0 {
			return
		}
		text := strings.Join(para, "\n")
		// Inline code may wrap across lines of a paragraph; blanking it keeps
		// the line breaks, so prose lines stay the file's lines.
		text = spanRE.ReplaceAllStringFunc(text, func(s string) string {
			m := spanRE.FindStringSubmatch(s)
			if len(m[1]) != len(m[3]) {
				return s
			}
			d.code = append(d.code, strings.Join(strings.Fields(m[2]), " "))
			return regexp.MustCompile(`[^\n]`).ReplaceAllString(s, " ")
		})
		d.prose = append(d.prose, strings.Split(text, "\n")...)
		para = nil
	}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if fenceRE.MatchString(line) {
			flush()
			d.prose = append(d.prose, "")
			inFence = !inFence
			continue
		}
		if inFence {
			d.code = append(d.code, stripComment(line))
			d.prose = append(d.prose, "")
			continue
		}
		if m := headRE.FindStringSubmatch(line); m != nil {
			d.heads = append(d.heads, m[1])
		}
		if strings.TrimSpace(line) == "" {
			flush()
			d.prose = append(d.prose, "")
			continue
		}
		para = append(para, line)
	}
	flush()
	return d
}

// stripComment drops a shell comment (" # …") from a code line.
func stripComment(line string) string {
	if strings.HasPrefix(strings.TrimSpace(line), "#") {
		return ""
	}
	if i := strings.Index(line, " #"); i >= 0 {
		return line[:i]
	}
	return line
}

// slug is GitHub's anchor for a heading: lower case, every character that is
// not a letter, digit, space, '-' or '_' dropped, spaces made '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the slugs of a file's headings, duplicates numbered as GitHub does.
func anchors(heads []string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range heads {
		// Link text stays, the link target goes: "[a](b)" reads "a".
		h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// docFiles are the Markdown files the test holds: README.md, SECURITY.md and docs/*.md.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "SECURITY.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md pages")
	}
	for _, p := range pages {
		files = append(files, "docs/"+filepath.Base(p))
	}
	return files
}

var linkRE = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
var schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// TestDocLinks: every relative link in the docs reaches a file in the
// repository, and an anchor into a Markdown file names one of its headings.
// README.md links to every docs page.
func TestDocLinks(t *testing.T) {
	root := testenv.RepoRoot(t)
	docs := map[string]doc{}
	files := docFiles(t, root)
	for _, f := range files {
		docs[f] = readDoc(t, root, f)
	}
	headsOf := func(rel string) (map[string]bool, bool) {
		d, ok := docs[rel]
		if !ok {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
				return nil, false
			}
			d = readDoc(t, root, rel)
			docs[rel] = d
		}
		return anchors(d.heads), true
	}
	linked := map[string]bool{}
	checked := 0
	for _, f := range files {
		for i, line := range docs[f].prose {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if schemeRE.MatchString(target) {
					continue // http(s), mailto: not ours to check
				}
				checked++
				where := fmt.Sprintf("%s:%d: link %q", f, i+1, target)
				path, frag, _ := strings.Cut(target, "#")
				rel := f
				if path != "" {
					rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), path)))
					if rel == ".." || strings.HasPrefix(rel, "../") {
						t.Errorf("%s: leaves the repository", where)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
						t.Errorf("%s: no such file %s", where, rel)
						continue
					}
				}
				if f == "README.md" {
					linked[rel] = true
				}
				if frag == "" || !strings.HasSuffix(rel, ".md") {
					continue
				}
				heads, ok := headsOf(rel)
				if !ok {
					t.Errorf("%s: cannot read %s", where, rel)
				} else if !heads[frag] {
					t.Errorf("%s: %s has no heading with anchor #%s", where, rel, frag)
				}
			}
		}
	}
	t.Logf("%d relative links checked", checked)
	if checked < 10 {
		t.Errorf("only %d relative links found: the link pattern no longer reads the docs", checked)
	}
	for _, f := range files {
		if strings.HasPrefix(f, "docs/") && !linked[f] {
			t.Errorf("README.md does not link to %s", f)
		}
	}
}

// makeTargets are the targets the Makefile defines.
func makeTargets(t *testing.T, root string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`^([A-Za-z0-9_./%-]+(?:[ \t]+[A-Za-z0-9_./%-]+)*)[ \t]*::?(?:[^=]|$)`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := rule.FindStringSubmatch(line); m != nil {
			for _, name := range strings.Fields(m[1]) {
				out[name] = true
			}
		}
	}
	return out
}

// A command starts a code line or span (after `sudo` and VAR=value
// assignments), or follows ;, &, |, ( or $(; bin/worker counts anywhere.
const cmdStart = `(?:^|[;&|(` + "`" + `]\s*|\$\(\s*)(?:sudo\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*`

var (
	makeRE   = regexp.MustCompile(cmdStart + `make\s+((?:-\S+\s+)*)([a-z][a-z0-9_-]*)`)
	workerRE = regexp.MustCompile(`(?:` + cmdStart + `(?:\S*/)?|bin/)worker\s+([a-z][a-z0-9-]*)(?:\s+([a-z][a-z0-9|-]*))?`)
)

// TestDocMakeTargets: every `make <target>` shown in code is a Makefile target.
func TestDocMakeTargets(t *testing.T) {
	root := testenv.RepoRoot(t)
	targets := makeTargets(t, root)
	if !targets["run"] || !targets["test"] {
		t.Fatalf("the Makefile parse found no run/test targets: %v", targets)
	}
	seen := 0
	for _, f := range docFiles(t, root) {
		for _, code := range readDoc(t, root, f).code {
			for _, m := range makeRE.FindAllStringSubmatch(code, -1) {
				seen++
				if !targets[m[2]] {
					t.Errorf("%s: `%s` shows make target %q, which the Makefile does not have", f, strings.TrimSpace(code), m[2])
				}
			}
		}
	}
	t.Logf("%d make commands checked against %d Makefile targets", seen, len(targets))
	if seen < 10 {
		t.Errorf("only %d make commands found: the pattern no longer reads the docs", seen)
	}
}

// callsIn lists the plain function calls (f(…), not x.f(…)) under n.
func callsIn(n ast.Node) []string {
	var calls []string
	ast.Inspect(n, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok {
				calls = append(calls, id.Name)
			}
		}
		return true
	})
	return calls
}

// workerCLI reads the worker's command dispatch from its source: the cases of
// main's `switch os.Args[1]`, and for a command whose case calls a function
// of package main that switches on args[0], that switch's cases as its
// subcommands (nil when the command takes none).
func workerCLI(t *testing.T, root string) map[string][]string {
	t.Helper()
	dir := filepath.Join(root, "apps", "worker")
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	var mainFn *ast.FuncDecl
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				funcs[fd.Name.Name] = fd
				if fd.Name.Name == "main" {
					mainFn = fd
				}
			}
		}
	}
	if mainFn == nil {
		t.Fatal("apps/worker has no func main")
	}
	// switchCases finds `switch <x>[<i>]` with x named name and returns, per
	// case string, the names of the package functions its body calls.
	switchCases := func(fn *ast.FuncDecl, isTag func(ast.Expr) bool) map[string][]string {
		var out map[string][]string
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok || sw.Tag == nil || !isTag(sw.Tag) || out != nil {
				return true
			}
			out = map[string][]string{}
			for _, st := range sw.Body.List {
				cc := st.(*ast.CaseClause)
				var calls []string
				for _, s := range cc.Body {
					calls = append(calls, callsIn(s)...)
				}
				for _, e := range cc.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[s] = calls
					}
				}
			}
			return false
		})
		return out
	}
	isIndex := func(base string, idx string) func(ast.Expr) bool {
		return func(e ast.Expr) bool {
			ix, ok := e.(*ast.IndexExpr)
			if !ok {
				return false
			}
			lit, ok := ix.Index.(*ast.BasicLit)
			if !ok || lit.Value != idx {
				return false
			}
			switch x := ix.X.(type) {
			case *ast.Ident:
				return x.Name == base
			case *ast.SelectorExpr:
				pkg, ok := x.X.(*ast.Ident)
				return ok && pkg.Name+"."+x.Sel.Name == base
			}
			return false
		}
	}
	top := switchCases(mainFn, isIndex("os.Args", "1"))
	if len(top) == 0 {
		t.Fatal("func main has no `switch os.Args[1]`")
	}
	cli := map[string][]string{}
	for cmd, calls := range top {
		cli[cmd] = nil
		// The case's function, or one it calls (runComputers calls
		// runComputersWith), holds the subcommand switch.
		queue, visited := calls, map[string]bool{}
		for depth := 0; depth < 3 && cli[cmd] == nil; depth++ {
			var next []string
			for _, name := range queue {
				fn, ok := funcs[name]
				if !ok || visited[name] {
					continue
				}
				visited[name] = true
				if subs := switchCases(fn, isIndex("args", "0")); subs != nil {
					for s := range subs {
						cli[cmd] = append(cli[cmd], s)
					}
					sort.Strings(cli[cmd])
					break
				}
				next = append(next, callsIn(fn.Body)...)
			}
			queue = next
		}
	}
	return cli
}

// TestDocWorkerCommands: every `worker <command> [<subcommand>]` shown in code
// (bin/worker too; a|b|c lists each) is one the worker's CLI dispatches.
func TestDocWorkerCommands(t *testing.T) {
	root := testenv.RepoRoot(t)
	cli := workerCLI(t, root)
	if len(cli["computers"]) == 0 || len(cli["runs"]) == 0 {
		t.Fatalf("the CLI parse found no computers/runs subcommands: %v", cli)
	}
	has := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	seen := 0
	for _, f := range docFiles(t, root) {
		for _, code := range readDoc(t, root, f).code {
			for _, m := range workerRE.FindAllStringSubmatch(code, -1) {
				seen++
				cmd, sub := m[1], m[2]
				subs, ok := cli[cmd]
				if !ok {
					t.Errorf("%s: `%s` shows worker command %q, which apps/worker/main.go does not dispatch", f, strings.TrimSpace(code), cmd)
					continue
				}
				if subs == nil || sub == "" {
					continue
				}
				for _, s := range strings.Split(sub, "|") {
					if !has(subs, s) {
						t.Errorf("%s: `%s` shows `worker %s %s`, which is not one of %v", f, strings.TrimSpace(code), cmd, s, subs)
					}
				}
			}
		}
	}
	t.Logf("%d worker commands checked against the CLI's dispatch %v", seen, cli)
	if seen < 5 {
		t.Errorf("only %d worker commands found: the pattern no longer reads the docs", seen)
	}
}

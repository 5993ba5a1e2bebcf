package doctest

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// prelude declares the variables a fragment may use without declaring
// them (see the package documentation).
const prelude = `package doc

import (
	"context"
	"database/sql"
	"net/http"

	"github.com/idemdev/idem"
)

var (
	ctx context.Context
	db  *sql.DB
	tx  *sql.Tx
	l   *idem.Ledger
	mux *http.ServeMux
	w   http.ResponseWriter
	r   *http.Request
)
`

// TestGoBlocksCompile compiles every Go block of README.md and docs/*.md,
// and the code in package idem's documentation (see the package
// documentation for how fragments are wrapped). All blocks
// are built by one go build; each documentation file is a subtest that
// reports its own blocks' errors.
func TestGoBlocksCompile(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	blocks := append(allBlocks(t, "go"), packageDocBlocks(t, root)...)
	problems := compileBlocks(t, root, blocks)
	byFile := map[string][]block{}
	for _, b := range blocks {
		byFile[b.file] = append(byFile[b.file], b)
	}
	for _, f := range append(docFiles(t), packageDocs...) {
		t.Run(f, func(t *testing.T) {
			for _, b := range byFile[f] {
				if b.skip != "" {
					t.Logf("%s: go block not compiled: %s", b.where(), b.skip)
				}
			}
			for _, p := range problems[f] {
				t.Error(p)
			}
			if len(problems[f]) > 0 {
				t.Log("see internal/doctest/doc.go for how Go blocks are compiled, and how to mark one that should not be")
			}
		})
	}
}

// TestCompileNamesDocLines checks what a broken block reports: the
// Markdown file, line and column, the compiler's message, and the block.
func TestCompileNamesDocLines(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	blocks := []block{
		{file: "docs/broken.md", lang: "go", line: 40, lines: []string{"ob, err := outbox.New(l, nil)", "_, err = ob.Add(ctx, tx, outbox.Message{To: \"x\"})"}},
		{file: "docs/broken.md", lang: "go", line: 50, lines: []string{"x := {"}},
		{file: "docs/broken.md", lang: "go", line: 60, lines: []string{"_ = msg.Nope"}, given: []string{"var msg struct{ ID string }"}, givenLine: 57},
		{file: "docs/broken.md", lang: "go", line: 70, lines: []string{"this is not Go"}, skip: "a sketch"},
	}
	got := strings.Join(compileBlocks(t, root, blocks)["docs/broken.md"], "\n")
	for _, want := range []string{
		"docs/broken.md:41:41: unknown field To in struct literal of type outbox.Message (go block at line 40)",
		"docs/broken.md:50:", "go block at line 50 does not parse",
		"docs/broken.md:60:", "msg.Nope undefined", "(go block at line 60)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, ":70") {
		t.Errorf("a skipped block was compiled:\n%s", got)
	}
}

// compileBlocks compiles blocks (see the package documentation) with one
// go build and returns the problems found, by documentation file. A
// failure outside the blocks fails t.
func compileBlocks(t *testing.T, root string, blocks []block) map[string][]string {
	t.Helper()
	pkgs := packageTable(t, root)

	build, err := os.MkdirTemp(filepath.Join(root, "internal", "doctest"), "_build") // "_": never in ./...
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(build) })

	var dirs []string
	byFile := map[string][]block{}
	problems := map[string][]string{} // doc file → messages found before building
	for _, b := range blocks {
		byFile[b.file] = append(byFile[b.file], b)
		if b.skip != "" {
			continue
		}
		src, whole, err := wrapGo(root, b, pkgs)
		if err != nil {
			problems[b.file] = append(problems[b.file], err.Error())
			continue
		}
		name := strings.TrimSuffix(strings.ReplaceAll(b.file, "/", "_"), ".md")
		dir := filepath.Join(build, name)
		if whole {
			dir = filepath.Join(build, fmt.Sprintf("%s_L%d", name, b.line))
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if !whole {
			if err := os.WriteFile(filepath.Join(dir, "prelude.go"), []byte(prelude), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("block_L%d.go", b.line)), src, 0o644); err != nil {
			t.Fatal(err)
		}
		if rel := "./" + filepath.ToSlash(must(filepath.Rel(root, dir))); !slices.Contains(dirs, rel) {
			dirs = append(dirs, rel)
		}
	}

	var out []byte
	if len(dirs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-gcflags=-e", "-o", os.DevNull}, dirs...)...)
		if len(dirs) > 1 {
			cmd.Args = append([]string{"go", "build", "-gcflags=-e"}, dirs...) // -o needs one package
		}
		cmd.Dir = root
		out, err = cmd.CombinedOutput()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("go build of the doc blocks: %v", ctx.Err())
		}
	}
	errLine := regexp.MustCompile(`^(?:\./)?(\S+\.(?:md|go)):(\d+):(?:(\d+):)? (.*)$`)
	mapped, outside := false, false
	for line := range strings.Lines(string(out)) {
		m := errLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		file := strings.TrimPrefix(filepath.ToSlash(m[1]), filepath.ToSlash(root)+"/")
		if _, ok := byFile[file]; !ok {
			outside = true // a generated file: reported below with the whole output
			continue
		}
		n, _ := strconv.Atoi(m[2])
		in := "?"
		for _, b := range byFile[file] {
			if b.line <= n && n < b.line+len(b.lines) || b.givenLine <= n && n < b.givenLine+len(b.given) {
				in = strconv.Itoa(b.line)
			}
		}
		at := file + ":" + m[2]
		if m[3] != "" {
			at += ":" + m[3]
		}
		problems[file] = append(problems[file], fmt.Sprintf("%s: %s (go block at line %s)", at, m[4], in))
		mapped = true
	}
	if err != nil && !mapped {
		t.Errorf("go build of the doc blocks failed outside them:\n%s", out)
	} else if outside {
		t.Errorf("go build of the doc blocks failed, partly outside them:\n%s", out)
	}
	return problems
}

// wrapGo returns the Go file that compiles block b: the block itself when
// it starts with a package clause (whole), else the block as declarations
// or as a function body, with the imports it needs. A //line directive
// makes compiler errors name the Markdown file and line.
func wrapGo(root string, b block, pkgs map[string]string) (src []byte, whole bool, err error) {
	body := strings.Join(b.lines, "\n") + "\n"
	directive := fmt.Sprintf("//line %s:%d:1\n", filepath.Join(root, b.file), b.line)
	given := ""
	if b.given != nil {
		given = fmt.Sprintf("//line %s:%d:1\n", filepath.Join(root, b.file), b.givenLine) + strings.Join(b.given, "\n") + "\n\n"
	}
	fset := token.NewFileSet()
	if f, err := parser.ParseFile(fset, "", directive+body, parser.PackageClauseOnly); err == nil && f.Name != nil {
		return []byte(directive + body), true, nil
	}
	asDecls := "package doc\n\n" + given + directive + body
	if f, err := parser.ParseFile(fset, "", asDecls, 0); err == nil {
		return []byte("package doc\n\n" + importDecl(f, pkgs) + given + directive + body), false, nil
	}
	// The fragment runs in a block of its own inside a function with an
	// error result, so "return err" compiles and the fragment may declare
	// err afresh; the variables it declares are then marked used, since
	// a fragment often stops before it uses what it made.
	wrap := func(used string) string {
		return given + "func _() (err error) {\n\t{\n" + directive + body + used + "\t}\n\treturn\n}\n"
	}
	f, err := parser.ParseFile(fset, "", "package doc\n\n"+wrap(""), 0)
	if err != nil {
		return nil, false, fmt.Errorf("%v (go block at line %d does not parse as a file, declarations or statements)", strings.TrimPrefix(err.Error(), root+"/"), b.line)
	}
	var used strings.Builder
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "_" {
			for _, name := range declaredNames(fn.Body.List[0].(*ast.BlockStmt).List) {
				fmt.Fprintf(&used, "\t_ = %s\n", name)
			}
		}
	}
	return []byte("package doc\n\n" + importDecl(f, pkgs) + wrap(used.String())), false, nil
}

// declaredNames returns the names that the statements list declares
// (with := or var), in order, once each, without "_".
func declaredNames(list []ast.Stmt) []string {
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	for _, st := range list {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, spec := range gd.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return names
}

// importDecl returns an import declaration for every package f names in a
// selector without declaring or importing it, as far as pkgs knows it.
func importDecl(f *ast.File, pkgs map[string]string) string {
	have := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		have[name] = true
	}
	unresolved := map[*ast.Ident]bool{}
	for _, id := range f.Unresolved {
		unresolved[id] = true
	}
	var paths []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || !unresolved[id] || have[id.Name] {
			return true
		}
		if p, ok := pkgs[id.Name]; ok {
			have[id.Name] = true
			paths = append(paths, p)
		}
		return true
	})
	if len(paths) == 0 {
		return ""
	}
	slices.Sort(paths)
	var b strings.Builder
	b.WriteString("import (\n")
	for _, p := range paths {
		name := p[strings.LastIndex(p, "/")+1:]
		if pkgs[name] != p { // a path whose last element is not its name, such as pgx/v5
			fmt.Fprintf(&b, "\t%s %q\n", nameOf(pkgs, p), p)
			continue
		}
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	b.WriteString(")\n\n")
	return b.String()
}

func nameOf(pkgs map[string]string, path string) string {
	for name, p := range pkgs {
		if p == path {
			return name
		}
	}
	return ""
}

// packageTable maps a package name to the import path a doc block means by
// it: this module's packages first, then the standard library's, then the
// module's dependencies'. A name two packages of one tier share is left
// out (the block must import it itself).
func packageTable(t *testing.T, root string) map[string]string {
	t.Helper()
	list := func(args ...string) []string {
		cmd := exec.Command("go", append([]string{"list", "-f", "{{.Name}} {{.ImportPath}} {{.Standard}}"}, args...)...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %v: %v", args, err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	modPath := strings.TrimSpace(string(must(exec.Command("go", "list", "-m").Output())))
	tiers := make([]map[string][]string, 3) // module, std, deps
	for i := range tiers {
		tiers[i] = map[string][]string{}
	}
	for _, line := range slices.Concat(list("std"), list("-deps", "./...")) {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] == "main" || strings.Contains(f[1], "internal") || strings.Contains(f[1], "vendor") {
			continue
		}
		tier := 2
		switch {
		case f[1] == modPath || strings.HasPrefix(f[1], modPath+"/"):
			tier = 0
		case f[2] == "true":
			tier = 1
		}
		if !slices.Contains(tiers[tier][f[0]], f[1]) {
			tiers[tier][f[0]] = append(tiers[tier][f[0]], f[1])
		}
	}
	table := map[string]string{}
	for i := len(tiers) - 1; i >= 0; i-- { // later tiers first, overwritten by earlier
		for name, paths := range tiers[i] {
			if len(paths) == 1 {
				table[name] = paths[0]
			} else {
				delete(table, name)
			}
		}
	}
	return table
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestWrapGo checks how blocks become files.
func TestWrapGo(t *testing.T) {
	t.Parallel()
	pkgs := map[string]string{"http": "net/http", "idem": "github.com/idemdev/idem", "pgx": "github.com/jackc/pgx/v5"}
	tests := []struct {
		name, in string
		whole    bool
		has      []string
	}{
		{"statements", "mux.Handle(\"/\", http.NotFoundHandler())\n_ = idem.ErrInvalid", false, []string{"import (\n\t\"github.com/idemdev/idem\"\n\t\"net/http\"\n)", "func _() (err error) {\n\t{\n//line /m/d.md:3:1\nmux.Handle"}},
		{"declarations", "func h(w http.ResponseWriter, r *http.Request) {}", false, []string{"\"net/http\"", "//line /m/d.md:3:1\nfunc h("}},
		{"local name shadows no package", "http := 1", false, []string{"func _() (err error) {", "\t_ = http\n"}},
		{"declared names marked used", "a, err := 1, error(nil)\nvar b, _ = 2, 3", false, []string{"\t_ = a\n\t_ = err\n\t_ = b\n\t}\n\treturn\n}"}},
		{"versioned path", "var c *pgx.Conn", false, []string{"pgx \"github.com/jackc/pgx/v5\""}},
		{"whole file", "package main\n\nfunc main() {}", true, []string{"//line /m/d.md:3:1\npackage main"}},
	}
	for _, tt := range tests {
		src, whole, err := wrapGo("/m", block{file: "d.md", line: 3, lines: strings.Split(tt.in, "\n")}, pkgs)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if whole != tt.whole {
			t.Errorf("%s: whole = %v", tt.name, whole)
		}
		for _, h := range tt.has {
			if !bytes.Contains(src, []byte(h)) {
				t.Errorf("%s: source lacks %q:\n%s", tt.name, h, src)
			}
		}
		if tt.name == "local name shadows no package" && bytes.Contains(src, []byte("import")) {
			t.Errorf("%s: imported a package for a local variable:\n%s", tt.name, src)
		}
	}
	if _, _, err := wrapGo("/m", block{file: "d.md", line: 3, lines: []string{"x := {"}}, pkgs); err == nil || !strings.Contains(err.Error(), "d.md:3") {
		t.Errorf("unparsable block: error %v, want one naming d.md:3", err)
	}
}

// packageDocs are the Go files whose package documentation's code blocks
// are compiled as Go blocks: package idem's, the first page a user reads.
var packageDocs = []string{"idem.go"}

// packageDocBlocks returns the code blocks (lines indented by a tab) of the
// package documentation of the files packageDocs names.
func packageDocBlocks(t *testing.T, root string) []block {
	t.Helper()
	var blocks []block
	for _, name := range packageDocs {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, name), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			continue
		}
		var cur *block
		for _, c := range f.Doc.List {
			text := strings.TrimPrefix(c.Text, "//")
			if code, ok := strings.CutPrefix(text, "\t"); ok {
				if cur == nil {
					cur = &block{file: name, lang: "go", line: fset.Position(c.Pos()).Line}
				}
				cur.lines = append(cur.lines, code)
				continue
			}
			if cur != nil {
				blocks = append(blocks, *cur)
				cur = nil
			}
		}
		if cur != nil {
			blocks = append(blocks, *cur)
		}
	}
	return blocks
}

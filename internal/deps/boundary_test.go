package deps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The single execution boundary (the single execution boundary document
// (003); the runtime and tools package documentation state the rule):
// every tool runs through runtime.Runtime.Execute, so every run is
// validated, authorized, transactional and recorded. Running a tool means
//
//   - calling, or taking as a method value or method expression, a method
//     named Execute with the signature of tools.Tool's:
//     func(context.Context, *tools.Env, json.RawMessage) (json.RawMessage, error),
//     on any type (the interface, a built-in tool, a tool of another package,
//     an interface of another package that repeats the method);
//   - calling a tool's body as package tools holds it: a value of type
//     tools.RawFunc or an instance of tools.TypedFunc.
//
// Where it is allowed:
//
//   - the non-test files of package runtime: the boundary itself;
//   - the non-test files of package tools: a tool body only inside a method
//     named Execute (the tool calling its own body, as NewRaw's and
//     NewTyped's tools do); never another tool's Execute;
//   - the test files of package tools (package tools and tools_test): unit
//     tests of a tool, which run its Execute on an Env they build.
//
// Nowhere else: not the server, not the CLI, not the runtime's own tests
// (they run tools through Runtime.Execute), not examples. Env.Run is not on
// the list: it is a handle a tool's body uses while the runtime runs it,
// from whatever package the tool lives in. Reflection (a method looked up
// by name) is not seen by this scan.
const (
	runtimePkg = module + "/runtime"
	toolsPkg   = module + "/tools"
)

func TestExecutionBoundary(t *testing.T) {
	l := newLoader(t)
	var found []string // every call site seen, allowed or not: the scan must see the boundary
	for _, path := range l.order {
		for _, u := range l.units(t, path) {
			for _, c := range scan(l.fset, u) {
				found = append(found, c.String())
				if why := c.forbidden(); why != "" {
					t.Errorf("%s: %s; run tools through runtime.Runtime.Execute, the single execution boundary", c, why)
				}
			}
		}
	}
	// The scan must see the one call that is the boundary; if it does not,
	// it is blind, and its silence proves nothing.
	if !slices.ContainsFunc(found, func(s string) bool {
		return strings.HasPrefix(s, "runtime/execute.go:") && strings.Contains(s, "Execute")
	}) {
		t.Errorf("the scan did not find runtime's call of a tool's Execute (runtime/execute.go); it is blind. Found:\n%s", strings.Join(found, "\n"))
	}
}

// The scan catches each way of running a tool, in a package that may not:
// a direct call, a method value, a method expression, a call through an
// interface embedding tools.Tool, through an interface of its own, on a
// concrete tool type, and a tool body called directly.
func TestExecutionBoundary_Catches(t *testing.T) {
	l := newLoader(t)
	src := `package scratch

import (
	"context"
	"encoding/json"

	"github.com/toolgate/toolgate/tools"
)

type mine interface {
	Execute(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error)
}

type wrapper struct{ tools.Tool }

type own struct{}

func (own) Execute(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) { return in, nil }
func (own) Declaration() tools.Declaration { return tools.Declaration{} }

func run[T tools.Tool](t T) { t.Execute(context.Background(), nil, nil) }

func all(e *tools.Entry, w wrapper, m mine, fn tools.RawFunc, typed tools.TypedFunc[int, int]) {
	ctx := context.Background()
	e.Tool().Execute(ctx, nil, nil)          // 1 direct
	f := e.Tool().Execute                    // 2 method value
	_ = f
	_ = tools.Tool.Execute                   // 3 method expression
	w.Execute(ctx, nil, nil)                 // 4 promoted through an embedded Tool
	m.Execute(ctx, nil, nil)                 // 5 an interface of its own
	own{}.Execute(ctx, nil, nil)             // 6 a concrete tool
	fn(ctx, nil, nil)                        // 7 a raw body
	typed(ctx, nil, 1)                       // 8 a typed body
	run(own{})
}
`
	u := l.checkSource(t, module+"/server", "server/scratch.go", src)
	var got, want []int
	for _, c := range scan(l.fset, u) {
		if c.forbidden() == "" {
			t.Errorf("%s: allowed in server", c)
		}
		got = append(got, c.line)
	}
	// The numbered lines above (1 to 8) and the call inside run.
	for i, line := range strings.Split(src, "\n") {
		_, mark, _ := strings.Cut(line, "// ")
		if mark != "" && mark[0] >= '1' && mark[0] <= '8' || strings.HasPrefix(line, "func run[") {
			want = append(want, i+1)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("flagged lines %v, want %v", got, want)
	}
	// The same calls are allowed in a test file of package tools.
	u = l.checkSource(t, toolsPkg+"_test", "tools/scratch_test.go", strings.Replace(src, "package scratch", "package tools_test", 1))
	for _, c := range scan(l.fset, u) {
		if why := c.forbidden(); why != "" {
			t.Errorf("%s: refused in a test of package tools: %s", c, why)
		}
	}
}

// call is a place that runs a tool.
type call struct {
	pkg    string // import path of the package being checked; "_test" suffix for an external test package
	file   string // relative to the module root
	line   int
	what   string // what it runs
	test   bool   // in a _test.go file
	body   bool   // calls a tool body (RawFunc, TypedFunc) rather than an Execute method
	inExec bool   // inside a method named Execute
}

func (c call) String() string { return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.what) }

// forbidden says why c breaks the rule, or "".
func (c call) forbidden() string {
	pkg := strings.TrimSuffix(c.pkg, "_test")
	switch {
	case pkg == runtimePkg && !c.test:
		return ""
	case pkg == toolsPkg && c.test:
		return ""
	case pkg == toolsPkg && c.body && c.inExec:
		return ""
	case pkg == toolsPkg && c.body:
		return "package tools calls a tool body outside the tool's own Execute method"
	case pkg == toolsPkg:
		return "package tools runs a tool (a tool never runs another tool)"
	case pkg == runtimePkg:
		return "a runtime test runs a tool directly"
	}
	return strings.TrimPrefix(pkg, module+"/") + " runs a tool"
}

// unit is one type-checked set of files: a package, a package with its
// in-package tests, or an external test package.
type unit struct {
	path  string // import path (external tests: path + "_test")
	pkg   *types.Package
	files []*ast.File
	names []string // the files' paths relative to the module root
	info  *types.Info
}

// scan returns every place in u that runs a tool.
func scan(fset *token.FileSet, u *unit) []call {
	var out []call
	for i, f := range u.files {
		name := u.names[i]
		test := strings.HasSuffix(name, "_test.go")
		var visit func(n ast.Node, inExec bool)
		visit = func(root ast.Node, inExec bool) {
			ast.Inspect(root, func(n ast.Node) bool {
				if fd, ok := n.(*ast.FuncDecl); ok && n != root {
					visit(fd, fd.Recv != nil && fd.Name.Name == "Execute")
					return false
				}
				add := func(pos token.Pos, what string, body bool) {
					out = append(out, call{pkg: u.path, file: name, line: fset.Position(pos).Line, what: what, test: test, body: body, inExec: inExec})
				}
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if sel := u.info.Selections[n]; sel != nil && (sel.Kind() == types.MethodVal || sel.Kind() == types.MethodExpr) {
						if fn, ok := sel.Obj().(*types.Func); ok && isExecute(fn) {
							add(n.Sel.Pos(), "("+types.TypeString(sel.Recv(), nil)+").Execute", false)
						}
					}
				case *ast.CallExpr:
					if tv, ok := u.info.Types[n.Fun]; ok && !tv.IsType() && isBody(tv.Type) {
						add(n.Lparen, "a tool body ("+types.TypeString(tv.Type, nil)+")", true)
					}
				}
				return true
			})
		}
		visit(f, false)
	}
	return out
}

// isExecute reports whether fn is a method named Execute with tools.Tool's
// signature.
func isExecute(fn *types.Func) bool {
	sig, ok := fn.Type().(*types.Signature)
	if !ok || fn.Name() != "Execute" {
		return false
	}
	return slices.Equal(typeStrings(sig.Params()), []string{"context.Context", "*" + toolsPkg + ".Env", "encoding/json.RawMessage"}) &&
		slices.Equal(typeStrings(sig.Results()), []string{"encoding/json.RawMessage", "error"})
}

func typeStrings(t *types.Tuple) []string {
	out := make([]string, t.Len())
	for i := range out {
		out[i] = types.TypeString(t.At(i).Type(), nil)
	}
	return out
}

// isBody reports whether t is tools.RawFunc or an instance of
// tools.TypedFunc.
func isBody(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != toolsPkg {
		return false
	}
	return n.Obj().Name() == "RawFunc" || n.Obj().Name() == "TypedFunc"
}

// loader type-checks the module's packages from source, and everything
// else from the export data the go command builds.
type loader struct {
	fset  *token.FileSet
	root  string
	meta  map[string]*pkgMeta // the module's packages by import path
	order []string            // their import paths, sorted
	gc    types.Importer      // export data of everything outside the module
	plain map[string]*unit    // checked packages without their tests
	deps  map[[2]string]bool  // memo: does a depend on b
}

type pkgMeta struct {
	ImportPath, Dir                    string
	GoFiles, CgoFiles                  []string
	TestGoFiles, XTestGoFiles          []string
	Imports, TestImports, XTestImports []string
	Export                             string
	Error                              *struct{ Err string }
}

func goList(t *testing.T, dir string, args ...string) []*pkgMeta {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []*pkgMeta
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkgMeta
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, &p)
	}
	return pkgs
}

// shared is the loader the tests share: listing the module and
// type-checking its packages is the slow part (seconds under -race), and
// what it loads does not change while the tests run. Tests using it must
// not run in parallel (go/types importers are not safe for concurrent use).
var shared *loader

func newLoader(t *testing.T) *loader {
	t.Helper()
	if shared == nil {
		shared = loadModule(t)
	}
	return shared
}

func loadModule(t *testing.T) *loader {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	l := &loader{fset: token.NewFileSet(), root: root, meta: map[string]*pkgMeta{}, plain: map[string]*unit{}, deps: map[[2]string]bool{}}
	external := map[string]bool{}
	for _, p := range goList(t, root, "./...") {
		if len(p.CgoFiles) > 0 {
			t.Fatalf("%s has cgo files, which this scan does not check", p.ImportPath)
		}
		l.meta[p.ImportPath] = p
		l.order = append(l.order, p.ImportPath)
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			external[imp] = true
		}
	}
	slices.Sort(l.order)
	var ext []string
	for imp := range external {
		if _, ok := l.meta[imp]; !ok && imp != "unsafe" && imp != "C" {
			ext = append(ext, imp)
		}
	}
	slices.Sort(ext)
	exports := map[string]string{}
	for _, p := range goList(t, root, append([]string{"-deps", "-export"}, ext...)...) {
		exports[p.ImportPath] = p.Export
	}
	l.gc = importer.ForCompiler(l.fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	return l
}

// importerFunc adapts a function to types.Importer.
type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// check type-checks files as package path, resolving the module's packages
// through mod.
func (l *loader) check(t *testing.T, path string, names []string, files []*ast.File, mod func(string) (*types.Package, error)) *unit {
	t.Helper()
	u := &unit{path: path, files: files, names: names, info: &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
		Uses:       map[*ast.Ident]types.Object{},
		Instances:  map[*ast.Ident]types.Instance{},
	}}
	conf := types.Config{Importer: importerFunc(func(imp string) (*types.Package, error) {
		if _, ok := l.meta[imp]; ok {
			return mod(imp)
		}
		return l.gc.Import(imp)
	})}
	pkg, err := conf.Check(path, l.fset, files, u.info)
	if err != nil {
		t.Fatalf("type-checking %s: %v", path, err)
	}
	u.pkg = pkg
	return u
}

func (l *loader) parse(t *testing.T, dir string, names []string) ([]string, []*ast.File) {
	t.Helper()
	var rel []string
	var files []*ast.File
	for _, n := range names {
		full := filepath.Join(dir, n)
		f, err := parser.ParseFile(l.fset, full, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := filepath.Rel(l.root, full)
		rel = append(rel, filepath.ToSlash(r))
		files = append(files, f)
	}
	return rel, files
}

// plainPkg is path type-checked without its tests.
func (l *loader) plainPkg(t *testing.T, path string) *unit {
	if u, ok := l.plain[path]; ok {
		return u
	}
	m := l.meta[path]
	names, files := l.parse(t, m.Dir, m.GoFiles)
	u := l.check(t, path, names, files, func(imp string) (*types.Package, error) { return l.plainPkg(t, imp).pkg, nil })
	l.plain[path] = u
	return u
}

// dependsOn reports whether module package a imports b, directly or not.
func (l *loader) dependsOn(a, b string) bool {
	k := [2]string{a, b}
	if v, ok := l.deps[k]; ok {
		return v
	}
	l.deps[k] = false // no cycles among non-test imports; this stops a bad one
	for _, imp := range l.meta[a].Imports {
		if _, ok := l.meta[imp]; ok && (imp == b || l.dependsOn(imp, b)) {
			l.deps[k] = true
			break
		}
	}
	return l.deps[k]
}

// units returns the checked files of package path: the package with its
// in-package tests, and its external test package, as `go test` builds
// them (an external test sees the package with its in-package test files,
// and every module package that imports it is rebuilt against that).
func (l *loader) units(t *testing.T, path string) []*unit {
	m := l.meta[path]
	var out []*unit
	var withTests *unit
	if len(m.TestGoFiles) == 0 {
		withTests = l.plainPkg(t, path)
	} else {
		names, files := l.parse(t, m.Dir, slices.Concat(m.GoFiles, m.TestGoFiles))
		withTests = l.check(t, path, names, files, func(imp string) (*types.Package, error) { return l.plainPkg(t, imp).pkg, nil })
	}
	out = append(out, withTests)
	if len(m.XTestGoFiles) > 0 {
		rebuilt := map[string]*types.Package{path: withTests.pkg}
		var mod func(string) (*types.Package, error)
		mod = func(imp string) (*types.Package, error) {
			if p, ok := rebuilt[imp]; ok {
				return p, nil
			}
			if len(m.TestGoFiles) == 0 || !l.dependsOn(imp, path) {
				return l.plainPkg(t, imp).pkg, nil
			}
			im := l.meta[imp]
			names, files := l.parse(t, im.Dir, im.GoFiles)
			p := l.check(t, imp, names, files, mod).pkg
			rebuilt[imp] = p
			return p, nil
		}
		names, files := l.parse(t, m.Dir, m.XTestGoFiles)
		out = append(out, l.check(t, path+"_test", names, files, mod))
	}
	return out
}

// checkSource type-checks one source file as a package of the module.
func (l *loader) checkSource(t *testing.T, path, name, src string) *unit {
	t.Helper()
	f, err := parser.ParseFile(l.fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	return l.check(t, path, []string{name}, []*ast.File{f}, func(imp string) (*types.Package, error) { return l.plainPkg(t, imp).pkg, nil })
}

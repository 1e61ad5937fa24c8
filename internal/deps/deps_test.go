package deps

import (
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/toolgate/toolgate"

// policy is the statement of which package may import what, besides the
// standard library, as Go's own go/build/deps_test.go does. An entry names
// the module's packages (by path below the module) and third-party import
// path prefixes. A package not listed here fails the test: adding one is a
// decision to write down.
//
// The shape (docs/architecture.md, "Packages"): the store's backends
// (txn/boltstore, txn/pgstore) import nothing of the module but the store
// contract (txn/driver) and, for bbolt, the write-ahead log (internal/wal), and nothing but txn's Open imports them (see
// TestDependencyPolicy_Backends); leaf packages never import each other except
// tools -> capability; only runtime (and the HTTP boundary, the client)
// touches the OpenTelemetry API; nothing imports runtime except the CLI and
// its engines (internal/bench for the bench command, server and its web
// UI, webui, for serve), the MCP front end (mcp, the only importer of the MCP SDK
// besides the CLI and its bench engine, whose --gateway is an MCP client and
// server) and the tests' kit (internal/testkit); only the CLI may use the OTel SDK; the client package
// imports nothing of the module.
var policy = map[string][]string{
	"lifecycle":                {"github.com/looplab/fsm"},
	"capability":               {"internal/uuid", "rules"},
	"rules":                    {"github.com/cedar-policy/cedar-go", "github.com/go-json-experiment/json"},
	"tools":                    {"capability", "rules", "internal/proc", "github.com/santhosh-tekuri/jsonschema/v5", "golang.org/x/mod/semver", "go.yaml.in/yaml/v3", "golang.org/x/sys/unix"},
	"txn":                      {"txn/driver", "txn/boltstore", "txn/pgstore"},
	"txn/driver":               {},
	"txn/boltstore":            {"txn/driver", "internal/wal", "go.etcd.io/bbolt"},
	"internal/wal":             {"golang.org/x/sys/unix"},
	"internal/wal/crashfile":   {},
	"txn/pgstore":              {"txn/driver", "github.com/jackc/pgx/v5"},
	"txn/storetest":            {"txn", "txn/driver", "audit"},
	"audit":                    {},
	"runtime":                  {"lifecycle", "capability", "rules", "tools", "txn", "audit", "internal/uuid", "internal/proc", "go.opentelemetry.io/otel"},
	"internal/uuid":            {},
	"oauth/oauthtest":          {"github.com/golang-jwt/jwt/v5"},
	"oauth":                    {"github.com/golang-jwt/jwt/v5", "github.com/MicahParks/keyfunc/v3", "github.com/MicahParks/jwkset", "golang.org/x/time/rate"},
	"internal/proc":            {"golang.org/x/sys/unix"},
	"internal/gctune":          {},
	"internal/ratelimit":       {"golang.org/x/time/rate"},
	"internal/deps":            {},
	"internal/docscheck":       {},
	"internal/testchild":       {},
	"internal/testdb":          {"github.com/jackc/pgx/v5"},
	"internal/testkit":         {"runtime", "txn", "audit", "capability", "internal/testdb"},
	"internal/testchild/child": {},
	"internal/explain":         {"capability", "rules", "tools"},
	"internal/bench":           {"runtime", "tools", "capability", "txn", "lifecycle", "go.etcd.io/bbolt", "github.com/jackc/pgx/v5", "github.com/modelcontextprotocol/go-sdk"},
	"internal/nodetest":        {"server", "txn", "github.com/jackc/pgx/v5"},
	"server":                   {"runtime", "lifecycle", "capability", "tools", "txn", "audit", "oauth", "go.opentelemetry.io/otel", "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp", "internal/ratelimit"},
	"client":                   {"go.opentelemetry.io/otel"},
	"mcp":                      {"runtime", "tools", "capability", "rules", "lifecycle", "audit", "oauth", "internal/ratelimit", "github.com/modelcontextprotocol/go-sdk", "go.opentelemetry.io/otel"},
	"webui":                    {"runtime", "server", "oauth", "internal/explain", "lifecycle", "capability", "tools", "txn", "audit", "golang.org/x/time/rate"},
	"internal/cli":             {"server", "webui", "oauth", "internal/explain", "mcp", "github.com/modelcontextprotocol/go-sdk", "client", "runtime", "lifecycle", "capability", "rules", "tools", "txn", "audit", "internal/bench", "internal/gctune", "github.com/spf13/cobra", "go.opentelemetry.io/otel"},
	"cmd/toolgate":             {"internal/cli"},
}

// forbidden are import prefixes no package of the module may use outside
// the CLI, whatever the policy above says.
var forbidden = map[string][]string{
	"go.opentelemetry.io/otel/sdk":       {"internal/cli", "cmd/toolgate"},
	"go.opentelemetry.io/otel/exporters": {"internal/cli", "cmd/toolgate"},
	"github.com/modelcontextprotocol":    {"mcp", "internal/cli", "internal/bench"}, // bench --gateway: an MCP client and an upstream server
}

func TestDependencyPolicy(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "docs") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, path)
		pkgs[filepath.ToSlash(rel)] = p.Imports // non-test imports only: tests may use anything
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pkgs["."]; ok {
		t.Error("the module root must not hold a Go package")
	}
	for _, want := range []string{"lifecycle", "capability", "tools", "txn", "audit", "runtime", "cmd/toolgate"} {
		if _, ok := pkgs[want]; !ok {
			t.Errorf("package %s not found: is the walk broken?", want)
		}
	}
	for pkg, imports := range pkgs {
		allowed, ok := policy[pkg]
		if !ok {
			t.Errorf("package %s is not in the dependency policy; add it to deps_test.go", pkg)
			continue
		}
		for _, imp := range imports {
			if err := check(pkg, imp, allowed); err != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, err)
			}
		}
	}
}

// check returns why pkg may not import imp, or "".
func check(pkg, imp string, allowed []string) string {
	for prefix, who := range forbidden {
		if under(imp, prefix) && !slices.Contains(who, pkg) {
			return "only " + strings.Join(who, ", ") + " may import " + prefix
		}
	}
	if stdlib(imp) {
		return ""
	}
	if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
		if slices.Contains(allowed, rel) {
			return ""
		}
		return "not allowed by the policy (docs/architecture.md: imports point one way)"
	}
	for _, a := range allowed {
		if strings.Contains(a, ".") && under(imp, a) {
			return ""
		}
	}
	return "third-party import not allowed for this package"
}

func under(imp, prefix string) bool { return imp == prefix || strings.HasPrefix(imp, prefix+"/") }

// stdlib reports whether imp is a standard library package: its first
// element has no dot.
func stdlib(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}

// The policy itself must keep the shape docs/architecture.md states.
func TestDependencyPolicy_Shape(t *testing.T) {
	leaves := []string{"lifecycle", "capability", "tools", "txn", "audit"}
	for _, leaf := range leaves {
		for _, dep := range policy[leaf] {
			if slices.Contains(leaves, dep) && !(leaf == "tools" && dep == "capability") {
				t.Errorf("leaf %s may not import leaf %s", leaf, dep)
			}
		}
	}
	// What a backend may import of the module: the contract, and packages
	// that import nothing of the module (below it, as the log is).
	below := func(dep string) bool {
		return dep == "txn/driver" || !slices.ContainsFunc(policy[dep], func(d string) bool { return !strings.Contains(d, ".") })
	}
	for _, be := range backends {
		for _, dep := range policy[be] {
			if !strings.Contains(dep, ".") && !below(dep) {
				t.Errorf("backend %s may import nothing of the module above the store contract (txn/driver), not %s", be, dep)
			}
		}
	}
	for pkg, deps := range policy {
		for _, be := range backends {
			if slices.Contains(deps, be) && pkg != "txn" {
				t.Errorf("%s may not import the backend %s: only txn.Open opens a backend", pkg, be)
			}
		}
		if slices.Contains(deps, "runtime") && pkg != "internal/cli" && pkg != "internal/bench" && pkg != "server" && pkg != "mcp" && pkg != "webui" && pkg != "internal/testkit" && !strings.HasPrefix(pkg, "cmd/") {
			t.Errorf("%s may not import runtime", pkg)
		}
	}
}

// The check must catch a violation: a leaf importing runtime, an OTel SDK
// import outside the CLI, an unlisted third-party module.
func TestCheck(t *testing.T) {
	for _, tc := range []struct{ pkg, imp string }{
		{"txn", module + "/runtime"},
		{"txn", module + "/lifecycle"},
		{"runtime", "go.opentelemetry.io/otel/sdk/trace"},
		{"tools", "github.com/google/uuid"},
		{"capability", "go.etcd.io/bbolt"},
		{"runtime", "github.com/modelcontextprotocol/go-sdk/mcp"},
		{"tools", "github.com/modelcontextprotocol/go-sdk/jsonrpc"},
		{"txn/boltstore", module + "/txn"},
		{"txn/pgstore", module + "/runtime"},
		{"txn/pgstore", module + "/txn/boltstore"},
		{"txn/driver", "go.etcd.io/bbolt"},
		{"runtime", module + "/txn/boltstore"},
		{"txn", "github.com/jackc/pgx/v5"},
	} {
		if check(tc.pkg, tc.imp, policy[tc.pkg]) == "" {
			t.Errorf("check(%s, %s) allowed a violation", tc.pkg, tc.imp)
		}
	}
	for _, tc := range []struct{ pkg, imp string }{
		{"txn/boltstore", "go.etcd.io/bbolt/errors"},
		{"txn/pgstore", "github.com/jackc/pgx/v5/pgxpool"},
		{"txn", module + "/txn/driver"},
		{"runtime", "go.opentelemetry.io/otel/trace"},
		{"tools", module + "/capability"},
		{"runtime", "encoding/json"},
	} {
		if why := check(tc.pkg, tc.imp, policy[tc.pkg]); why != "" {
			t.Errorf("check(%s, %s) refused: %s", tc.pkg, tc.imp, why)
		}
	}
}

// backends are the store's backend packages: peers behind the store
// contract (txn/driver), opened by txn.Open alone.
var backends = []string{"txn/boltstore", "txn/pgstore"}

// openHelper is the one non-test file that imports the backends: txn's
// Open picks one by the path; the rest of txn (and of the module) sees the
// contract. Tests may import a backend (its own tests, the conformance
// suite's runs).
const openHelper = "txn/open.go"

func TestDependencyPolicy_Backends(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := false
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			for _, be := range backends {
				if ip != module+"/"+be {
					continue
				}
				if rel == openHelper {
					seen = true
					continue
				}
				t.Errorf("%s imports the backend %s: only %s (txn.Open) may; elsewhere, use the store contract (txn/driver) and its optional interfaces", rel, be, openHelper)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !seen {
		t.Errorf("%s imports no backend: is the walk blind?", openHelper)
	}
}

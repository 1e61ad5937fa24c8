package tools_test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/toolgate/toolgate/tools"
)

// schemaDoc builds a draft 2020-12 schema document of type object from the
// given members (JSON object members without the braces).
func schemaDoc(members string) string {
	return `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"` + withComma(members) + `}`
}

func withComma(members string) string {
	if members == "" {
		return ""
	}
	return ", " + members
}

// registerSchemas registers a raw tool with the given schemas into a new
// registry and returns the registry and Register's error.
func registerSchemas(in, out string) (*tools.Registry, error) {
	d := validDecl()
	d.InputSchema, d.OutputSchema = json.RawMessage(in), json.RawMessage(out)
	r := tools.NewRegistry()
	return r, r.Register(rawTool(d))
}

// mustEntry registers a tool with the given schemas, freezes and looks it up.
func mustEntry(t *testing.T, in, out string) *tools.Entry {
	t.Helper()
	r, err := registerSchemas(in, out)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	r.Freeze()
	e, err := r.Lookup(validDecl().ID, "")
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	return e
}

// wantSchemaError checks that err is a *SchemaError for which schema at ptr.
func wantSchemaError(t *testing.T, err error, which, ptr string) *tools.SchemaError {
	t.Helper()
	var se *tools.SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T); want *SchemaError", err, err)
	}
	if se.Schema != which {
		t.Errorf("Schema = %q; want %q (err: %v)", se.Schema, which, err)
	}
	if se.Pointer != ptr {
		t.Errorf("Pointer = %q; want %q (err: %v)", se.Pointer, ptr, err)
	}
	if d := validDecl(); se.Tool != d.Key() {
		t.Errorf("Tool = %q; want %q", se.Tool, d.Key())
	}
	if se.Reason == "" {
		t.Errorf("Reason is empty")
	}
	if !errors.Is(err, tools.ErrInvalidDeclaration) {
		t.Errorf("errors.Is(%v, ErrInvalidDeclaration) = false", err)
	}
	return se
}

func TestRegistry_Register_schemaLint(t *testing.T) {
	const (
		input  = "inputSchema"
		output = "outputSchema"
	)
	tests := []struct {
		name    string
		which   string // the schema under test; the other one is objSchema
		schema  string
		wantPtr string
		ok      bool
	}{
		{name: "conforming", which: input, schema: objSchema, ok: true},
		{name: "schema URL with empty fragment", which: input,
			schema: `{"$schema": "https://json-schema.org/draft/2020-12/schema#", "type": "object"}`, ok: true},
		{name: "object without properties", which: input, schema: schemaDoc(""), ok: true},
		{name: "empty required list", which: input,
			schema: schemaDoc(`"properties": {"a": {"type": "string", "description": "a"}}, "required": []`), ok: true},
		{name: "output of non-object type", which: output,
			schema: `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"}`, ok: true},

		{name: "missing $schema", which: input,
			schema:  `{"type": "object", "properties": {}, "required": []}`,
			wantPtr: "/$schema"},
		{name: "missing $schema in output", which: output,
			schema:  `{"type": "object"}`,
			wantPtr: "/$schema"},
		{name: "draft-07", which: input,
			schema:  `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`,
			wantPtr: "/$schema"},
		{name: "draft 2019-09", which: output,
			schema:  `{"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object"}`,
			wantPtr: "/$schema"},
		{name: "$schema not a string", which: input,
			schema:  `{"$schema": 2020, "type": "object"}`,
			wantPtr: "/$schema"},
		{name: "missing root type", which: input,
			schema:  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "properties": {}, "required": []}`,
			wantPtr: "/type"},
		{name: "missing root type in output", which: output,
			schema:  `{"$schema": "https://json-schema.org/draft/2020-12/schema"}`,
			wantPtr: "/type"},
		{name: "input root array", which: input,
			schema:  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array"}`,
			wantPtr: "/type"},
		{name: "input root type list", which: input,
			schema:  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": ["object", "null"]}`,
			wantPtr: "/type"},
		{name: "property without type", which: input,
			schema:  schemaDoc(`"properties": {"x": {"description": "x"}}, "required": []`),
			wantPtr: "/properties/x/type"},
		{name: "property without description", which: input,
			schema:  schemaDoc(`"properties": {"x": {"type": "string"}}, "required": []`),
			wantPtr: "/properties/x/description"},
		{name: "property with blank description", which: output,
			schema:  schemaDoc(`"properties": {"x": {"type": "string", "description": "  "}}, "required": []`),
			wantPtr: "/properties/x/description"},
		{name: "property description not a string", which: input,
			schema:  schemaDoc(`"properties": {"x": {"type": "string", "description": 1}}, "required": []`),
			wantPtr: "/properties/x/description"},
		{name: "first offending property in name order", which: input,
			schema:  schemaDoc(`"properties": {"b": {"type": "string"}, "a": {"description": "a"}}, "required": []`),
			wantPtr: "/properties/a/type"},
		{name: "properties without required", which: input,
			schema:  schemaDoc(`"properties": {"x": {"type": "string", "description": "x"}}`),
			wantPtr: "/required"},
		{name: "properties not an object", which: input,
			schema:  schemaDoc(`"properties": [], "required": []`),
			wantPtr: "/properties"},
		{name: "property schema not an object", which: input,
			schema:  schemaDoc(`"properties": {"x": true}, "required": []`),
			wantPtr: "/properties/x"},
		{name: "nested property without description", which: input,
			schema: schemaDoc(`"properties": {"a": {"type": "object", "description": "a",
				"properties": {"b": {"type": "string"}}, "required": []}}, "required": []`),
			wantPtr: "/properties/a/properties/b/description"},
		{name: "nested properties without required", which: output,
			schema: schemaDoc(`"properties": {"a": {"type": "object", "description": "a",
				"properties": {"b": {"type": "string", "description": "b"}}}}, "required": []`),
			wantPtr: "/properties/a/required"},
		{name: "deeply nested", which: input,
			schema: schemaDoc(`"properties": {"a": {"type": "object", "description": "a", "required": [],
				"properties": {"b": {"type": "object", "description": "b", "required": [],
					"properties": {"c": {"description": "c"}}}}}}, "required": []`),
			wantPtr: "/properties/a/properties/b/properties/c/type"},
		{name: "inside items", which: input,
			schema: schemaDoc(`"properties": {"list": {"type": "array", "description": "l",
				"items": {"type": "object", "properties": {"b": {"type": "string"}}, "required": []}}}, "required": []`),
			wantPtr: "/properties/list/items/properties/b/description"},
		{name: "inside prefixItems", which: output,
			schema: `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
				"prefixItems": [{"type": "string"}, {"type": "object", "properties": {"b": {"type": "string"}}, "required": []}]}`,
			wantPtr: "/prefixItems/1/properties/b/description"},
		{name: "inside $defs", which: input,
			schema:  schemaDoc(`"$defs": {"thing": {"type": "object", "properties": {"c": {"type": "string"}}, "required": []}}`),
			wantPtr: "/$defs/thing/properties/c/description"},
		{name: "inside anyOf", which: input,
			schema: schemaDoc(`"properties": {"v": {"type": ["string", "object"], "description": "v",
				"anyOf": [{"type": "string"}, {"type": "object", "properties": {"d": {"type": "string"}}, "required": []}]}}, "required": []`),
			wantPtr: "/properties/v/anyOf/1/properties/d/description"},
		{name: "inside oneOf without required", which: input,
			schema:  schemaDoc(`"oneOf": [{"properties": {"d": {"type": "string", "description": "d"}}}]`),
			wantPtr: "/oneOf/0/required"},
		{name: "inside additionalProperties", which: input,
			schema:  schemaDoc(`"additionalProperties": {"type": "object", "properties": {"e": {"type": "string"}}, "required": []}`),
			wantPtr: "/additionalProperties/properties/e/description"},
		{name: "inside not", which: input,
			schema:  schemaDoc(`"not": {"properties": {"e": {"type": "string", "description": "e"}}}`),
			wantPtr: "/not/required"},
		{name: "slash in property name", which: input,
			schema:  schemaDoc(`"properties": {"a/b": {"type": "string"}}, "required": []`),
			wantPtr: "/properties/a~1b/description"},
		{name: "tilde in property name", which: input,
			schema:  schemaDoc(`"properties": {"m~n": {"type": "string"}}, "required": []`),
			wantPtr: "/properties/m~0n/description"},
		{name: "tilde then slash", which: input,
			schema:  schemaDoc(`"properties": {"~1": {"description": "x"}}, "required": []`),
			wantPtr: "/properties/~01/type"},
		{name: "slash in $defs name", which: input,
			schema:  schemaDoc(`"$defs": {"a/b~c": {"properties": {"x": {"type": "string"}}, "required": []}}`),
			wantPtr: "/$defs/a~1b~0c/properties/x/description"},
		{name: "not JSON", which: input, schema: `{"$schema": `, wantPtr: ""},
		{name: "not UTF-8", which: input, schema: "{\"$schema\": \"\xff\"}", wantPtr: ""},
		{name: "trailing data", which: output, schema: objSchema + ` {}`, wantPtr: ""},
		{name: "not an object", which: input, schema: `[]`, wantPtr: ""},
		{name: "boolean schema", which: output, schema: `true`, wantPtr: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out := tt.schema, objSchema
			if tt.which == output {
				in, out = objSchema, tt.schema
			}
			r, err := registerSchemas(in, out)
			if tt.ok {
				if err != nil {
					t.Fatalf("Register = %v; want nil", err)
				}
				return
			}
			wantSchemaError(t, err, tt.which, tt.wantPtr)
			if n := len(r.Entries()); n != 0 {
				t.Errorf("a refused tool was added: %d entries", n)
			}
		})
	}
}

func TestRegistry_Register_invalidJSONSchema(t *testing.T) {
	// These pass the RFC 6.3 lint but are not valid JSON Schema documents;
	// the compiler must refuse them.
	tests := []struct {
		name    string
		which   string
		schema  string
		wantPtr string
	}{
		{name: "root type is a number", which: "outputSchema",
			schema:  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": 5}`,
			wantPtr: "/type"},
		{name: "root type unknown", which: "outputSchema",
			schema:  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "strin"}`,
			wantPtr: "/type"},
		{name: "property type is a number", which: "inputSchema",
			schema:  schemaDoc(`"properties": {"x": {"type": 5, "description": "x"}}, "required": []`),
			wantPtr: "/properties/x/type"},
		{name: "minimum is a string", which: "inputSchema",
			schema:  schemaDoc(`"properties": {"x": {"type": "number", "description": "x", "minimum": "x"}}, "required": []`),
			wantPtr: "/properties/x/minimum"},
		{name: "required is a string", which: "inputSchema",
			schema:  schemaDoc(`"properties": {"x": {"type": "string", "description": "x"}}, "required": "x"`),
			wantPtr: "/required"},
		{name: "bad pattern", which: "inputSchema",
			schema:  schemaDoc(`"properties": {"x": {"type": "string", "description": "x", "pattern": "("}}, "required": []`),
			wantPtr: "/properties/x/pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out := tt.schema, objSchema
			if tt.which == "outputSchema" {
				in, out = objSchema, tt.schema
			}
			_, err := registerSchemas(in, out)
			se := wantSchemaError(t, err, tt.which, tt.wantPtr)
			t.Logf("Register: %v", err)
			if strings.Contains(se.Reason, "toolgate:///") {
				t.Errorf("Reason leaks the compiler's internal URL: %q", se.Reason)
			}
		})
	}
}

// forbidGlobalLoader makes the jsonschema package's global loader fail the
// test if anything falls back to it.
func forbidGlobalLoader(t *testing.T) {
	t.Helper()
	saved := jsonschema.LoadURL
	t.Cleanup(func() { jsonschema.LoadURL = saved })
	jsonschema.LoadURL = func(s string) (io.ReadCloser, error) {
		t.Errorf("the global jsonschema loader was asked for %s", s)
		return nil, errors.New("forbidden in tests")
	}
}

func TestRegistry_Register_noLoading(t *testing.T) {
	forbidGlobalLoader(t)

	// A schema file the compiler could read if it were allowed to: were it
	// loaded, every $ref below would compile.
	dir := t.TempDir()
	local := filepath.Join(dir, "s.json")
	if err := os.WriteFile(local, []byte(`{"type": "string"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.json"), []byte(`{"type": "string"}`), 0o644); err != nil {
		t.Fatal(err)
	}

	prop := func(ref string) string {
		return schemaDoc(`"properties": {"p": {"type": "string", "description": "p", "$ref": ` + strconvQuote(ref) + `}}, "required": []`)
	}
	tests := []struct {
		name   string
		schema string
	}{
		{"https", prop("https://example.com/s.json")},
		{"http", prop("http://127.0.0.1:1/s.json")},
		{"file passwd", prop("file:///etc/passwd")},
		{"file existing schema", prop("file://" + filepath.ToSlash(local))},
		{"relative", prop("other.json")},
		{"relative with fragment", prop("other.json#/$defs/x")},
		{"absolute path", prop(filepath.ToSlash(local))},
		{"relative to $id", `{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "file://` + filepath.ToSlash(dir) + `/root.json",
			"type": "object", "properties": {"p": {"type": "string", "description": "p", "$ref": "s.json"}}, "required": []}`},
		{"root $ref", `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "$ref": "https://example.com/s.json"}`},
		{"dynamicRef", `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "$dynamicRef": "https://example.com/s.json#meta"}`},
		{"meta-schema of unknown draft", `{"$schema": "https://example.com/my-meta", "type": "object"}`},
	}
	for _, tt := range tests {
		for _, which := range []string{"inputSchema", "outputSchema"} {
			t.Run(tt.name+"/"+which, func(t *testing.T) {
				in, out := tt.schema, objSchema
				if which == "outputSchema" {
					in, out = objSchema, tt.schema
				}
				r, err := registerSchemas(in, out)
				var se *tools.SchemaError
				if !errors.As(err, &se) {
					t.Fatalf("Register = %v (%T); want *SchemaError", err, err)
				}
				t.Logf("Register: %v", err)
				if !strings.HasPrefix(tt.name, "meta-schema") && !strings.Contains(se.Reason, "loading external schemas is disabled") {
					t.Errorf("Reason = %q; want it to say loading is disabled", se.Reason)
				}
				if strings.Contains(se.Reason, "toolgate:") {
					t.Errorf("Reason leaks the compiler's internal URL: %q", se.Reason)
				}
				if se.Schema != which {
					t.Errorf("Schema = %q; want %q", se.Schema, which)
				}
				if !errors.Is(err, tools.ErrInvalidDeclaration) {
					t.Errorf("errors.Is(ErrInvalidDeclaration) = false")
				}
				if n := len(r.Entries()); n != 0 {
					t.Errorf("a refused tool was added: %d entries", n)
				}
			})
		}
	}
}

func TestRegistry_Register_localRef(t *testing.T) {
	forbidGlobalLoader(t)
	in := schemaDoc(`
		"$defs": {"count": {"type": "integer", "minimum": 0}},
		"properties": {
			"n": {"type": "integer", "description": "n", "$ref": "#/$defs/count"},
			"m": {"type": "integer", "description": "m", "$ref": "#/properties/n"}
		},
		"required": ["n"],
		"additionalProperties": false`)
	e := mustEntry(t, in, objSchema)
	tests := []struct {
		input   string
		wantLoc string // "-" means valid
	}{
		{`{"n": 3}`, "-"},
		{`{"n": 0, "m": 5}`, "-"},
		{`{"n": -1}`, "/n"},
		{`{"n": 1, "m": -1}`, "/m"},
	}
	for _, tt := range tests {
		t.Run(tt.input, func(t *testing.T) {
			err := e.ValidateInput([]byte(tt.input))
			if tt.wantLoc == "-" {
				if err != nil {
					t.Fatalf("ValidateInput = %v; want nil", err)
				}
				return
			}
			ve := wantValueError(t, err, "input", false)
			if !hasLocation(ve, tt.wantLoc) {
				t.Errorf("Problems = %+v; want one at %q", ve.Problems, tt.wantLoc)
			}
		})
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// wantValueError checks that err is a *ValueError for which.
func wantValueError(t *testing.T, err error, which string, malformed bool) *tools.ValueError {
	t.Helper()
	var ve *tools.ValueError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v (%T); want *ValueError", err, err)
	}
	if ve.Which != which {
		t.Errorf("Which = %q; want %q", ve.Which, which)
	}
	if ve.Malformed != malformed {
		t.Errorf("Malformed = %v; want %v (err: %v)", ve.Malformed, malformed, err)
	}
	if len(ve.Problems) == 0 {
		t.Errorf("no Problems")
	}
	for _, p := range ve.Problems {
		if p.Message == "" {
			t.Errorf("Problem at %q has no message", p.Location)
		}
	}
	if !errors.Is(err, tools.ErrInvalidValue) {
		t.Errorf("errors.Is(%v, ErrInvalidValue) = false", err)
	}
	return ve
}

func hasLocation(ve *tools.ValueError, loc string) bool {
	for _, p := range ve.Problems {
		if p.Location == loc {
			return true
		}
	}
	return false
}

// nestedInput exercises nested validation: an array of objects, each closed.
var nestedInput = schemaDoc(`
	"properties": {
		"path": {"type": "string", "description": "a path", "pattern": "^[a-z]+$"},
		"items": {"type": "array", "description": "the items", "maxItems": 3,
			"items": {"type": "object", "additionalProperties": false, "required": ["name", "count"],
				"properties": {
					"name": {"type": "string", "description": "name", "minLength": 1},
					"count": {"type": "integer", "description": "count", "minimum": 0},
					"tags": {"type": "array", "description": "tags", "items": {"type": "string", "maxLength": 3}}
				}}},
		"big": {"type": "integer", "description": "exact", "maximum": 9007199254740992}
	},
	"required": ["path"],
	"additionalProperties": false`)

func TestEntry_ValidateInput(t *testing.T) {
	e := mustEntry(t, nestedInput, objSchema)
	tests := []struct {
		name      string
		input     string
		malformed bool
		wantLoc   string // "-" means valid; "*" means any location
	}{
		{name: "valid", input: `{"path": "abc"}`, wantLoc: "-"},
		{name: "valid nested", input: `{"path": "abc", "items": [{"name": "x", "count": 0, "tags": ["a"]}]}`, wantLoc: "-"},
		{name: "trailing whitespace", input: "{\"path\": \"a\"}\n\t ", wantLoc: "-"},
		{name: "big integer at maximum", input: `{"path": "a", "big": 9007199254740992}`, wantLoc: "-"},

		{name: "empty", input: ``, malformed: true, wantLoc: ""},
		{name: "whitespace only", input: "  \n", malformed: true, wantLoc: ""},
		{name: "truncated", input: `{"path": "a"`, malformed: true, wantLoc: ""},
		{name: "single quotes", input: `{'path': 'a'}`, malformed: true, wantLoc: ""},
		{name: "trailing value", input: `{} {}`, malformed: true, wantLoc: ""},
		{name: "trailing garbage", input: `{"path": "a"}x`, malformed: true, wantLoc: ""},
		{name: "trailing bracket", input: `{"path": "a"}]`, malformed: true, wantLoc: ""},
		{name: "invalid UTF-8 in string", input: "{\"path\": \"a\xff\"}", malformed: true, wantLoc: ""},
		{name: "invalid UTF-8 outside", input: "\xef{\"path\": \"a\"}", malformed: true, wantLoc: ""},
		{name: "NaN", input: `{"path": "a", "big": NaN}`, malformed: true, wantLoc: ""},
		// The same member twice: which one would the tool get?
		{name: "duplicate member", input: `{"path": "safe", "path": "evil"}`, malformed: true, wantLoc: ""},
		{name: "duplicate member, escaped", input: `{"path": "safe", "p\u0061th": "evil"}`, malformed: true, wantLoc: ""},
		{name: "duplicate member, nested", input: `{"path": "a", "items": [{"name": "x", "count": 1, "count": 2}]}`, malformed: true, wantLoc: ""},
		{name: "same name in different objects", input: `{"path": "a", "items": [{"name": "path", "count": 1}, {"name": "x", "count": 1}]}`, wantLoc: "-"},

		{name: "not an object", input: `[]`, wantLoc: ""},
		{name: "null", input: `null`, wantLoc: ""},
		{name: "missing required", input: `{}`, wantLoc: ""},
		{name: "unknown property", input: `{"path": "a", "extra": 1}`, wantLoc: "*"},
		{name: "wrong type", input: `{"path": 5}`, wantLoc: "/path"},
		{name: "pattern", input: `{"path": "a b"}`, wantLoc: "/path"},
		{name: "nested bad field", input: `{"path": "a", "items": [{"name": "x", "count": 1}, {"name": "y", "count": -1}]}`, wantLoc: "/items/1/count"},
		{name: "nested wrong type", input: `{"path": "a", "items": [{"name": 7, "count": 1}]}`, wantLoc: "/items/0/name"},
		{name: "nested missing required", input: `{"path": "a", "items": [{"name": "x"}]}`, wantLoc: "/items/0"},
		{name: "nested unknown property", input: `{"path": "a", "items": [{"name": "x", "count": 1, "evil": true}]}`, wantLoc: "/items/0"},
		{name: "two levels deep", input: `{"path": "a", "items": [{"name": "x", "count": 1, "tags": ["ok", "toolong"]}]}`, wantLoc: "/items/0/tags/1"},
		{name: "too many items", input: `{"path": "a", "items": [{"name": "a", "count": 1}, {"name": "b", "count": 1}, {"name": "c", "count": 1}, {"name": "d", "count": 1}]}`, wantLoc: "/items"},
		{name: "integer given as float", input: `{"path": "a", "items": [{"name": "x", "count": 1.5}]}`, wantLoc: "/items/0/count"},
		// 2^53+1 rounds to 2^53 as a float64; exact numbers must refuse it.
		{name: "big integer over maximum", input: `{"path": "a", "big": 9007199254740993}`, wantLoc: "/big"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.ValidateInput([]byte(tt.input))
			if tt.wantLoc == "-" {
				if err != nil {
					t.Fatalf("ValidateInput(%q) = %v; want nil", tt.input, err)
				}
				return
			}
			ve := wantValueError(t, err, "input", tt.malformed)
			if tt.wantLoc != "*" && !hasLocation(ve, tt.wantLoc) {
				t.Errorf("Problems = %+v; want one at %q", ve.Problems, tt.wantLoc)
			}
			if tt.wantLoc != "" && tt.wantLoc != "*" && !strings.Contains(err.Error(), tt.wantLoc+": ") {
				t.Errorf("Error() = %q does not name the location %q", err.Error(), tt.wantLoc)
			}
		})
	}
}

func TestEntry_ValidateInput_fileReadPattern(t *testing.T) {
	r := tools.NewRegistry()
	if err := r.Register(tools.FileRead()); err != nil {
		t.Fatal(err)
	}
	r.Freeze()
	e, err := r.Lookup("file.read", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		ok   bool
	}{
		{"docs/readme.md", true},
		{"/srv/data/file_1.txt", true},
		{"a-b.c", true},
		{"../etc/passwd", true}, // allowed by the pattern; the filesystem handle confines it
		{"", false},
		{"a b", false},
		{"; rm -rf /", false},
		{"a;rm -rf /", false},
		{"$(id)", false},
		{"`id`", false},
		{"a|b", false},
		{"a&&b", false},
		{"a\nb", false},
		{"a\n", false},
		{"\na", false},
		{"a\x00b", false},
		{"a\\b", false},
		{"~/x", false},
		{"*.txt", false},
		{"café", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			in, _ := json.Marshal(tools.FileReadInput{Path: tt.path})
			err := e.ValidateInput(in)
			if tt.ok {
				if err != nil {
					t.Fatalf("ValidateInput(%s) = %v; want nil", in, err)
				}
				return
			}
			ve := wantValueError(t, err, "input", false)
			if !hasLocation(ve, "/path") {
				t.Errorf("Problems = %+v; want one at /path", ve.Problems)
			}
		})
	}

	t.Run("additional property", func(t *testing.T) {
		err := e.ValidateInput([]byte(`{"path": "a", "mode": "w"}`))
		wantValueError(t, err, "input", false)
	})
	t.Run("path not a string", func(t *testing.T) {
		err := e.ValidateInput([]byte(`{"path": ["a"]}`))
		ve := wantValueError(t, err, "input", false)
		if !hasLocation(ve, "/path") {
			t.Errorf("Problems = %+v; want one at /path", ve.Problems)
		}
	})
}

func TestEntry_ValidateOutput(t *testing.T) {
	r := tools.NewRegistry()
	if err := r.Register(tools.FileRead()); err != nil {
		t.Fatal(err)
	}
	r.Freeze()
	e, err := r.Lookup("file.read", "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		output    string
		malformed bool
		wantLoc   string // "-" means valid
	}{
		{name: "valid", output: `{"content": "hi", "size": 2}`, wantLoc: "-"},
		{name: "empty file", output: `{"content": "", "size": 0}`, wantLoc: "-"},
		{name: "malformed", output: `{"content": "hi", "size": 2`, malformed: true, wantLoc: ""},
		{name: "two values", output: `{"content": "hi", "size": 2} {}`, malformed: true, wantLoc: ""},
		{name: "invalid UTF-8", output: "{\"content\": \"\xc3\", \"size\": 1}", malformed: true, wantLoc: ""},
		{name: "missing size", output: `{"content": "hi"}`, wantLoc: ""},
		{name: "content wrong type", output: `{"content": 1, "size": 1}`, wantLoc: "/content"},
		{name: "size wrong type", output: `{"content": "x", "size": "1"}`, wantLoc: "/size"},
		{name: "extra field", output: `{"content": "x", "size": 1, "path": "/etc/passwd"}`, wantLoc: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.ValidateOutput([]byte(tt.output))
			if tt.wantLoc == "-" {
				if err != nil {
					t.Fatalf("ValidateOutput = %v; want nil", err)
				}
				return
			}
			ve := wantValueError(t, err, "output", tt.malformed)
			if !hasLocation(ve, tt.wantLoc) {
				t.Errorf("Problems = %+v; want one at %q", ve.Problems, tt.wantLoc)
			}
			if !strings.HasPrefix(err.Error(), "tools: output ") {
				t.Errorf("Error() = %q; want it to say it is about the output", err.Error())
			}
		})
	}
}

func TestValueError_Error(t *testing.T) {
	tests := []struct {
		err  tools.ValueError
		want string
	}{
		{tools.ValueError{Which: "input", Malformed: true, Problems: []tools.Problem{{Message: "unexpected EOF"}}},
			"tools: input is not valid JSON: unexpected EOF"},
		{tools.ValueError{Which: "output", Problems: []tools.Problem{{Location: "/a", Message: "bad"}, {Message: "worse"}}},
			"tools: output does not match schema: /a: bad; worse"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestSchemaError_Error(t *testing.T) {
	tests := []struct {
		err  tools.SchemaError
		want string
	}{
		{tools.SchemaError{Tool: "a@1.0.0", Schema: "inputSchema", Pointer: "/properties/x/type", Reason: "missing"},
			"tools: inputSchema of a@1.0.0 at /properties/x/type: missing"},
		{tools.SchemaError{Tool: "a@1.0.0", Schema: "outputSchema", Reason: "not valid JSON"},
			"tools: outputSchema of a@1.0.0 at (root): not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q; want %q", got, tt.want)
			}
		})
	}
}

var fileReadPathRE = regexp.MustCompile(`^[a-zA-Z0-9/_.-]+$`)

// FuzzEntry_ValidateInput checks the input decoder and validator against
// arbitrary bytes: no panic; a refusal is a *ValueError that is Malformed
// exactly when the bytes are not one UTF-8 JSON value; and an accepted
// file.read input always decodes into the tool's Go type and satisfies the
// path pattern.
func FuzzEntry_ValidateInput(f *testing.F) {
	for _, seed := range []string{
		`{"path": "a.txt"}`,
		`{"path": "a b"}`,
		`{"path": "; rm -rf /"}`,
		`{"path": "a\nb"}`,
		`{"path": "a", "extra": 1}`,
		`{"path": "a", "items": [{"name": "x", "count": 1, "tags": ["a"]}], "big": 9007199254740993}`,
		`{"path": "\u00e9"}`,
		`{} {}`,
		`{"path": "a"}x`,
		"{\"path\": \"\xff\"}",
		`[]`,
		`null`,
		`1e999`,
		`"`,
		``,
	} {
		f.Add([]byte(seed))
	}
	r := tools.NewRegistry()
	if err := r.Register(tools.FileRead()); err != nil {
		f.Fatal(err)
	}
	d := withVersion("nested", "1.0.0")
	d.InputSchema = json.RawMessage(nestedInput)
	if err := r.Register(rawTool(d)); err != nil {
		f.Fatal(err)
	}
	r.Freeze()
	fileRead, err := r.Lookup("file.read", "")
	if err != nil {
		f.Fatal(err)
	}
	nested, err := r.Lookup("nested", "")
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		wellFormed := utf8.Valid(data) && json.Valid(data)
		for _, e := range []*tools.Entry{fileRead, nested} {
			err := e.ValidateInput(data)
			if err == nil {
				if !wellFormed {
					t.Fatalf("accepted input that is not one UTF-8 JSON value: %q", data)
				}
				continue
			}
			var ve *tools.ValueError
			if !errors.As(err, &ve) {
				t.Fatalf("ValidateInput(%q) = %v (%T); want *ValueError", data, err, err)
			}
			if ve.Which != "input" || len(ve.Problems) == 0 || !errors.Is(err, tools.ErrInvalidValue) {
				t.Fatalf("ValidateInput(%q) = %#v", data, ve)
			}
			if ve.Malformed == wellFormed {
				t.Fatalf("ValidateInput(%q): Malformed = %v for input json.Valid considers %v", data, ve.Malformed, wellFormed)
			}
			_ = err.Error()
		}

		if fileRead.ValidateInput(data) != nil {
			return
		}
		var in tools.FileReadInput
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			t.Fatalf("accepted %q but it does not decode into FileReadInput: %v", data, err)
		}
		if !fileReadPathRE.MatchString(in.Path) {
			t.Fatalf("accepted path %q that does not match the pattern", in.Path)
		}
		// With no grants, the typed tool decodes its input and is then
		// refused access; it never fails on decoding.
		if _, err := fileRead.Tool().Execute(t.Context(), &tools.Env{}, data); !errors.Is(err, tools.ErrAccessDenied) {
			t.Fatalf("Execute(%q) = %v; want ErrAccessDenied", data, err)
		}
	})
}

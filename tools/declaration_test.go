package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// Shared fixtures for the tools_test package.

// objSchema is a minimal RFC-0001 6.3 conforming object schema with one
// string property "msg".
const objSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"msg": {"type": "string", "description": "a message"}},
  "required": ["msg"],
  "additionalProperties": false
}`

// validDecl returns a declaration that passes Validate and Register.
func validDecl() tools.Declaration {
	return tools.Declaration{
		ID:                   "test.echo",
		Version:              "1.0.0",
		Name:                 "Echo",
		Description:          "Echoes its input",
		InputSchema:          json.RawMessage(objSchema),
		OutputSchema:         json.RawMessage(objSchema),
		RequiredCapabilities: []capability.Capability{{Name: "filesystem.read"}},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: time.Second},
		Deterministic:        true,
		Idempotent:           true,
	}
}

// echo is a RawFunc returning its input.
func echo(_ context.Context, _ *tools.Env, in json.RawMessage) (json.RawMessage, error) {
	return in, nil
}

// rawTool builds a raw tool from decl.
func rawTool(decl tools.Declaration) tools.Tool { return tools.NewRaw(decl, echo) }

// withVersion returns validDecl with id and version replaced.
func withVersion(id, version string) tools.Declaration {
	d := validDecl()
	d.ID, d.Version = id, version
	return d
}

// compactJSON returns b with insignificant whitespace removed.
func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compact %q: %v", b, err)
	}
	return buf.String()
}

func TestDeclaration_Validate(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(d *tools.Declaration)
		wantField string // "" means valid
	}{
		{name: "valid", mutate: func(d *tools.Declaration) {}},
		{name: "id with separators", mutate: func(d *tools.Declaration) { d.ID = "a1.b_c-d" }},
		{name: "id empty", mutate: func(d *tools.Declaration) { d.ID = "" }, wantField: "id"},
		{name: "id uppercase", mutate: func(d *tools.Declaration) { d.ID = "File.read" }, wantField: "id"},
		{name: "id leading digit", mutate: func(d *tools.Declaration) { d.ID = "1file" }, wantField: "id"},
		{name: "id double dot", mutate: func(d *tools.Declaration) { d.ID = "file..read" }, wantField: "id"},
		{name: "id trailing dot", mutate: func(d *tools.Declaration) { d.ID = "file." }, wantField: "id"},
		{name: "id space", mutate: func(d *tools.Declaration) { d.ID = "file read" }, wantField: "id"},
		{name: "id with at", mutate: func(d *tools.Declaration) { d.ID = "file@read" }, wantField: "id"},
		{name: "version 1.0.0", mutate: func(d *tools.Declaration) { d.Version = "1.0.0" }},
		{name: "version prerelease and build", mutate: func(d *tools.Declaration) { d.Version = "1.2.3-rc.1+build.5" }},
		{name: "version 0.0.1", mutate: func(d *tools.Declaration) { d.Version = "0.0.1" }},
		{name: "version 1", mutate: func(d *tools.Declaration) { d.Version = "1" }, wantField: "version"},
		{name: "version 1.0", mutate: func(d *tools.Declaration) { d.Version = "1.0" }, wantField: "version"},
		{name: "version v1.0.0", mutate: func(d *tools.Declaration) { d.Version = "v1.0.0" }, wantField: "version"},
		{name: "version 01.0.0", mutate: func(d *tools.Declaration) { d.Version = "01.0.0" }, wantField: "version"},
		{name: "version empty", mutate: func(d *tools.Declaration) { d.Version = "" }, wantField: "version"},
		{name: "version four parts", mutate: func(d *tools.Declaration) { d.Version = "1.0.0.0" }, wantField: "version"},
		{name: "version 1.0+build", mutate: func(d *tools.Declaration) { d.Version = "1.0+build" }, wantField: "version"},
		{name: "version latest", mutate: func(d *tools.Declaration) { d.Version = "latest" }, wantField: "version"},
		{name: "name empty", mutate: func(d *tools.Declaration) { d.Name = "" }, wantField: "name"},
		{name: "name blank", mutate: func(d *tools.Declaration) { d.Name = " \t" }, wantField: "name"},
		{name: "description empty", mutate: func(d *tools.Declaration) { d.Description = "" }, wantField: "description"},
		{name: "description blank", mutate: func(d *tools.Declaration) { d.Description = "\n" }, wantField: "description"},
		{name: "input schema missing", mutate: func(d *tools.Declaration) { d.InputSchema = nil }, wantField: "inputSchema"},
		{name: "output schema missing", mutate: func(d *tools.Declaration) { d.OutputSchema = nil }, wantField: "outputSchema"},
		{name: "max execution time zero", mutate: func(d *tools.Declaration) { d.ResourceLimits.MaxExecutionTime = 0 }, wantField: "resourceLimits.maxExecutionTime"},
		{name: "max execution time negative", mutate: func(d *tools.Declaration) { d.ResourceLimits.MaxExecutionTime = -time.Second }, wantField: "resourceLimits.maxExecutionTime"},
		{name: "max memory negative", mutate: func(d *tools.Declaration) { d.ResourceLimits.MaxMemory = -1 }, wantField: "resourceLimits.maxMemory"},
		{name: "max file size negative", mutate: func(d *tools.Declaration) { d.ResourceLimits.MaxFileSize = -1 }, wantField: "resourceLimits.maxFileSize"},
		{name: "max output bytes negative", mutate: func(d *tools.Declaration) { d.ResourceLimits.MaxOutputBytes = -1 }, wantField: "resourceLimits.maxOutputBytes"},
		{name: "zero sizes mean unlimited", mutate: func(d *tools.Declaration) {
			d.ResourceLimits = tools.ResourceLimits{MaxExecutionTime: time.Millisecond}
		}},
		{name: "no capabilities", mutate: func(d *tools.Declaration) { d.RequiredCapabilities = nil }},
		{name: "scoped capability", mutate: func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{capability.MustParse("filesystem.read:/srv/data")}
		}},
		{name: "capability empty name", mutate: func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{{Name: "filesystem.read"}, {}}
		}, wantField: "requiredCapabilities[1]"},
		{name: "capability bad name", mutate: func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{{Name: "File System"}}
		}, wantField: "requiredCapabilities[0]"},
		{name: "capability scope with dotdot", mutate: func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{{Name: "filesystem.read", Scope: "/srv/../etc"}}
		}, wantField: "requiredCapabilities[0]"},
		{name: "input capability", mutate: func(d *tools.Declaration) {
			d.InputCapabilities = []tools.InputCapability{{Name: "filesystem.read", ScopeFrom: "path"}}
		}},
		{name: "input capability with a scope", mutate: func(d *tools.Declaration) {
			d.InputCapabilities = []tools.InputCapability{{Name: "filesystem.read:/srv", ScopeFrom: "path"}}
		}, wantField: "inputCapabilities[0].name"},
		{name: "input capability bad name", mutate: func(d *tools.Declaration) {
			d.InputCapabilities = []tools.InputCapability{{Name: "File Read", ScopeFrom: "path"}}
		}, wantField: "inputCapabilities[0].name"},
		{name: "input capability without a field", mutate: func(d *tools.Declaration) {
			d.InputCapabilities = []tools.InputCapability{{Name: "filesystem.read"}}
		}, wantField: "inputCapabilities[0].scopeFrom"},
		{name: "input capability twice", mutate: func(d *tools.Declaration) {
			d.InputCapabilities = []tools.InputCapability{{Name: "filesystem.read", ScopeFrom: "path"}, {Name: "filesystem.read", ScopeFrom: "path"}}
		}, wantField: "inputCapabilities[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := validDecl()
			tt.mutate(&d)
			err := d.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			var de *tools.DeclarationError
			if !errors.As(err, &de) {
				t.Fatalf("Validate() = %v (%T); want *DeclarationError", err, err)
			}
			if de.Field != tt.wantField {
				t.Errorf("Field = %q; want %q (err: %v)", de.Field, tt.wantField, err)
			}
			if de.Tool != d.Key() {
				t.Errorf("Tool = %q; want %q", de.Tool, d.Key())
			}
			if de.Reason == "" {
				t.Errorf("Reason is empty")
			}
			if !errors.Is(err, tools.ErrInvalidDeclaration) {
				t.Errorf("errors.Is(%v, ErrInvalidDeclaration) = false", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("Error() = %q does not name the field %q", err.Error(), tt.wantField)
			}
		})
	}
}

func TestIsSemver(t *testing.T) {
	tests := []struct {
		v    string
		want bool
	}{
		{"1.0.0", true},
		{"0.0.0", true},
		{"10.20.30", true},
		{"1.2.3-rc.1+build.5", true},
		{"1.0.0-alpha", true},
		{"1.0.0+20130313144700", true},
		{"", false},
		{"1", false},
		{"1.0", false},
		{"v1.0.0", false},
		{"V1.0.0", false},
		{"01.0.0", false},
		{"1.01.0", false},
		{"1.0.0-01", false},
		{"1.0.0.0", false},
		{"1.0.0-", false},
		{" 1.0.0", false},
		{"1.0.0 ", false},
		{"1.0-rc.1", false},
		{"1.0+build", false},
	}
	for _, tt := range tests {
		t.Run(tt.v, func(t *testing.T) {
			if got := tools.IsSemver(tt.v); got != tt.want {
				t.Errorf("IsSemver(%q) = %v; want %v", tt.v, got, tt.want)
			}
		})
	}
}

func TestDeclaration_Key(t *testing.T) {
	d := withVersion("file.read", "1.2.3-rc.1")
	if got, want := d.Key(), "file.read@1.2.3-rc.1"; got != want {
		t.Errorf("Key() = %q; want %q", got, want)
	}
}

func TestResourceLimits_JSON(t *testing.T) {
	tests := []struct {
		name   string
		json   string
		limits tools.ResourceLimits
	}{
		{
			name:   "appendix A",
			json:   `{"maxExecutionTime":5000,"maxMemory":10485760,"maxFileSize":1048576}`,
			limits: tools.ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 10485760, MaxFileSize: 1048576},
		},
		{
			name:   "all fields",
			json:   `{"maxExecutionTime":1500,"maxMemory":1,"maxFileSize":2,"maxOutputBytes":3}`,
			limits: tools.ResourceLimits{MaxExecutionTime: 1500 * time.Millisecond, MaxMemory: 1, MaxFileSize: 2, MaxOutputBytes: 3},
		},
		{
			name:   "only time",
			json:   `{"maxExecutionTime":1}`,
			limits: tools.ResourceLimits{MaxExecutionTime: time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got tools.ResourceLimits
			if err := json.Unmarshal([]byte(tt.json), &got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if got != tt.limits {
				t.Errorf("Unmarshal(%s) = %+v; want %+v", tt.json, got, tt.limits)
			}
			b, err := json.Marshal(tt.limits)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if string(b) != tt.json {
				t.Errorf("Marshal(%+v) = %s; want %s", tt.limits, b, tt.json)
			}
		})
	}

	t.Run("invalid", func(t *testing.T) {
		for _, in := range []string{`{"maxExecutionTime":"5s"}`, `[]`, `{"maxMemory":1.5}`} {
			var l tools.ResourceLimits
			if err := json.Unmarshal([]byte(in), &l); err == nil {
				t.Errorf("Unmarshal(%s) = %+v, nil; want an error", in, l)
			}
		}
	})
}

// appendixAWithPath is appendix A as the built-in file.read@1.0.0
// declares it: with one member added, the input capability that decides
// its path before the call runs (inputCapabilities, an extension of
// RFC-0001 4.1; see tools.Declaration.Decide).
func appendixAWithPath(t *testing.T) []byte {
	t.Helper()
	const after = `"requiredCapabilities": ["filesystem.read"],`
	if !strings.Contains(appendixA, after) {
		t.Fatal("appendix A has no requiredCapabilities line")
	}
	return []byte(strings.Replace(appendixA, after, after+`"inputCapabilities": [{"name": "filesystem.read", "scopeFrom": "path"}],`, 1))
}

// appendixA is the example declaration of RFC-0001 appendix A, in JSON.
const appendixA = `{
  "id": "file.read",
  "version": "1.0.0",
  "name": "File Reader",
  "description": "Reads file contents from filesystem",
  "inputSchema": {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
      "path": {"type": "string", "description": "File path to read", "pattern": "^[a-zA-Z0-9/_.-]+$"}
    },
    "required": ["path"],
    "additionalProperties": false
  },
  "outputSchema": {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
      "content": {"type": "string", "description": "File contents"},
      "size": {"type": "number", "description": "File size in bytes"}
    },
    "required": ["content", "size"],
    "additionalProperties": false
  },
  "requiredCapabilities": ["filesystem.read"],
  "resourceLimits": {"maxExecutionTime": 5000, "maxMemory": 10485760, "maxFileSize": 1048576},
  "deterministic": true,
  "idempotent": true
}`

func TestDeclaration_JSON(t *testing.T) {
	var d tools.Declaration
	if err := json.Unmarshal([]byte(appendixA), &d); err != nil {
		t.Fatalf("Unmarshal appendix A: %v", err)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := tools.Declaration{
		ID:                   "file.read",
		Version:              "1.0.0",
		Name:                 "File Reader",
		Description:          "Reads file contents from filesystem",
		RequiredCapabilities: []capability.Capability{{Name: "filesystem.read"}},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 10 << 20, MaxFileSize: 1 << 20},
		Deterministic:        true,
		Idempotent:           true,
	}
	got := d
	got.InputSchema, got.OutputSchema = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v;\nwant %+v", got, want)
	}
	if len(d.InputSchema) == 0 || len(d.OutputSchema) == 0 {
		t.Fatalf("schemas not kept: in %q out %q", d.InputSchema, d.OutputSchema)
	}

	// Encoding and decoding again gives the same declaration.
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if got, want := compactJSON(t, b), compactJSON(t, []byte(appendixA)); got != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", got, want)
	}
	var again tools.Declaration
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatalf("Unmarshal again: %v", err)
	}
	b2, err := json.Marshal(again)
	if err != nil {
		t.Fatalf("Marshal again: %v", err)
	}
	if !bytes.Equal(b2, b) {
		t.Errorf("round trip changed the declaration:\n%s\nwant\n%s", b2, b)
	}

	// And it registers.
	r := tools.NewRegistry()
	if err := r.Register(rawTool(d)); err != nil {
		t.Fatalf("Register(appendix A): %v", err)
	}
}

// An input capability names a string property of the input schema:
// Register refuses one that does not, so a declaration cannot require a
// scope its input can never give.
func TestRegister_InputCapabilityField(t *testing.T) {
	schema := `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "a path"},
    "n": {"type": "integer", "description": "a number"}
  },
  "required": [],
  "additionalProperties": false
}`
	for _, tc := range []struct {
		field string
		ok    bool
	}{{"path", true}, {"n", false}, {"missing", false}} {
		d := validDecl()
		d.InputSchema = json.RawMessage(schema)
		d.InputCapabilities = []tools.InputCapability{{Name: "filesystem.read", ScopeFrom: tc.field}}
		err := tools.NewRegistry().Register(rawTool(d))
		var de *tools.DeclarationError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.field, err)
		case !tc.ok && (!errors.As(err, &de) || de.Field != "inputCapabilities[0].scopeFrom" || !strings.Contains(err.Error(), tc.field)):
			t.Errorf("%s: err = %v; want a *DeclarationError naming inputCapabilities[0].scopeFrom", tc.field, err)
		}
	}
}

// RequiredFor: the declared capabilities, then each input capability
// whose field the input gives, a filesystem path made absolute from the
// working directory and cleaned; reach names the input capabilities
// without their scope; MayRequire lists every name a call may need.
func TestDeclaration_RequiredFor(t *testing.T) {
	d := validDecl()
	d.RequiredCapabilities = []capability.Capability{capability.MustParse("process.exec:git")}
	d.InputCapabilities = []tools.InputCapability{{Name: "filesystem.read", ScopeFrom: "cwd"}, {Name: "state.write", ScopeFrom: "ns"}}
	for _, tc := range []struct {
		in            string
		required, rch []string
		err           string
	}{
		{`{}`, []string{"process.exec:git"}, []string{"process.exec:git"}, ""},
		{`{"cwd": ""}`, []string{"process.exec:git"}, []string{"process.exec:git"}, ""},
		{`{"cwd": "sub/../repo"}`, []string{"process.exec:git", "filesystem.read:/work/repo"}, []string{"process.exec:git", "filesystem.read"}, ""},
		{`{"cwd": "/srv/a b/ü"}`, []string{"process.exec:git", "filesystem.read:/srv/a b/ü"}, []string{"process.exec:git", "filesystem.read"}, ""},
		{`{"cwd": "/srv", "ns": "orders"}`, []string{"process.exec:git", "filesystem.read:/srv", "state.write:orders"}, []string{"process.exec:git", "filesystem.read", "state.write"}, ""},
		{`{"ns": "a/../b"}`, nil, nil, "cannot be a scope of state.write"},
		{`{"ns": 3}`, nil, nil, "must be a string"},
	} {
		required, reach, err := d.RequiredFor(json.RawMessage(tc.in), "/work")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v; want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(capability.Strings(required), tc.required) || !slices.Equal(capability.Strings(reach), tc.rch) {
			t.Errorf("%s: required %q, reach %q, %v; want %q, %q", tc.in, capability.Strings(required), capability.Strings(reach), err, tc.required, tc.rch)
		}
	}
	if got := capability.Strings(d.MayRequire()); !slices.Equal(got, []string{"process.exec:git", "filesystem.read", "state.write"}) {
		t.Errorf("MayRequire = %q", got)
	}
	if got := d.InputCapabilities[0].String(); got != "filesystem.read:{cwd}" {
		t.Errorf("String = %q", got)
	}
}

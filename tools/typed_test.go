package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/tools"
)

// props builds an object schema from property names, each a string with a
// description, none required.
func props(names ...string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconvQuote(n) + `: {"type": ["string", "integer", "object", "boolean"], "description": "d"}`)
	}
	return schemaDoc(`"properties": {` + b.String() + `}, "required": [], "additionalProperties": false`)
}

type greetIn struct {
	Name  string `json:"name"`
	Times int    `json:"times,omitempty"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

func greetDecl() tools.Declaration {
	d := withVersion("greet", "1.0.0")
	d.InputSchema = json.RawMessage(schemaDoc(`"properties": {
		"name": {"type": "string", "description": "who", "minLength": 1},
		"times": {"type": "integer", "description": "how often", "minimum": 1}
	}, "required": ["name"], "additionalProperties": false`))
	d.OutputSchema = json.RawMessage(schemaDoc(`"properties": {
		"greeting": {"type": "string", "description": "the greeting"}
	}, "required": ["greeting"], "additionalProperties": false`))
	return d
}

func greet(_ context.Context, _ *tools.Env, in greetIn) (greetOut, error) {
	if in.Name == "fail" {
		return greetOut{}, errBoom
	}
	n := max(in.Times, 1)
	return greetOut{Greeting: strings.Repeat("hello "+in.Name+"! ", n)}, nil
}

var errBoom = errors.New("boom")

func TestNewTyped_Execute(t *testing.T) {
	r := frozen(t, tools.NewTyped(greetDecl(), greet))
	e, err := r.Lookup("greet", "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		input   string
		want    string
		wantErr bool
		is      error
	}{
		{name: "required only", input: `{"name": "ann"}`, want: `{"greeting":"hello ann! "}`},
		{name: "all fields", input: `{"name": "bo", "times": 2}`, want: `{"greeting":"hello bo! hello bo! "}`},
		{name: "body error", input: `{"name": "fail"}`, wantErr: true, is: errBoom},
		{name: "unknown field", input: `{"name": "x", "extra": 1}`, wantErr: true},
		{name: "wrong type", input: `{"name": 5}`, wantErr: true},
		{name: "not JSON", input: `{`, wantErr: true},
		// The schema admits any integer; the Go field is an int.
		{name: "too big for its Go type", input: `{"name": "x", "times": 99999999999999999999}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := e.Tool().Execute(t.Context(), &tools.Env{}, json.RawMessage(tt.input))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Execute(%s) = %s, nil; want an error", tt.input, out)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("Execute error = %v; want it to wrap %v", err, tt.is)
				}
				// Said in the input's terms: no Go type names.
				if msg := err.Error(); strings.Contains(msg, "greetIn") || strings.Contains(msg, "int64") || strings.Contains(msg, "Go ") {
					t.Errorf("Execute error names Go types: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Execute(%s): %v", tt.input, err)
			}
			if string(out) != tt.want {
				t.Errorf("Execute(%s) = %s; want %s", tt.input, out, tt.want)
			}
			if err := e.ValidateOutput(out); err != nil {
				t.Errorf("output does not match its schema: %v", err)
			}
		})
	}
}

// Types for the schema/struct agreement checks.
type (
	Base struct {
		ID string `json:"id"`
	}
	base struct {
		Hidden string `json:"hidden"`
	}
	Label string

	withEmbedded struct {
		Base
		Name     string `json:"name"`
		Secret   string `json:"-"`
		internal int
	}
	withEmbeddedPtr struct {
		*Base
		Name string `json:"name"`
	}
	withTaggedEmbedded struct {
		Base `json:"base"`
	}
	withUnexportedEmbedded struct {
		base
		Name string `json:"name"`
	}
	withSkippedEmbedded struct {
		Base `json:"-"`
		Name string `json:"name"`
	}
	withEmbeddedNonStruct struct {
		Label
	}
	withUntagged struct {
		Count int
		Opt   string `json:",omitempty"`
		Dash  string `json:"-,"`
	}
	twoFields struct {
		A string `json:"a"`
		B string `json:"b"`
	}
	slashField struct {
		A string `json:"a"`
	}
)

// registerTyped registers NewTyped[In, Out] and reports Register's error.
func registerTyped[In, Out any](in, out string) error {
	d := withVersion("typed.tool", "1.0.0")
	d.InputSchema, d.OutputSchema = json.RawMessage(in), json.RawMessage(out)
	r := tools.NewRegistry()
	fn := func(context.Context, *tools.Env, In) (Out, error) { var o Out; return o, nil }
	return r.Register(tools.NewTyped(d, fn))
}

func TestNewTyped_Register(t *testing.T) {
	outSchema := props("greeting")
	tests := []struct {
		name    string
		reg     func() error
		wantErr bool
		which   string
		ptr     string
	}{
		{name: "agree", reg: func() error { return registerTyped[greetIn, greetOut](props("name", "times"), outSchema) }},
		{name: "pointer types", reg: func() error { return registerTyped[*greetIn, *greetOut](props("name", "times"), outSchema) }},
		{name: "struct field not in input schema", reg: func() error { return registerTyped[greetIn, greetOut](props("name"), outSchema) },
			wantErr: true, which: "inputSchema", ptr: "/properties"},
		{name: "input schema property not in struct", reg: func() error {
			return registerTyped[greetIn, greetOut](props("name", "times", "loud"), outSchema)
		}, wantErr: true, which: "inputSchema", ptr: "/properties/loud"},
		{name: "output mismatch", reg: func() error {
			return registerTyped[greetIn, greetOut](props("name", "times"), props("greeting", "extra"))
		},
			wantErr: true, which: "outputSchema", ptr: "/properties/extra"},
		{name: "output field not in schema", reg: func() error { return registerTyped[greetIn, twoFields](props("name", "times"), props("a")) },
			wantErr: true, which: "outputSchema", ptr: "/properties"},
		{name: "pointer escaped", reg: func() error { return registerTyped[slashField, greetOut](props("a", "x/y~z"), outSchema) },
			wantErr: true, which: "inputSchema", ptr: "/properties/x~1y~0z"},
		{name: "no properties at all", reg: func() error { return registerTyped[twoFields, greetOut](schemaDoc(""), outSchema) },
			wantErr: true, which: "inputSchema", ptr: "/properties"},
		{name: "embedded struct and json:\"-\"", reg: func() error { return registerTyped[withEmbedded, greetOut](props("id", "name"), outSchema) }},
		{name: "embedded struct field missing from schema", reg: func() error { return registerTyped[withEmbedded, greetOut](props("name"), outSchema) },
			wantErr: true, which: "inputSchema", ptr: "/properties"},
		{name: "json:\"-\" field is not a property", reg: func() error {
			return registerTyped[withEmbedded, greetOut](props("id", "name", "Secret"), outSchema)
		}, wantErr: true, which: "inputSchema", ptr: "/properties/Secret"},
		{name: "unexported field is not a property", reg: func() error {
			return registerTyped[withEmbedded, greetOut](props("id", "name", "internal"), outSchema)
		}, wantErr: true, which: "inputSchema", ptr: "/properties/internal"},
		{name: "embedded pointer", reg: func() error { return registerTyped[withEmbeddedPtr, greetOut](props("id", "name"), outSchema) }},
		{name: "tagged embedded is one field", reg: func() error { return registerTyped[withTaggedEmbedded, greetOut](props("base"), outSchema) }},
		{name: "tagged embedded not flattened", reg: func() error { return registerTyped[withTaggedEmbedded, greetOut](props("id"), outSchema) },
			wantErr: true, which: "inputSchema", ptr: "/properties/id"},
		{name: "unexported embedded struct promotes fields", reg: func() error {
			return registerTyped[withUnexportedEmbedded, greetOut](props("hidden", "name"), outSchema)
		}},
		{name: "embedded skipped with json:\"-\"", reg: func() error { return registerTyped[withSkippedEmbedded, greetOut](props("name"), outSchema) }},
		{name: "embedded non-struct", reg: func() error { return registerTyped[withEmbeddedNonStruct, greetOut](props("Label"), outSchema) }},
		{name: "untagged and dash names", reg: func() error { return registerTyped[withUntagged, greetOut](props("Count", "Opt", "-"), outSchema) }},
		{name: "non-struct types are not checked", reg: func() error {
			return registerTyped[map[string]any, json.RawMessage](props("anything"), outSchema)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.reg()
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Register = %v; want nil", err)
				}
				return
			}
			var se *tools.SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("Register = %v (%T); want *SchemaError", err, err)
			}
			if se.Schema != tt.which || se.Pointer != tt.ptr {
				t.Errorf("SchemaError at %s %q; want %s %q (err: %v)", se.Schema, se.Pointer, tt.which, tt.ptr, err)
			}
			if !errors.Is(err, tools.ErrInvalidDeclaration) {
				t.Errorf("errors.Is(ErrInvalidDeclaration) = false")
			}
		})
	}
}

func TestNewTyped_embedded(t *testing.T) {
	d := withVersion("typed.tool", "1.0.0")
	d.InputSchema = json.RawMessage(props("id", "name"))
	d.OutputSchema = json.RawMessage(props("id", "name"))
	fn := func(_ context.Context, _ *tools.Env, in withEmbedded) (withEmbeddedPtr, error) {
		if in.Secret != "" || in.internal != 0 {
			t.Errorf("hidden fields were set: %+v", in)
		}
		return withEmbeddedPtr{Base: &Base{ID: in.ID + "!"}, Name: in.Name + "?"}, nil
	}
	r := frozen(t, tools.NewTyped(d, fn))
	e, err := r.Lookup("typed.tool", "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Tool().Execute(t.Context(), nil, json.RawMessage(`{"id": "7", "name": "n"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"7!","name":"n?"}`; string(out) != want {
		t.Errorf("Execute = %s; want %s", out, want)
	}
	if err := e.ValidateOutput(out); err != nil {
		t.Errorf("ValidateOutput: %v", err)
	}
	// A json:"-" field is not decodable from the input.
	if _, err := e.Tool().Execute(t.Context(), nil, json.RawMessage(`{"id": "7", "name": "n", "Secret": "s"}`)); err == nil {
		t.Errorf("Execute with a json:\"-\" field = nil error; want unknown field")
	}
}

func TestNewTyped_Declaration(t *testing.T) {
	d := greetDecl()
	tl := tools.NewTyped(d, greet)
	got := tl.Declaration()
	if got.Key() != d.Key() || string(got.InputSchema) != string(d.InputSchema) {
		t.Errorf("Declaration() = %+v; want %+v", got, d)
	}
}

// With several mismatches, Register names the same one every time (the
// first in name order), so the message does not change from run to run.
func TestNewTyped_Register_deterministic(t *testing.T) {
	schema := props("a", "z", "b", "y", "c", "x")
	for i := range 20 {
		err := registerTyped[slashField, greetOut](schema, props("greeting"))
		var se *tools.SchemaError
		if !errors.As(err, &se) {
			t.Fatalf("Register = %v; want *SchemaError", err)
		}
		if se.Pointer != "/properties/b" {
			t.Fatalf("attempt %d: Pointer = %q; want /properties/b", i, se.Pointer)
		}
	}
}

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// TestBuiltinSchemas compiles every built-in tool's schemas as a tool of
// the caller's would be: Register defers them (see compileSchema), so this
// is where an invalid one is caught.
func TestBuiltinSchemas(t *testing.T) {
	for _, tool := range Builtins() {
		d := tool.Declaration()
		for which, doc := range map[string]json.RawMessage{"inputSchema": d.InputSchema, "outputSchema": d.OutputSchema} {
			if _, err := compileNow(d.Key(), which, doc); err != nil {
				t.Errorf("%s %s: %v", d.Key(), which, err)
			}
		}
	}
}

// TestBuiltinSchemasDeferred: registering the built-in tools compiles none
// of their schemas; the first validation compiles the tool's own, and only
// those.
func TestBuiltinSchemasDeferred(t *testing.T) {
	reg := NewRegistry()
	for _, tool := range Builtins() {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	reg.Freeze()
	for _, e := range reg.Entries() {
		if e.input.deferred == nil || e.output.deferred == nil || e.input.deferred.c != nil || e.output.deferred.c != nil {
			t.Fatalf("%s: a schema was compiled at Register", e.decl.Key())
		}
	}
	read, err := reg.Lookup("file.read", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	err = read.ValidateInput([]byte(`{"path": 7}`))
	var ve *ValueError
	if !errors.As(err, &ve) {
		t.Fatalf("ValidateInput = %v, want a *ValueError", err)
	}
	if err := read.ValidateInput([]byte(`{"path": "a.txt"}`)); err != nil {
		t.Fatalf("ValidateInput(valid) = %v", err)
	}
	if read.input.deferred.c == nil {
		t.Fatal("the input schema was not compiled at its first use")
	}
	if read.output.deferred.c != nil {
		t.Fatal("the output schema was compiled before its first use")
	}
}

// TestBuiltinSchemaChanged: a tool that reuses a built-in's id and version
// with another schema is compiled at Register, and an invalid schema fails
// there as before.
func TestBuiltinSchemaChanged(t *testing.T) {
	d := FileRead().Declaration()
	d.InputSchema = json.RawMessage(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {"path": {"type": "string", "pattern": "("}}, "required": ["path"], "additionalProperties": false}`)
	err := NewRegistry().Register(NewRaw(d, func(context.Context, *Env, json.RawMessage) (json.RawMessage, error) { return nil, nil }))
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("Register = %v, want a *SchemaError", err)
	}
}

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// upstreamTool is a tool whose schemas another program wrote.
type upstreamTool struct {
	Tool
	strict bool
}

func (u upstreamTool) StrictSchemas() bool { return u.strict }

func newUpstream(in string, strict bool) upstreamTool {
	d := Declaration{ID: "up.t", Version: "1.0.0", Name: "t", Description: "t",
		InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(`{"type":"object"}`),
		ResourceLimits: ResourceLimits{MaxExecutionTime: time.Second}}
	return upstreamTool{Tool: NewRaw(d, func(context.Context, *Env, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{}`), nil
	}), strict: strict}
}

// An upstream tool's schemas are accepted in every dialect the validator
// supports, and values are validated by the one the schema declares: "n"
// must be over 0, written as draft-04 writes it (a boolean
// exclusiveMinimum) or as later drafts do (a number). No $schema is
// 2020-12. A dialect the validator does not know is refused, naming those
// it knows; a declared tool's schema must still be 2020-12.
func TestRegister_UpstreamSchemaDialects(t *testing.T) {
	const props = `"type":"object","properties":{"n":{"type":"integer","description":"n"%s}},"required":["n"]`
	for _, tc := range []struct{ schema, bound string }{
		{"http://json-schema.org/draft-04/schema#", `,"minimum":0,"exclusiveMinimum":true`},
		{"http://json-schema.org/draft-06/schema#", `,"exclusiveMinimum":0`},
		{"http://json-schema.org/draft-07/schema#", `,"exclusiveMinimum":0`},
		{"https://json-schema.org/draft/2019-09/schema", `,"exclusiveMinimum":0`},
		{"https://json-schema.org/draft/2020-12/schema", `,"exclusiveMinimum":0`},
		{"", `,"exclusiveMinimum":0`},
	} {
		doc := "{" + strings.Replace(props, "%s", tc.bound, 1) + "}"
		if tc.schema != "" {
			doc = `{"$schema":"` + tc.schema + `",` + doc[1:]
		}
		r := NewRegistry()
		if err := r.Register(newUpstream(doc, true)); err != nil {
			t.Errorf("%q: %v", tc.schema, err)
			continue
		}
		e := r.Entries()[0]
		if err := e.ValidateInput([]byte(`{"n":1}`)); err != nil {
			t.Errorf("%q: n 1: %v", tc.schema, err)
		}
		if err := e.ValidateInput([]byte(`{"n":0}`)); err == nil {
			t.Errorf("%q: n 0 is valid", tc.schema)
		}
		if len(e.Warnings()) != 0 {
			t.Errorf("%q: warnings %v", tc.schema, e.Warnings())
		}
	}
	err := NewRegistry().Register(newUpstream(`{"$schema":"http://json-schema.org/draft-03/schema#","type":"object"}`, false))
	var se *SchemaError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "draft-04, draft-06, draft-07, 2019-09, 2020-12") {
		t.Errorf("draft-03: %v", err)
	}
	declared := newUpstream(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, false).Tool
	if err := NewRegistry().Register(declared); !errors.As(err, &se) || !strings.Contains(err.Error(), "is not JSON Schema draft 2020-12") {
		t.Errorf("a declared tool's draft-07 schema: %v", err)
	}
}

// RFC-0001 6.3's findings on an upstream tool are warnings kept with its
// entry, every one of them; with strict schemas the first refuses it.
func TestRegister_UpstreamLintFindings(t *testing.T) {
	doc := `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"string"},"b":{"description":"b"}}}`
	r := NewRegistry()
	if err := r.Register(newUpstream(doc, false)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"inputSchema /required: missing; list the required properties (an empty list if none)",
		"inputSchema /properties/a/description: missing; every property must have a description",
		"inputSchema /properties/b/type: missing; every property must define its type",
	}
	if got := r.Entries()[0].Warnings(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	err := NewRegistry().Register(newUpstream(doc, true))
	var se *SchemaError
	if !errors.As(err, &se) || se.Pointer != "/required" || !strings.Contains(err.Error(), "strict_schemas") {
		t.Errorf("strict: %v", err)
	}
}

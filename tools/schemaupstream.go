package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// UpstreamSchemas is implemented by a Tool whose schemas another program
// wrote: a tool of an upstream MCP server (package mcp's gateway). Register
// accepts its schemas in every JSON Schema dialect the validator supports
// (draft-04, draft-06, draft-07, 2019-09 and 2020-12; a schema without
// $schema is 2020-12, MCP's default) and validates values with the dialect
// the schema declares. What RFC-0001 6.3 would refuse in a declared tool's
// schema (a property without a type or a description, ...) is a warning
// kept with the entry ([Entry.Warnings]), not a refusal, unless
// StrictSchemas reports true: then the first finding refuses the tool, as
// for a declared one. A tool that does not implement it keeps RFC-0001's
// rules: draft 2020-12 only, every finding refused.
type UpstreamSchemas interface {
	StrictSchemas() bool
}

// dialects are the $schema values an upstream tool's schema may declare,
// without a trailing '#', with the name a message gives them. http and
// https are one.
var dialects = map[string]string{
	"json-schema.org/draft-04/schema":      "draft-04",
	"json-schema.org/draft-06/schema":      "draft-06",
	"json-schema.org/draft-07/schema":      "draft-07",
	"json-schema.org/draft/2019-09/schema": "2019-09",
	"json-schema.org/draft/2020-12/schema": "2020-12",
}

// Dialect names the JSON Schema dialect a schema's $schema value declares
// ("draft-07", "2020-12", ...; "" for a value that is none of those an
// upstream tool may declare: see [UpstreamSchemas]).
func Dialect(schema string) string {
	s, ok := strings.CutPrefix(schema, "https://")
	if !ok {
		if s, ok = strings.CutPrefix(schema, "http://"); !ok {
			return ""
		}
	}
	return dialects[strings.TrimSuffix(strings.TrimSuffix(s, "/"), "#")]
}

// compileUpstream compiles an upstream tool's schema (see UpstreamSchemas)
// and returns RFC-0001 6.3's findings as warnings ("inputSchema
// /properties/x/description: missing; ..."); with strict, the first
// finding is the error instead.
func compileUpstream(tool, which string, doc json.RawMessage, strict bool) (*compiled, []string, error) {
	v, err := decodeJSON(doc)
	if err != nil {
		return nil, nil, &SchemaError{Tool: tool, Schema: which, Reason: "not valid JSON: " + err.Error()}
	}
	root, ok := v.(map[string]any)
	if !ok {
		return nil, nil, &SchemaError{Tool: tool, Schema: which, Reason: "a schema must be a JSON object"}
	}
	dialect := "2020-12"
	if s, ok := root["$schema"]; ok {
		str, _ := s.(string)
		if dialect = Dialect(str); dialect == "" {
			return nil, nil, &SchemaError{Tool: tool, Schema: which, Pointer: "/$schema",
				Reason: fmt.Sprintf("%v is not a JSON Schema dialect toolgate validates (draft-04, draft-06, draft-07, 2019-09, 2020-12)", s)}
		}
	}
	var warnings []string
	for _, f := range lintFindings(root, which == "inputSchema") {
		if strict {
			return nil, nil, &SchemaError{Tool: tool, Schema: which, Pointer: f.ptr, Reason: f.reason + " (strict_schemas)"}
		}
		warnings = append(warnings, fmt.Sprintf("%s %s: %s", which, f.ptr, f.reason))
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020 // when $schema is absent
	c.AssertFormat = true
	base := "toolgate:///" + tool + "/"
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		ref := strings.TrimPrefix(strings.TrimPrefix(s, base), "toolgate://")
		return nil, fmt.Errorf("%w (%s)", errNoLoad, ref)
	}
	url := base + which + ".json"
	if err := c.AddResource(url, bytes.NewReader(doc)); err != nil {
		return nil, nil, &SchemaError{Tool: tool, Schema: which, Reason: err.Error()}
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, nil, &SchemaError{Tool: tool, Schema: which, Pointer: schemaErrPointer(err), Reason: compileReason(err)}
	}
	cs := &compiled{full: s, doc: v}
	if dialect != "draft-04" {
		// The fast path's keywords mean the same from draft-06 on; in
		// draft-04, exclusiveMinimum and exclusiveMaximum are booleans
		// and 1.0 is no integer.
		cs.fast = buildFast(v, true)
	}
	return cs, warnings, nil
}

// finding is one RFC-0001 6.3 lint finding: where and why.
type finding struct{ ptr, reason string }

// lintFindings is lintSchema's every finding but $schema's (which an
// upstream tool may declare in another dialect): the root's type, then
// each object's required list and its properties' types and
// descriptions, in document order.
func lintFindings(root map[string]any, input bool) []finding {
	var out []finding
	report := func(ptr, reason string) bool {
		out = append(out, finding{ptr, reason})
		return true
	}
	switch t, ok := root["type"]; {
	case !ok:
		report("/type", "missing; the schema must define its type")
	case input && t != "object":
		report("/type", "an input schema must be of type \"object\"")
	}
	walkLint(root, "", report)
	return out
}

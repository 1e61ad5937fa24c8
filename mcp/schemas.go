package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/tools"
)

// What tools/list advertises as a tool's outputSchema, and the structured
// content every answer that is not an error carries, so that the one
// conforms to the other (MCP: a server MUST return structured results that
// conform to a tool's output schema; the TypeScript SDK's client refuses a
// result without them, -32600, and an outputSchema whose top level is not
// "type": "object" fails its whole tools/list).
//
//   - A tool whose output schema is an object and which needs no approval:
//     its own schema, unchanged; the structured content is its output.
//   - A tool that requires approval answers a call either with its output
//     or with the approval_required object (pendingSchema). Its schema is
//     {"type": "object", "anyOf": [OUTPUT, approval_required]}.
//   - A tool whose output is not an object (a string, an array, a union):
//     MCP's structured content is an object, so its output comes as
//     {"result": OUTPUT}, as the Python SDK's FastMCP does; the schema says
//     so, and the tool's _meta has io.toolgate/wrapResult. The text block
//     holds the output itself.
//
// Where a tool's own schema is nested, the document takes the dialect the
// tool's schema declares ($schema; none means 2020-12, as MCP says), and
// the nested copy loses its $schema and root $id, every reference into it
// ("#", "#/$defs/x", "#/definitions/x") rewritten to where it now sits
// ("#/anyOf/0/$defs/x"). Nothing then depends on how a validator treats an
// embedded resource or a change of dialect inside one document (Go's
// santhosh-tekuri/jsonschema reads the whole document under its root's
// dialect; the TypeScript SDK's Ajv reads every dialect as draft-07): the
// keywords toolgate adds (type, properties, required, additionalProperties,
// enum, anyOf, title, description) mean the same from draft-04 to 2020-12.

// dialect is MCP's default dialect, for a schema that declares none.
const dialect = tools.Draft202012

// draft04 is the one dialect whose base-changing keyword is id, not $id.
const draft04 = "http://json-schema.org/draft-04/schema#"

// pendingSchema is the approval_required object (Server.pending).
const pendingSchema = `{"title":"Approval required","description":"The call needs a person's approval and did not run.",` +
	`"type":"object","properties":{` +
	`"status":{"enum":["approval_required"]},` +
	`"intentId":{"type":"string","description":"the intent's id: toolgate.execute_intent takes it as id or intentId"},` +
	`"hash":{"type":"string","description":"the SHA-256 of the exact call"},` +
	`"tool":{"type":"string","description":"the tool's id"},` +
	`"version":{"type":"string","description":"the tool's version"},` +
	`"approve":{"type":"string","description":"what a person runs to approve it"},` +
	`"then":{"type":"string","description":"what to call once it is approved"},` +
	`"policies":{"type":"array","items":{"type":"string"},"description":"the ids of the Cedar policies that ask for a person"},` +
	`"policySet":{"type":"string","description":"the revision of the Cedar policy set"},` +
	`"approvers":{"type":"array","items":{"type":"string"},"description":"the groups a member of which must approve"}},` +
	`"required":["status","intentId","hash","tool","version","approve","then"],"additionalProperties":false}`

// executeIntentInput is the input schema of toolgate.execute_intent: the
// intent's id, as id or as intentId (the approval answer's name), and its
// hash.
var executeIntentInput = json.RawMessage(`{"type":"object","properties":{` +
	`"id":{"type":"string","description":"the intent id"},` +
	`"intentId":{"type":"string","description":"the intent id, as the approval answer names it; give id or intentId"},` +
	`"hash":{"type":"string","description":"the intent's SHA-256 hash"}},` +
	`"required":["hash"],"anyOf":[{"required":["id"]},{"required":["intentId"]}],"additionalProperties":false}`)

// executeIntentOutput is the output schema of toolgate.execute_intent: the
// output of whichever tool the intent runs, an object (wrapped as that
// tool's own answers are).
var executeIntentOutput = json.RawMessage(`{"type":"object","description":"The output of the intent's tool, as that tool's answers give it ` +
	`(the first branch of its outputSchema; {\"result\": OUTPUT} for a tool whose output is not an object)."}`)

// outputSchema is the outputSchema tools/list advertises for d, and whether
// d's output is wrapped as {"result": OUTPUT}.
func outputSchema(d tools.Declaration) (schema json.RawMessage, wrap bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(d.OutputSchema))
	dec.UseNumber() // numbers as written
	var own map[string]any
	if err := dec.Decode(&own); err != nil || own == nil {
		return nil, false, errors.New("its output schema is not a JSON object")
	}
	wrap = own["type"] != "object"
	if !wrap && !d.RequiresApproval {
		return json.RawMessage(d.OutputSchema), false, nil
	}
	root := map[string]any{"$schema": dialect, "type": "object"}
	if v, ok := own["$schema"].(string); ok {
		root["$schema"] = v
	}
	// at is where the tool's schema sits in the document.
	at := "/properties/result"
	switch {
	case d.RequiresApproval && wrap:
		at = "/anyOf/0/properties/result"
	case d.RequiresApproval:
		at = "/anyOf/0"
	}
	nest(own, at, root["$schema"] == draft04)
	// wrapper puts the tool's schema under result, in m.
	wrapper := func(m map[string]any) map[string]any {
		m["type"] = "object"
		m["properties"] = map[string]any{"result": own}
		m["required"] = []string{"result"}
		m["additionalProperties"] = false
		return m
	}
	if !d.RequiresApproval { // wrapped
		root["description"] = `The tool's output as {"result": OUTPUT}: MCP's structured content is an object.`
		return mustJSON(wrapper(root)), true, nil
	}
	var first any = own
	as := ""
	if wrap {
		first, as = wrapper(map[string]any{}), ` as {"result": OUTPUT}`
	}
	root["description"] = "The tool's output" + as + "; or, when the call needs a person's approval and nothing ran, the approval_required object."
	root["anyOf"] = []any{first, json.RawMessage(pendingSchema)}
	return mustJSON(root), wrap, nil
}

// nest makes the schema s fit to sit at the JSON pointer at of another
// document: without its $schema and root $id (id in draft-04), each
// reference into it rewritten to start at at.
func nest(s map[string]any, at string, draft4 bool) {
	idKey := "$id"
	if draft4 {
		idKey = "id"
	}
	id, _ := s[idKey].(string)
	delete(s, "$schema")
	delete(s, idKey)
	rebase := func(ref string) string {
		if id != "" && strings.HasPrefix(ref, id+"#") { // its own root, by its $id
			ref = ref[len(id):]
		}
		if ref == "#" || strings.HasPrefix(ref, "#/") {
			return "#" + at + ref[1:]
		}
		return ref // an anchor, or another document's
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			if _, ok := x[idKey].(string); ok {
				return // an embedded resource: its references are its own
			}
			// Every other object in a schema is a schema, but for the
			// values of the keywords below.
			for k, e := range x {
				switch k {
				case "$ref":
					if r, ok := e.(string); ok {
						x[k] = rebase(r)
					}
				case "enum", "const", "default", "examples": // values, not schemas
				case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies":
					if names, ok := e.(map[string]any); ok { // names to schemas
						for _, sub := range names {
							walk(sub)
						}
					}
				default:
					walk(e)
				}
			}
		}
	}
	walk(s) // its root $id is gone: walked as any schema
}

// wrapResult is the structured content {"result": out}.
func wrapResult(out json.RawMessage) json.RawMessage {
	b := make([]byte, 0, len(out)+11)
	b = append(b, `{"result":`...)
	b = append(b, out...)
	return append(b, '}')
}

type intentRef struct {
	ID   string
	Hash string
}

// parseIntentRef reads the arguments of toolgate.execute_intent, saying
// which field is wrong when they are not {"id" or "intentId", "hash"}.
func parseIntentRef(args json.RawMessage) (intentRef, error) {
	var ref intentRef
	var m map[string]json.RawMessage
	if a := strings.TrimSpace(string(args)); a != "" && a != "null" {
		if err := json.Unmarshal(args, &m); err != nil {
			return ref, errors.New(`invalid arguments: they are a JSON object, {"id": "...", "hash": "..."}`)
		}
	}
	var problems []string
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k != "id" && k != "intentId" && k != "hash" {
			problems = append(problems, fmt.Sprintf("unknown field %q", k))
		}
	}
	field := func(k string) (string, bool) {
		raw, ok := m[k]
		if !ok {
			return "", false
		}
		var v string
		if json.Unmarshal(raw, &v) != nil || v == "" {
			problems = append(problems, fmt.Sprintf("%q must be a non-empty string", k))
		}
		return v, true
	}
	id, hasID := field("id")
	alias, hasAlias := field("intentId")
	hash, hasHash := field("hash")
	switch {
	case !hasID && !hasAlias:
		problems = append(problems, `"id" is missing: the intent's id (the approval answer's intentId; "intentId" is taken too)`)
	case hasID && hasAlias && id != "" && alias != "" && id != alias:
		problems = append(problems, `"id" and "intentId" name different intents: give one`)
	case !hasID:
		id = alias
	}
	if !hasHash {
		problems = append(problems, `"hash" is missing: the intent's SHA-256 hash`)
	}
	if len(problems) > 0 {
		return ref, errors.New("invalid arguments: " + strings.Join(problems, "; "))
	}
	return intentRef{ID: id, Hash: hash}, nil
}

package mcp

import (
	"crypto/sha256"
	"encoding/hex"
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
// Where a tool's own schema is nested, it is an embedded schema resource
// with its own $id, urn:toolgate:schema:sha256:HEX (the SHA-256 of the
// schema as declared), and keeps its $schema: its references ("#/$defs/x")
// resolve within it, under the dialect it declares. The $id names its
// content, so that a client validating every tool with one validator (the
// TypeScript SDK's Ajv) never meets one $id for two different schemas.

// dialect is the $schema of what toolgate writes: MCP's default dialect.
const dialect = tools.Draft202012

// pendingSchema is the approval_required object (Server.pending).
const pendingSchema = `{"title":"Approval required","description":"The call needs a person's approval and did not run.",` +
	`"type":"object","properties":{` +
	`"status":{"enum":["approval_required"]},` +
	`"intentId":{"type":"string","description":"the intent's id: toolgate.execute_intent takes it as id or intentId"},` +
	`"hash":{"type":"string","description":"the SHA-256 of the exact call"},` +
	`"tool":{"type":"string","description":"the tool's id"},` +
	`"version":{"type":"string","description":"the tool's version"},` +
	`"approve":{"type":"string","description":"what a person runs to approve it"},` +
	`"then":{"type":"string","description":"what to call once it is approved"}},` +
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
	var own map[string]json.RawMessage
	if err := json.Unmarshal(d.OutputSchema, &own); err != nil || own == nil {
		return nil, false, errors.New("its output schema is not a JSON object")
	}
	wrap = string(own["type"]) != `"object"`
	if !wrap && !d.RequiresApproval {
		return json.RawMessage(d.OutputSchema), false, nil
	}
	sum := sha256.Sum256(d.OutputSchema)
	own["$id"] = mustJSON("urn:toolgate:schema:sha256:" + hex.EncodeToString(sum[:]))
	inner := mustJSON(own)
	// wrapper puts the tool's schema under result, in m.
	wrapper := func(m map[string]any) map[string]any {
		m["type"] = "object"
		m["properties"] = map[string]json.RawMessage{"result": inner}
		m["required"] = []string{"result"}
		m["additionalProperties"] = false
		return m
	}
	if !d.RequiresApproval { // wrapped
		return mustJSON(wrapper(map[string]any{"$schema": dialect,
			"description": `The tool's output as {"result": OUTPUT}: MCP's structured content is an object.`})), true, nil
	}
	first, as := inner, ""
	if wrap {
		first, as = mustJSON(wrapper(map[string]any{})), ` as {"result": OUTPUT}`
	}
	return mustJSON(map[string]any{
		"$schema": dialect, "type": "object",
		"description": "The tool's output" + as + "; or, when the call needs a person's approval and nothing ran, the approval_required object.",
		"anyOf":       []json.RawMessage{first, json.RawMessage(pendingSchema)},
	}), wrap, nil
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

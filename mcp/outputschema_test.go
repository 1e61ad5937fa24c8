package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// Output schemas of the conformance tools: an object with a reference into
// its own $defs, and a string.
const (
	refOutSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"word":{"type":"string","$ref":"#/$defs/word","description":"a word"}},"required":["word"],"additionalProperties":false,` +
		`"$defs":{"word":{"type":"string","description":"a word","minLength":1}}}`
	strOutSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"string","description":"a word"}`
)

// conformTools: out.obj (an object output with a $ref), out.str (a string
// output), and each again requiring approval (out.gated, out.gatedstr).
func conformTools(t *testing.T) *tgruntime.Runtime {
	t.Helper()
	reg := tools.NewRegistry()
	add := func(id, out string, approval bool, output string) {
		d := decl(id, objSchema, func(d *tools.Declaration) {
			d.OutputSchema = json.RawMessage(out)
			d.RequiresApproval = approval
			if approval {
				d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.write:out")}
			}
		})
		err := reg.Register(tools.NewRaw(d, func(context.Context, *tools.Env, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(output), nil
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	add("out.obj", refOutSchema, false, `{"word":"plain"}`)
	add("out.str", strOutSchema, false, `"plain"`)
	add("out.gated", refOutSchema, true, `{"word":"gated"}`)
	add("out.gatedstr", strOutSchema, true, `"gated"`)
	reg.Freeze()
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "tg.db"), &tgruntime.Options{
		Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{principal: {capability.MustParse("state.write:out")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// advertised compiles the outputSchema tools/list gives each tool, with a
// loader that refuses every URL (an embedded resource must resolve within
// the document), and checks that its top level is "type": "object", which
// MCP 2025-11-25 requires and the TypeScript SDK's client enforces (its
// tools/list fails otherwise).
func advertised(t *testing.T, ctx context.Context, cs *sdk.ClientSession) map[string]*jsonschema.Schema {
	t.Helper()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := make(map[string]*jsonschema.Schema)
	for _, tool := range list.Tools {
		if tool.OutputSchema == nil {
			t.Errorf("%s: no outputSchema", tool.Name)
			continue
		}
		b, err := json.Marshal(tool.OutputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var top struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(b, &top); top.Type != "object" {
			t.Errorf("%s: the outputSchema's type is %v, not \"object\": %s", tool.Name, top.Type, b)
		}
		c := jsonschema.NewCompiler()
		c.Draft = jsonschema.Draft2020
		c.LoadURL = func(u string) (io.ReadCloser, error) { return nil, fmt.Errorf("no loading (%s)", u) }
		url := "test:///" + tool.Name + ".json"
		if err := c.AddResource(url, bytes.NewReader(b)); err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		s, err := c.Compile(url)
		if err != nil {
			t.Errorf("%s: its outputSchema does not compile: %v\n%s", tool.Name, err, b)
			continue
		}
		schemas[tool.Name] = s
	}
	return schemas
}

// conforms checks a non-error answer: structured content, an object,
// valid under the outputSchema of each tool named.
func conforms(t *testing.T, schemas map[string]*jsonschema.Schema, what string, res *sdk.CallToolResult, toolNames ...string) {
	t.Helper()
	if res.IsError {
		t.Errorf("%s: an error: %s", what, text(t, res))
		return
	}
	if res.StructuredContent == nil {
		t.Errorf("%s: no structuredContent, though the tool has an outputSchema (state %v)", what, res.Meta[mcp.MetaState])
		return
	}
	b, _ := json.Marshal(res.StructuredContent)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // as the validator reads numbers
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.(map[string]any); !ok {
		t.Errorf("%s: structuredContent %s is not an object", what, b)
	}
	for _, name := range toolNames {
		s := schemas[name]
		if s == nil {
			t.Errorf("%s: no schema for %s", what, name)
			continue
		}
		if err := s.Validate(v); err != nil {
			t.Errorf("%s: structuredContent %s does not conform to the outputSchema of %s: %v", what, b, name, err)
		}
	}
}

// Every answer that is not an error conforms to the outputSchema tools/list
// advertised for the tool (MCP: structured results MUST conform; the
// TypeScript SDK's client throws -32600 without them): a completed call, a
// call that needs approval (the approval_required object), the intent run
// through toolgate.execute_intent (conforming to both tools' schemas), a
// replay through either, a replay by idempotency key; for a tool whose
// output is an object with references into its own $defs, and for one
// whose output is a string (wrapped as {"result": ...}).
func TestOutputSchema_EveryAnswerConforms(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt := conformTools(t)
	cs := pipeSession(t, rt, &mcp.Options{Principal: principal}, nil)
	schemas := advertised(t, ctx, cs)

	for _, name := range []string{"out.obj", "out.obj--1.0.0", "out.str", "out.str--1.0.0"} {
		res := call(t, ctx, cs, name, map[string]any{"msg": "hi"}, nil)
		conforms(t, schemas, name, res, name)
		key := sdk.Meta{mcp.MetaIdempotencyKey: "k-" + name}
		call(t, ctx, cs, name, map[string]any{}, key)
		again := call(t, ctx, cs, name, map[string]any{}, key)
		if again.Meta[mcp.MetaReplayed] != true {
			t.Errorf("%s: the second call with one idempotency key: %v, want replayed", name, again.Meta)
		}
		conforms(t, schemas, name+" replayed by its idempotency key", again, name)
	}
	if res := call(t, ctx, cs, "out.str", map[string]any{}, nil); text(t, res) != `"plain"` {
		t.Errorf("out.str: the text block is %s, want the output itself", text(t, res))
	} else if sc, _ := json.Marshal(res.StructuredContent); string(sc) != `{"result":"plain"}` {
		t.Errorf("out.str: structuredContent %s, want {\"result\":\"plain\"}", sc)
	}

	for _, name := range []string{"out.gated", "out.gatedstr"} {
		args := map[string]any{"msg": name}
		pending := call(t, ctx, cs, name, args, nil)
		id, hash, _ := intentOf(t, pending)
		conforms(t, schemas, name+" pending", pending, name)
		if sc, _ := pending.StructuredContent.(map[string]any); sc["status"] != "approval_required" || sc["intentId"] != id || sc["hash"] != hash {
			t.Errorf("%s: structuredContent %v, want the approval_required object of intent %s", name, pending.StructuredContent, id)
		}
		conforms(t, schemas, name+" pending again", call(t, ctx, cs, name, args, nil), name)
		if _, err := rt.Approve(ctx, id, "alice"); err != nil {
			t.Fatal(err)
		}
		// The id as the approval answer names it: intentId.
		ran := call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"intentId": id, "hash": hash}, nil)
		conforms(t, schemas, name+" run by "+mcp.ExecuteIntentTool, ran, mcp.ExecuteIntentTool, name)
		if ran.Meta[mcp.MetaReplayed] == true {
			t.Errorf("%s: the first run is marked replayed", name)
		}
		for what, again := range map[string]*sdk.CallToolResult{
			"replayed by " + mcp.ExecuteIntentTool: call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash}, nil),
			"replayed by the identical call":       call(t, ctx, cs, name, args, nil),
		} {
			if again.Meta[mcp.MetaReplayed] != true {
				t.Errorf("%s %s: %v, want replayed", name, what, again.Meta)
			}
			conforms(t, schemas, name+" "+what, again, name)
		}
	}
}

// toolgate.execute_intent takes the intent's id as id or as intentId (the
// name the approval answer gives it), and an invalid-arguments error says
// which field is wrong; so does a regular tool's schema violation.
func TestExecuteIntent_ArgumentsNameTheField(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt := openAt(t, filepath.Join(t.TempDir(), "tg.db"))
	defer rt.Close(context.Background())
	cs := pipeSession(t, rt, &mcp.Options{Principal: principal}, nil)

	for _, tc := range []struct {
		args any
		want []string
	}{
		{map[string]any{}, []string{`"id" is missing`, `"hash" is missing`}},
		{map[string]any{"id": "x"}, []string{`"hash" is missing`}},
		{map[string]any{"intentId": "x"}, []string{`"hash" is missing`}},
		{map[string]any{"hash": "x"}, []string{`"id" is missing`, "intentId"}},
		{map[string]any{"id": 5, "hash": "x"}, []string{`"id" must be a non-empty string`}},
		{map[string]any{"intentId": "", "hash": "x"}, []string{`"intentId" must be a non-empty string`}},
		{map[string]any{"id": "x", "hash": true}, []string{`"hash" must be a non-empty string`}},
		{map[string]any{"id": "x", "hash": "y", "callId": "z"}, []string{`unknown field "callId"`}},
		{map[string]any{"id": "x", "intentId": "w", "hash": "y"}, []string{`"id" and "intentId" name different intents`}},
	} {
		o := failed(t, call(t, ctx, cs, mcp.ExecuteIntentTool, tc.args, nil))
		if o.State != "REFUSED" || o.Error.Type != "ValidationError" || o.Error.Code != "invalid_input" {
			t.Errorf("%v: %+v, want REFUSED, ValidationError invalid_input", tc.args, o)
		}
		for _, w := range tc.want {
			if !strings.Contains(o.Error.Message, w) {
				t.Errorf("%v: %q does not say %q", tc.args, o.Error.Message, w)
			}
		}
	}
	// The same id twice is one intent; the runtime then judges it.
	if o := failed(t, call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": "x", "intentId": "x", "hash": "y"}, nil)); o.Error.Type != "IntentError" {
		t.Errorf("id and intentId alike: %+v, want the runtime's IntentError", o)
	}

	// Both names run an approved intent.
	for _, field := range []string{"id", "intentId"} {
		id, hash, _ := intentOf(t, call(t, ctx, cs, "test.approve", map[string]any{"msg": field}, nil))
		if _, err := rt.Approve(ctx, id, "alice"); err != nil {
			t.Fatal(err)
		}
		completed(t, call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{field: id, "hash": hash}, nil))
	}

	// A regular tool's schema violation names the field.
	for _, tc := range []struct {
		tool string
		args any
		want string
	}{
		{"test.noop", map[string]any{"msg": 5}, "/msg"},
		{"test.noop", map[string]any{"msg": strings.Repeat("x", 65)}, "/msg"},
		{"test.noop", map[string]any{"bogus": 1}, "bogus"},
		{"test.slow", map[string]any{}, "ms"},
		{"test.slow", map[string]any{"ms": -1}, "/ms"},
	} {
		o := failed(t, call(t, ctx, cs, tc.tool, tc.args, nil))
		if o.State != "FAILED" || o.Error.Code != "invalid_input" || !strings.Contains(o.Error.Message, tc.want) {
			t.Errorf("%s %v: %+v, want FAILED invalid_input naming %s", tc.tool, tc.args, o, tc.want)
		}
	}
}

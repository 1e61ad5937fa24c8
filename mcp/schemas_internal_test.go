package mcp

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/toolgate/toolgate/tools"
)

// The advertised outputSchema of a tool whose own schema is nested (one
// that requires approval, or whose output is not an object) takes the
// dialect the tool's schema declares, and the references into the tool's
// schema (by pointer, by its root $id, "#" itself) still point into it; an
// embedded resource's references, anchors and values that merely look like
// references are left alone. Each document compiles under its own dialect
// with a loader that refuses every URL, admits what the tool's schema
// admits (wrapped when not an object) and the approval_required object
// when the tool requires approval, and refuses the rest.
func TestOutputSchema_NestsEveryDialect(t *testing.T) {
	pending := `{"status":"approval_required","intentId":"i","hash":"h","tool":"t","version":"1.0.0","approve":"a","then":"b"}`
	for _, tc := range []struct {
		name     string
		schema   string
		approval bool
		valid    []string
		invalid  []string
	}{
		{
			name: "draft-07, definitions, tuple items, a reference by its $id", approval: true,
			schema: `{"$schema":"http://json-schema.org/draft-07/schema#","$id":"https://example.com/out.json","type":"object",
				"properties":{"a":{"$ref":"#/definitions/A"},"b":{"$ref":"https://example.com/out.json#/definitions/A"},
				"t":{"type":"array","items":[{"type":"string"}],"additionalItems":false}},
				"required":["a"],"additionalProperties":false,"definitions":{"A":{"type":"string","minLength":1}}}`,
			valid:   []string{`{"a":"x"}`, `{"a":"x","b":"y","t":["s"]}`, pending},
			invalid: []string{`{"a":""}`, `{"a":"x","b":2}`, `{"a":"x","t":["s",1]}`, `{"status":"approval_required"}`, `{}`},
		},
		{
			name: "draft-04, id", approval: true,
			schema: `{"$schema":"http://json-schema.org/draft-04/schema#","id":"urn:example:out","type":"object",
				"properties":{"n":{"$ref":"#/definitions/N"}},"required":["n"],"definitions":{"N":{"type":"integer","minimum":0,"exclusiveMinimum":true}}}`,
			valid:   []string{`{"n":1}`, pending},
			invalid: []string{`{"n":0}`, `{"n":"1"}`},
		},
		{
			name: "2020-12, not an object: recursion, a property named default, a reference-like value",
			schema: `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":["object","null"],
				"properties":{"child":{"$ref":"#"},"default":{"$ref":"#/$defs/w"},"tag":{"enum":[{"$ref":"#/nowhere"}]},
				"own":{"$id":"urn:example:own","$defs":{"x":{"type":"boolean"}},"$ref":"#/$defs/x"}},
				"additionalProperties":false,"$defs":{"w":{"type":"string"}}}`,
			valid: []string{`{"result":null}`, `{"result":{"child":{"child":null,"default":"w"}}}`,
				`{"result":{"tag":{"$ref":"#/nowhere"}}}`, `{"result":{"own":true}}`},
			invalid: []string{`{"result":{"child":{"default":5}}}`, `{"result":{"tag":{"$ref":"#/anyOf/0"}}}`,
				`{"result":{"own":"yes"}}`, `null`, `{"child":null}`, pending},
		},
		{
			name: "2020-12 string, requiring approval", approval: true,
			schema:  `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"string","$defs":{"s":{"maxLength":3}},"$ref":"#/$defs/s"}`,
			valid:   []string{`{"result":"abc"}`, pending},
			invalid: []string{`{"result":"abcd"}`, `{"result":1}`, `"abc"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tools.Declaration{ID: "x.y", Version: "1.0.0", OutputSchema: json.RawMessage(tc.schema), RequiresApproval: tc.approval}
			doc, _, err := outputSchema(d)
			if err != nil {
				t.Fatal(err)
			}
			var top map[string]any
			if err := json.Unmarshal(doc, &top); err != nil || top["type"] != "object" {
				t.Fatalf("the advertised schema's type is %v, not object: %s", top["type"], doc)
			}
			var own map[string]any
			json.Unmarshal([]byte(tc.schema), &own)
			if top["$schema"] != own["$schema"] {
				t.Errorf("the document's dialect is %v, want the tool's, %v", top["$schema"], own["$schema"])
			}
			c := jsonschema.NewCompiler()
			c.LoadURL = func(u string) (io.ReadCloser, error) { return nil, fmt.Errorf("no loading (%s)", u) }
			if err := c.AddResource("test:///advertised.json", strings.NewReader(string(doc))); err != nil {
				t.Fatal(err)
			}
			s, err := c.Compile("test:///advertised.json")
			if err != nil {
				t.Fatalf("%v\n%s", err, doc)
			}
			for _, v := range tc.valid {
				if err := s.Validate(decode(t, v)); err != nil {
					t.Errorf("%s refused: %v\n%s", v, err, doc)
				}
			}
			for _, v := range tc.invalid {
				if s.Validate(decode(t, v)) == nil {
					t.Errorf("%s admitted\n%s", v, doc)
				}
			}
		})
	}
}

func decode(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

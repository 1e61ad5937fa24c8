package tools

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
)

// fastSchemaDocs are schemas a fastSchema handles, and some it must not.
var fastSchemaDocs = map[string]struct {
	doc  string
	fast bool // buildFast gives a fastSchema
}{
	"object": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"n": {"type": "integer", "description": "n"}, "s": {"type": ["string", "null"], "description": "s"}},
		"required": ["n"], "additionalProperties": false}`, true},
	"nested": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"list": {"type": "array", "description": "l", "items": {"type": "object", "properties": {"x": {"type": "number", "description": "x"}}, "required": ["x"]}},
		"b": {"type": "boolean", "description": "b"}, "any": {"type": ["object", "array", "string", "number", "boolean", "null"], "description": "a"}},
		"required": ["list", "b"], "additionalProperties": {"type": "string"}}`, true},
	"lengths": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"msg": {"type": "string", "description": "m", "minLength": 2, "maxLength": 4}}, "required": ["msg"], "additionalProperties": false}`, true},
	"length float": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"msg": {"type": "string", "description": "m", "maxLength": 4.0}}, "required": []}`, false},
	"open": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}, "required": []}`, true},
	"pattern": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"p": {"type": "string", "description": "p", "pattern": "^a"}}, "required": []}`, true},
	"minimum": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"p": {"type": "integer", "description": "p", "minimum": 3}}, "required": ["p"]}`, true},
	"bounds": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"p": {"type": "number", "description": "p", "exclusiveMinimum": -2, "maximum": 9007199254740993},
		"q": {"type": ["integer", "string"], "description": "q", "minimum": 0, "exclusiveMaximum": 10, "pattern": "^[a-z]+$"}}, "required": []}`, true},
	"bound fraction": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"p": {"type": "number", "description": "p", "minimum": 0.5}}, "required": []}`, false},
	"enum": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"p": {"type": ["string", "integer", "object", "array", "null"], "description": "p", "enum": ["a", "bc"]}}, "required": []}`, true},
	"enum mixed": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"p": {"type": ["string", "integer"], "description": "p", "enum": ["a", 1]}}, "required": []}`, false},
	"exec": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"args": {"type": "array", "description": "a", "maxItems": 2, "items": {"type": "string", "pattern": "^[^\\x00]*$"}},
		"env": {"type": "object", "description": "e", "maxProperties": 2, "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
		"additionalProperties": {"type": "string"}}, "list": {"type": "array", "description": "l", "maxItems": 1}}, "required": []}`, true},
	"names typed": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"propertyNames": {"type": "integer"}, "required": []}`, true},
	"format": {`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": {"p": {"type": "string", "description": "p", "format": "date-time"}}, "required": []}`, false},
}

// fastValues are values to check under every schema: valid, invalid,
// malformed, and the forms a fastSchema leaves to the full validator.
var fastValues = []string{
	`{"n":1}`, `{"n":-0}`, `{"n":1,"s":"x"}`, `{"n":1,"s":null}`, `{"n":1,"s":1}`, `{"n":1.0}`, `{"n":1e2}`, `{"n":1.5}`,
	`{"n":"1"}`, `{}`, `{"s":"x"}`, `{"n":1,"x":2}`, `{"n":1,"n":"x"}`, `{"n":"x","n":1}`, `{"\u006e":1}`, `{"n":1,"\u0078":"y"}`,
	` { "n" : 1 } `, `{"n":1} x`, `{"n":1`, `[]`, `null`, `1`, `"s"`, `true`, "{\"n\":1,\"s\":\"\xff\"}", `{"n":1,"s":"a\"b\\"}`,
	`{"list":[],"b":true}`, `{"list":[{"x":1},{"x":2.5e3}],"b":false}`, `{"list":[{"y":1}],"b":false}`, `{"list":[{"x":"1"}],"b":false}`,
	`{"list":[],"b":true,"extra":"s"}`, `{"list":[],"b":true,"extra":1}`, `{"list":[],"b":null}`, `{"list":{},"b":true}`,
	`{"list":[],"b":true,"any":{"deep":[1,{"a":"]}"},[]]}}`, `{"list":[],"b":true,"any":[1,"x",null,true,{}]}`,
	`{"msg":"a"}`, `{"msg":"ab"}`, `{"msg":"abcd"}`, `{"msg":"abcde"}`, `{"msg":"日本語"}`, `{"msg":"日本語日本"}`, `{"msg":"\u00e9\u00e9"}`,
	`{"msg":"a\nb"}`, `{"msg":"\u00e9\u00e9\u00e9\u00e9\u00e9"}`, `{"msg":2}`, `{"msg":"ab","x":1}`,
	`{"p":"abc"}`, `{"p":"bcd"}`, `{"p":5}`, `{"p":2}`, `{"p":3}`, `{"p":-2}`, `{"p":-1}`, `{"p":3.5}`, `{"p":1e1}`, `{"p":-0}`,
	`{"p":9007199254740993}`, `{"p":9007199254740994}`, `{"p":99999999999999999999}`, `{"p":"\u0061bc"}`, `{"p":"a\nb"}`,
	`{"p":"a"}`, `{"p":"bc"}`, `{"p":"b"}`, `{"p":"\u0061"}`, `{"p":1}`, `{"p":{}}`, `{"p":["a"]}`, `{"p":null}`,
	`{"args":[]}`, `{"args":["a","b"]}`, `{"args":["a","b","c"]}`, `{"args":["a\u0000"]}`, `{"args":[1]}`,
	`{"env":{}}`, `{"env":{"A":"1","B_2":"x"}}`, `{"env":{"A":"1","B":"2","C":"3"}}`, `{"env":{"A":"1","A":"2","A":"3"}}`,
	`{"env":{"1A":"x"}}`, `{"env":{"A":1}}`, `{"env":{"\u0041":"x"}}`, `{"list":[[1,2]]}`, `{"list":[1,2]}`, `{"list":[]}`,
	`{"q":0}`, `{"q":-1}`, `{"q":9}`, `{"q":10}`, `{"q":"abc"}`, `{"q":"Abc"}`, `{"q":""}`, `{"q":"ab\u0063"}`, `{"q":9.0}`, `{"p":"2024-01-01T00:00:00Z"}`, `{"p":"yesterday"}`,
}

// TestFastSchema_neverAcceptsWhatTheValidatorRefuses checks every value
// under every schema: a fastSchema accepts only what the full validator
// accepts, and the values it is meant to handle it does accept.
func TestFastSchema_neverAcceptsWhatTheValidatorRefuses(t *testing.T) {
	for name, c := range fastSchemaDocs {
		s, err := compileSchema("test", "inputSchema", json.RawMessage(c.doc))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := s.fast != nil; got != c.fast {
			t.Fatalf("%s: has a fastSchema = %v, want %v", name, got, c.fast)
		}
		for _, v := range fastValues {
			fast := s.fastValid([]byte(v))
			full := fullValid(s, []byte(v))
			if fast && !full {
				t.Errorf("%s: %s: the fastSchema accepts what the validator refuses", name, v)
			}
			if _, err := validateValue(s, "input", []byte(v)); (err == nil) != full {
				t.Errorf("%s: %s: validateValue error %v, the validator says valid = %v", name, v, err, full)
			}
		}
	}
	// What the fast path is for: the common forms are proven without the
	// full validator.
	s, _ := compileSchema("test", "inputSchema", json.RawMessage(fastSchemaDocs["object"].doc))
	for _, v := range []string{`{"n":1}`, `{"n":1,"s":null}`, ` { "n" : 1 } `} {
		if !s.fastValid([]byte(v)) {
			t.Errorf("%s: not proven valid by the fastSchema", v)
		}
	}
	// A member twice is refused, by the full path, at any depth, also
	// where the schema leaves the value open.
	open, _ := compileSchema("test", "inputSchema", json.RawMessage(fastSchemaDocs["open"].doc))
	if v := `{"x":{"a":1,"b":[{"c":2}]},"y":[]}`; !open.fastValid([]byte(v)) {
		t.Errorf("%s: not proven valid by the open fastSchema", v)
	}
	for _, v := range []string{`{"n":1,"n":2}`, `{"x":{"a":1,"a":2}}`, `{"x":[{"a":[{"b":1,"b":1}]}]}`} {
		s := open
		if s.fastValid([]byte(v)) {
			t.Errorf("%s: proven valid by the fastSchema", v)
		}
		if _, err := validateValue(s, "input", []byte(v)); err == nil {
			t.Errorf("%s: valid", v)
		}
	}
	for name, values := range map[string][]string{
		"lengths":     {`{"msg":"ab"}`, `{"msg":"日本語"}`, `{"msg":"abcd"}`},
		"pattern":     {`{"p":"abc"}`, `{}`},
		"minimum":     {`{"p":3}`, `{"p":5}`},
		"bounds":      {`{"p":-1}`, `{"p":9007199254740993}`, `{"q":0}`, `{"q":9}`, `{"q":"abc"}`},
		"enum":        {`{"p":"a"}`, `{"p":"bc"}`},
		"exec":        {`{"args":["a","b"],"env":{"A":"1","B_2":"x"},"list":[[1,2]]}`},
		"names typed": {`{}`},
	} {
		s, _ := compileSchema("test", "inputSchema", json.RawMessage(fastSchemaDocs[name].doc))
		for _, v := range values {
			if !s.fastValid([]byte(v)) {
				t.Errorf("%s: %s: not proven valid by the fastSchema", name, v)
			}
		}
	}
}

func fullValid(s *compiled, raw []byte) bool {
	v, err := decodeJSON(raw)
	return err == nil && s.full.Validate(v) == nil
}

// FuzzFastSchema checks random values under the schemas with a fastSchema.
func FuzzFastSchema(f *testing.F) {
	for _, v := range fastValues {
		f.Add(v)
	}
	var schemas []*compiled
	for _, c := range fastSchemaDocs {
		if c.fast {
			s, err := compileSchema("test", "inputSchema", json.RawMessage(c.doc))
			if err != nil {
				f.Fatal(err)
			}
			schemas = append(schemas, s)
		}
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, s := range schemas {
			if s.fastValid([]byte(v)) && !fullValid(s, []byte(v)) {
				t.Fatalf("%q: the fastSchema accepts what the validator refuses", v)
			}
		}
	})
}

// manyKeys is an object of n distinct members, and a duplicate of the
// first at the end if dup.
func manyKeys(n int, dup bool) []byte {
	b := []byte(`{"x":{`)
	for i := range n {
		b = fmt.Appendf(b, `"k%07d":%d,`, i, i)
	}
	if dup {
		b = append(b, `"k0000000":0,`...)
	}
	return append(b[:len(b)-1], "}}"...)
}

// Objects beyond the linear search's few members: all distinct is proven,
// a duplicate anywhere is not (and the full path refuses it).
func TestFastSchema_manyMembers(t *testing.T) {
	open, err := compileSchema("test", "inputSchema", json.RawMessage(fastSchemaDocs["open"].doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{15, 16, 17, 1000} {
		if !open.fastValid(manyKeys(n, false)) {
			t.Errorf("%d distinct members: not proven valid", n)
		}
		if open.fastValid(manyKeys(n, true)) {
			t.Errorf("%d members and a duplicate: proven valid", n)
		}
		if _, err := validateValue(open, "input", manyKeys(n, true)); err == nil {
			t.Errorf("%d members and a duplicate: valid", n)
		}
	}
}

// BenchmarkFastSchema_manyMembers shows the cost per member stays flat as
// an object grows (it was quadratic: 10 s for 100,000 members).
func BenchmarkFastSchema_manyMembers(b *testing.B) {
	open, err := compileSchema("test", "inputSchema", json.RawMessage(fastSchemaDocs["open"].doc))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000, 100000} {
		v := manyKeys(n, false)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				if !open.fastValid(v) {
					b.Fatal("not proven valid")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/member")
		})
	}
}

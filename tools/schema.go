package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Draft202012 is the $schema every tool schema must declare (RFC-0001 6.1.2,
// 6.2.2, 6.3.2).
const Draft202012 = "https://json-schema.org/draft/2020-12/schema"

// errNoLoad is what the compiler's loader returns for every URL: a schema is
// one self-contained document, never fetched from disk or network.
var errNoLoad = errors.New("loading external schemas is disabled; put definitions under $defs")

// compileSchema lints doc against RFC-0001 6.3 and compiles it under draft
// 2020-12. The compiler has its own loader that refuses every URL, so
// nothing is read from the filesystem or network.
//
// A built-in tool's schema, byte for byte as Builtins declares it, is not
// compiled here but at its first use (see builtinSchema): listing the tools
// or running one of them then compiles none or two schemas, not all of
// them, which is most of the CLI's start-up time. TestBuiltinSchemas
// compiles every one of them, so the deferral defers no error.
func compileSchema(tool, which string, doc json.RawMessage) (*compiled, error) {
	if builtinSchema(tool, which, doc) {
		return &compiled{deferred: &deferredSchema{tool: tool, which: which, doc: doc}}, nil
	}
	return compileNow(tool, which, doc)
}

// compileNow is compileSchema without the deferral.
func compileNow(tool, which string, doc json.RawMessage) (*compiled, error) {
	v, err := decodeJSON(doc)
	if err != nil {
		return nil, &SchemaError{Tool: tool, Schema: which, Reason: "not valid JSON: " + err.Error()}
	}
	if ptr, reason := lintSchema(v, which == "inputSchema"); reason != "" {
		return nil, &SchemaError{Tool: tool, Schema: which, Pointer: ptr, Reason: reason}
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	base := "toolgate:///" + tool + "/"
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		// Name a relative reference as written, not by the internal base URL.
		ref := strings.TrimPrefix(strings.TrimPrefix(s, base), "toolgate://")
		return nil, fmt.Errorf("%w (%s)", errNoLoad, ref)
	}
	url := base + which + ".json"
	if err := c.AddResource(url, bytes.NewReader(doc)); err != nil {
		return nil, &SchemaError{Tool: tool, Schema: which, Reason: err.Error()}
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, &SchemaError{Tool: tool, Schema: which, Pointer: schemaErrPointer(err), Reason: compileReason(err)}
	}
	return &compiled{full: s, fast: buildFast(v, true), doc: v}, nil
}

// compiled is a schema compiled for the full validator, and its fastSchema
// when it has one (see fastSchema).
type compiled struct {
	full *jsonschema.Schema
	fast *fastSchema // nil: the schema uses something a fastSchema does not handle
	doc  any         // the schema document, decoded
	// deferred: a built-in tool's schema, compiled at its first use; full
	// and fast are then unused (see load).
	deferred *deferredSchema
}

// deferredSchema is a schema compiled once, when first used.
type deferredSchema struct {
	tool, which string
	doc         json.RawMessage
	once        sync.Once
	c           *compiled
	err         error
}

// load returns s compiled: s itself, or its deferred schema, compiled now
// if this is its first use. An error (a built-in schema that does not
// compile: TestBuiltinSchemas rules it out) fails every validation
// against s.
func (s *compiled) load() (*compiled, error) {
	d := s.deferred
	if d == nil {
		return s, nil
	}
	d.once.Do(func() { d.c, d.err = compileNow(d.tool, d.which, d.doc) })
	return d.c, d.err
}

// builtinSchemas are the schemas of the built-in tools, by tool key and
// schema name, built once when first needed.
var builtinSchemas = sync.OnceValue(func() map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for _, t := range Builtins() {
		d := t.Declaration()
		m[d.Key()+" inputSchema"] = d.InputSchema
		m[d.Key()+" outputSchema"] = d.OutputSchema
	}
	return m
})

// builtinSchema reports whether doc is, byte for byte, schema which of the
// built-in tool key.
func builtinSchema(key, which string, doc json.RawMessage) bool {
	b, ok := builtinSchemas()[key+" "+which]
	return ok && bytes.Equal(b, doc)
}

// compileReason flattens a compile error into one line without the
// compiler's internal URLs.
func compileReason(err error) string {
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		// Only the leaf causes say what is wrong; the others are
		// "allOf failed" and the like.
		var msgs []string
		for _, p := range problems(ve) {
			if p.Message != "" {
				msgs = append(msgs, locationOr(p.Location)+p.Message)
			}
		}
		if len(msgs) > 0 {
			return "not a valid JSON Schema: " + strings.Join(msgs, "; ")
		}
	}
	msg := err.Error()
	if i := strings.Index(msg, "toolgate:///"); i >= 0 {
		// "... jsonschema toolgate:///x/inputSchema.json#/... compilation failed: reason"
		if j := strings.Index(msg[i:], ": "); j >= 0 {
			msg = msg[i+j+2:]
		}
	}
	return msg
}

func locationOr(loc string) string {
	if loc == "" {
		return ""
	}
	return loc + ": "
}

// schemaErrPointer returns the instance location of the first leaf cause of
// a meta-schema violation, which is a pointer into the schema document at
// the offending keyword (not at an enclosing schema whose allOf failed).
func schemaErrPointer(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return ""
	}
	for _, p := range problems(ve) {
		if p.Location != "" {
			return p.Location
		}
	}
	return ""
}

// decodeJSON decodes exactly one JSON value, keeping numbers exact. Input
// that is not valid UTF-8 is refused rather than silently repaired.
func decodeJSON(b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not valid UTF-8")
	}
	if err := pairedSurrogates(b); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	if err := noDuplicateKeys(b); err != nil {
		return nil, err
	}
	return v, nil
}

// pairedSurrogates refuses a JSON text (valid, or about to be refused as
// invalid) with a \u escape of half a UTF-16 surrogate pair: it names no
// character, so it is no valid Unicode text (I-JSON, RFC 7493 2.1), and
// encoding/json would silently turn it into U+FFFD, handing the tool a
// name other than the one given.
func pairedSurrogates(b []byte) error {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range b[i+2 : i+6] {
			switch {
			case '0' <= c && c <= '9':
				r = r<<4 | rune(c-'0')
			case 'a' <= c && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case 'A' <= c && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i < len(b); {
		r, ok := hex4(i)
		switch {
		case !ok:
			i += 2 // another escape, \\ included
		case 0xD800 <= r && r <= 0xDBFF:
			if lo, ok := hex4(i + 6); ok && 0xDC00 <= lo && lo <= 0xDFFF {
				i += 12
				break
			}
			return fmt.Errorf("not valid Unicode: the escape \\u%04x at offset %d is half of a UTF-16 surrogate pair, without its other half", r, i)
		case 0xDC00 <= r && r <= 0xDFFF:
			return fmt.Errorf("not valid Unicode: the escape \\u%04x at offset %d is half of a UTF-16 surrogate pair, without its other half", r, i)
		default:
			i += 6
		}
		if i >= len(b) {
			break
		}
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			break
		}
		i += j
	}
	return nil
}

// noDuplicateKeys refuses a JSON value (already known to be valid) in
// which an object has the same member name twice. encoding/json keeps the
// last one: a person approving an input that shows both would not know
// which one the tool gets (RFC 8259 leaves it undefined; I-JSON, RFC 7493,
// forbids it).
func noDuplicateKeys(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // a number out of float64's range is the schema's to refuse
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next token in this object is a member name
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if delim, ok := tok.(json.Delim); ok && delim == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			name, _ := tok.(string)
			if top.keys[name] {
				return fmt.Errorf("duplicate member name %q at offset %d", name, d.InputOffset())
			}
			top.keys[name] = true
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // a value ends here or begins a nested one
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// lintSchema checks the RFC-0001 6.3 rules and returns the JSON pointer of
// the first offence and why, or "" reason when the schema conforms:
// $schema is draft 2020-12, the root has a type (object for inputs), every
// object schema with properties lists its required ones, and every property
// has a type and a description. Subschemas are checked recursively.
func lintSchema(v any, input bool) (ptr, reason string) {
	root, ok := v.(map[string]any)
	if !ok {
		return "", "a schema must be a JSON object"
	}
	switch s, ok := root["$schema"]; {
	case !ok:
		return "/$schema", "missing; declare \"$schema\": \"" + Draft202012 + "\""
	case strings.TrimSuffix(fmt.Sprint(s), "#") != Draft202012:
		return "/$schema", fmt.Sprintf("%v is not JSON Schema draft 2020-12 (%s)", s, Draft202012)
	}
	if _, ok := root["type"]; !ok {
		return "/type", "missing; the schema must define its type"
	}
	if input && root["type"] != "object" {
		return "/type", "an input schema must be of type \"object\""
	}
	return lintNode(root, "")
}

// Keywords whose value is a subschema, an array of them, or a map of them.
var (
	subschemaKeys      = []string{"items", "contains", "not", "if", "then", "else", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "contentSchema"}
	subschemaListKeys  = []string{"prefixItems", "allOf", "anyOf", "oneOf"}
	subschemaMapKeys   = []string{"$defs", "definitions", "patternProperties", "dependentSchemas"}
	pointerTokenEscape = strings.NewReplacer("~", "~0", "/", "~1")
)

func lintNode(node map[string]any, ptr string) (p, reason string) {
	walkLint(node, ptr, func(fp, fr string) bool {
		p, reason = fp, fr
		return false
	})
	return p, reason
}

// walkLint calls report with each RFC-0001 6.3 finding under node (an
// object schema with properties lists its required ones, every property
// has a type and a description), in document order, until report returns
// false; it returns false when stopped.
func walkLint(node map[string]any, ptr string, report func(ptr, reason string) bool) bool {
	if props, ok := node["properties"]; ok {
		pm, ok := props.(map[string]any)
		if !ok {
			return report(ptr+"/properties", "must be an object")
		}
		if _, ok := node["required"]; !ok {
			if !report(ptr+"/required", "missing; list the required properties (an empty list if none)") {
				return false
			}
		}
		names := make([]string, 0, len(pm))
		for name := range pm {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			p := ptr + "/properties/" + pointerTokenEscape.Replace(name)
			sub, ok := pm[name].(map[string]any)
			if !ok {
				if !report(p, "a property schema must be an object") {
					return false
				}
				continue
			}
			if _, ok := sub["type"]; !ok {
				if !report(p+"/type", "missing; every property must define its type") {
					return false
				}
			}
			if d, ok := sub["description"].(string); !ok || strings.TrimSpace(d) == "" {
				if !report(p+"/description", "missing; every property must have a description") {
					return false
				}
			}
			if !walkLint(sub, p, report) {
				return false
			}
		}
	}
	for _, k := range subschemaKeys {
		if sub, ok := node[k].(map[string]any); ok {
			if !walkLint(sub, ptr+"/"+k, report) {
				return false
			}
		}
	}
	for _, k := range subschemaListKeys {
		list, _ := node[k].([]any)
		for i, item := range list {
			if sub, ok := item.(map[string]any); ok {
				if !walkLint(sub, fmt.Sprintf("%s/%s/%d", ptr, k, i), report) {
					return false
				}
			}
		}
	}
	for _, k := range subschemaMapKeys {
		m, _ := node[k].(map[string]any)
		keys := make([]string, 0, len(m))
		for name := range m {
			keys = append(keys, name)
		}
		slices.Sort(keys)
		for _, name := range keys {
			if sub, ok := m[name].(map[string]any); ok {
				if !walkLint(sub, ptr+"/"+k+"/"+pointerTokenEscape.Replace(name), report) {
					return false
				}
			}
		}
	}
	return true
}

// validateValue decodes raw and validates it against s. It returns the
// decoded value or a *ValueError; or, when s's fastSchema proves raw valid
// without decoding it (see fastSchema), nil and nil.
func validateValue(s *compiled, which string, raw []byte) (any, error) {
	if s.fastValid(raw) {
		return nil, nil
	}
	return validateFull(s, which, raw)
}

// validateFull is validateValue without the fast path: raw decoded in full
// and checked by the full validator.
func validateFull(s *compiled, which string, raw []byte) (any, error) {
	s, err := s.load()
	if err != nil {
		return nil, err
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, &ValueError{Which: which, Malformed: true, Problems: []Problem{{Message: err.Error()}}}
	}
	if err := s.full.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, &ValueError{Which: which, Problems: []Problem{{Message: err.Error()}}}
		}
		ps := problems(ve)
		explainPatterns(s.doc, ve, ps)
		return nil, &ValueError{Which: which, Problems: ps}
	}
	return v, nil
}

// explainPatterns adds to each "does not match pattern" problem the
// description of the schema that holds the pattern, which says in words
// what the regular expression means ("any UTF-8 name without control
// characters"). ps are problems(ve), in the same order.
func explainPatterns(doc any, ve *jsonschema.ValidationError, ps []Problem) {
	i := 0
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		defer func() { i++ }()
		_, frag, ok := strings.Cut(e.AbsoluteKeywordLocation, "#")
		if !ok || !strings.HasSuffix(frag, "/pattern") || i >= len(ps) {
			return
		}
		node := doc
		for _, tok := range strings.Split(strings.TrimPrefix(strings.TrimSuffix(frag, "/pattern"), "/"), "/") {
			if tok == "" {
				continue
			}
			m, _ := node.(map[string]any)
			node = m[strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)]
		}
		if m, _ := node.(map[string]any); m != nil {
			if desc, _ := m["description"].(string); desc != "" {
				ps[i].Message += " (" + desc + ")"
			}
		}
	}
	walk(ve)
}

// problems flattens a validation error into its leaf causes, the ones that
// say what is actually wrong.
func problems(ve *jsonschema.ValidationError) []Problem {
	var out []Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, Problem{Location: e.InstanceLocation, Message: e.Message})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out
}

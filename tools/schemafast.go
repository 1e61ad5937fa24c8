package tools

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A fastSchema checks a value against a schema written in a small subset of
// JSON Schema (type, properties, required, additionalProperties, items,
// minLength, maxLength, pattern, minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, enum of strings, maxItems, maxProperties, propertyNames,
// and annotations), straight from the value's bytes: no decoding into
// map[string]any and none of the full validator's deep recursion, whose
// stack is regrown on every call once the GC has shrunk it.
//
// It only ever proves a value valid. When it cannot (the value is invalid,
// or uses something it does not handle, such as an escaped object key or a
// non-integer number where an integer is expected), validateValue runs the
// full validator, which decides and describes the problems. So a fastSchema
// must never accept what the full validator refuses; it may refuse what the
// full validator accepts.
type fastSchema struct {
	never    bool  // the false schema
	types    uint8 // allowed types (fast* bits); 0 allows every type
	props    map[string]*fastSchema
	required []string // at most 64
	noAddl   bool     // additionalProperties: false
	addl     *fastSchema
	items    *fastSchema
	minLen   int // of a string, in runes; -1 if not set
	maxLen   int
	pattern  *regexp.Regexp
	// Bounds of a number, when set: only integers within int64, in both
	// the schema and the value, are compared here.
	min, max, exMin, exMax *int64
	enum                   []string    // only strings; nil if not set
	maxItems, maxProps     int         // -1 if not set
	names                  *fastSchema // propertyNames
}

const (
	fastObject uint8 = 1 << iota
	fastArray
	fastString
	fastInteger
	fastNumber // integers too
	fastBoolean
	fastNull
)

var fastTypes = map[string]uint8{
	"object": fastObject, "array": fastArray, "string": fastString, "integer": fastInteger,
	"number": fastNumber, "boolean": fastBoolean, "null": fastNull,
}

// fastKeywords are the keywords a fastSchema handles: the assertions
// above, and annotations that assert nothing.
var fastKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true,
	"minLength": true, "maxLength": true, "pattern": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"enum": true, "maxItems": true, "maxProperties": true, "propertyNames": true,
	"title": true, "description": true, "$comment": true, "default": true, "examples": true,
}

// buildFast returns the fastSchema of a decoded schema document, or nil if
// the document uses anything a fastSchema does not handle.
func buildFast(doc any, root bool) *fastSchema {
	switch v := doc.(type) {
	case bool:
		f := newFast()
		f.never = !v
		return f
	case map[string]any:
		f := newFast()
		for k, kv := range v {
			switch {
			case k == "$schema" && root:
				continue
			case !fastKeywords[k]:
				return nil
			}
			switch k {
			case "type":
				switch t := kv.(type) {
				case string:
					if fastTypes[t] == 0 {
						return nil
					}
					f.types = fastTypes[t]
				case []any:
					if len(t) == 0 {
						return nil
					}
					for _, e := range t {
						s, _ := e.(string)
						if fastTypes[s] == 0 {
							return nil
						}
						f.types |= fastTypes[s]
					}
				default:
					return nil
				}
			case "properties":
				m, ok := kv.(map[string]any)
				if !ok {
					return nil
				}
				f.props = make(map[string]*fastSchema, len(m))
				for name, sub := range m {
					if f.props[name] = buildFast(sub, false); f.props[name] == nil {
						return nil
					}
				}
			case "required":
				l, ok := kv.([]any)
				if !ok || len(l) > 64 {
					return nil
				}
				for _, e := range l {
					s, ok := e.(string)
					if !ok {
						return nil
					}
					f.required = append(f.required, s)
				}
			case "additionalProperties":
				if b, ok := kv.(bool); ok && !b {
					f.noAddl = true
				} else if f.addl = buildFast(kv, false); f.addl == nil {
					return nil
				}
			case "items":
				if f.items = buildFast(kv, false); f.items == nil {
					return nil
				}
			case "enum":
				// Strings only: a string value without escapes equals a
				// member when its bytes do. (A non-string value then equals
				// none, and is refused.)
				l, ok := kv.([]any)
				if !ok || len(l) == 0 {
					return nil
				}
				f.enum = make([]string, 0, len(l))
				for _, e := range l {
					str, ok := e.(string)
					if !ok {
						return nil
					}
					f.enum = append(f.enum, str)
				}
			case "propertyNames":
				if f.names = buildFast(kv, false); f.names == nil {
					return nil
				}
			case "maxItems", "maxProperties":
				n, ok := kv.(json.Number)
				if !ok {
					return nil
				}
				i, ok := plainInt(n)
				if !ok || i < 0 || i > 1<<31 {
					return nil
				}
				if k == "maxItems" {
					f.maxItems = int(i)
				} else {
					f.maxProps = int(i)
				}
			case "minLength", "maxLength":
				// Only plain digits: the validator reads 64.0 or 6.4e1
				// through a float, which is not worth repeating here.
				n, ok := kv.(json.Number)
				if !ok {
					return nil
				}
				i, err := strconv.Atoi(string(n))
				if err != nil || i < 0 || strings.TrimLeft(string(n), "0123456789") != "" {
					return nil
				}
				if k == "minLength" {
					f.minLen = i
				} else {
					f.maxLen = i
				}
			case "pattern":
				// Compiled as the validator compiles it; it matches the
				// decoded string, which fastSchema only checks when that
				// is the raw bytes.
				src, ok := kv.(string)
				if !ok {
					return nil
				}
				re, err := regexp.Compile(src)
				if err != nil {
					return nil
				}
				f.pattern = re
			case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
				n, ok := kv.(json.Number)
				if !ok {
					return nil
				}
				i, ok := plainInt(n)
				if !ok {
					return nil
				}
				switch k {
				case "minimum":
					f.min = &i
				case "maximum":
					f.max = &i
				case "exclusiveMinimum":
					f.exMin = &i
				default:
					f.exMax = &i
				}
			}
		}
		return f
	}
	return nil
}

func newFast() *fastSchema {
	return &fastSchema{minLen: -1, maxLen: -1, maxItems: -1, maxProps: -1}
}

// plainInt returns n as an int64 if it is written as one: an optional minus
// and digits only, within range.
func plainInt(n json.Number) (int64, bool) {
	d := strings.TrimPrefix(string(n), "-")
	if d == "" || strings.TrimLeft(d, "0123456789") != "" {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

// valid reports whether raw, one JSON value in valid UTF-8, is proven valid
// under f. raw must have passed json.Valid.
func (f *fastSchema) valid(raw []byte) bool {
	s := scanner{b: raw}
	return f.check(&s)
}

// scanner walks JSON known to be syntactically valid.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str passes the string at s.i and returns its bytes between the quotes
// and whether it has escapes.
func (s *scanner) str() (raw []byte, escaped bool) {
	s.i++
	start := s.i
	for {
		switch s.b[s.i] {
		case '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, escaped
		case '\\':
			escaped = true
			s.i += 2
		default:
			s.i++
		}
	}
}

// keySet holds the member names of one object seen so far, to find a
// duplicate: a linear search while there are few, a map beyond, so that an
// object of many members costs linear time, not quadratic.
type keySet struct {
	small [16][]byte
	n     int
	big   map[string]struct{}
}

// add records key and reports whether it is new.
func (k *keySet) add(key []byte) bool {
	if k.big != nil {
		if _, dup := k.big[string(key)]; dup {
			return false
		}
		k.big[string(key)] = struct{}{}
		return true
	}
	for _, s := range k.small[:k.n] {
		if string(s) == string(key) {
			return false
		}
	}
	if k.n < len(k.small) {
		k.small[k.n] = key
		k.n++
		return true
	}
	k.big = make(map[string]struct{}, 4*len(k.small))
	for _, s := range k.small {
		k.big[string(s)] = struct{}{}
	}
	k.big[string(key)] = struct{}{}
	return true
}

// maxSkipDepth bounds how deep skip follows nested values; deeper ones are
// left to the full validator.
const maxSkipDepth = 64

// skip passes the value at s.i, reporting false (not proven valid) if an
// object in it has a member name twice, or one that is escaped, or if it
// nests deeper than maxSkipDepth. After false, s is left anywhere.
func (s *scanner) skip() bool { return s.skipAt(0) }

func (s *scanner) skipAt(depth int) bool {
	s.ws()
	switch s.b[s.i] {
	case '"':
		s.str()
		return true
	case '[':
		if depth == maxSkipDepth {
			return false
		}
		s.i++
		s.ws()
		if s.b[s.i] == ']' {
			s.i++
			return true
		}
		for {
			if !s.skipAt(depth + 1) {
				return false
			}
			s.ws()
			s.i++ // , or ]
			if s.b[s.i-1] == ']' {
				return true
			}
		}
	case '{':
		if depth == maxSkipDepth {
			return false
		}
		s.i++
		s.ws()
		if s.b[s.i] == '}' {
			s.i++
			return true
		}
		var keys keySet
		for {
			s.ws()
			key, escaped := s.str()
			if escaped || !keys.add(key) {
				return false
			}
			s.ws()
			s.i++ // :
			if !s.skipAt(depth + 1) {
				return false
			}
			s.ws()
			s.i++ // , or }
			if s.b[s.i-1] == '}' {
				return true
			}
		}
	default:
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
			s.i++
		}
		return true
	}
}

// check passes the value at s.i, reporting whether it is proven valid
// under f. After false, s is left anywhere.
func (f *fastSchema) check(s *scanner) bool {
	if f.never {
		return false
	}
	s.ws()
	if f.enum != nil && s.b[s.i] != '"' {
		return false // only strings are members
	}
	var t uint8
	switch c := s.b[s.i]; {
	case c == '{':
		if f.types != 0 && f.types&fastObject == 0 {
			return false
		}
		return f.object(s)
	case c == '[':
		if f.types != 0 && f.types&fastArray == 0 {
			return false
		}
		return f.array(s)
	case c == '"':
		t = fastString
		if !f.stringOK(s.str()) {
			return false
		}
	case c == 't' || c == 'f' || c == 'n':
		t = fastBoolean
		if c == 'n' {
			t = fastNull
		}
		s.skip() // a literal
	default:
		start := s.i
		s.skip()
		t = fastNumber
		if f.types != 0 && f.types&fastNumber == 0 {
			// Only an integer will do; a fraction or exponent may still
			// be one (1.0, 1e2), which the full validator decides.
			for _, c := range s.b[start:s.i] {
				if c == '.' || c == 'e' || c == 'E' {
					return false
				}
			}
			t = fastInteger
		}
		if f.min != nil || f.max != nil || f.exMin != nil || f.exMax != nil {
			v, ok := plainInt(json.Number(s.b[start:s.i]))
			if !ok ||
				f.min != nil && v < *f.min || f.max != nil && v > *f.max ||
				f.exMin != nil && v <= *f.exMin || f.exMax != nil && v >= *f.exMax {
				return false
			}
		}
	}
	return f.types == 0 || f.types&t != 0
}

// stringOK reports whether a string, its bytes between the quotes being
// raw, meets f's string keywords.
func (f *fastSchema) stringOK(raw []byte, escaped bool) bool {
	if f.minLen < 0 && f.maxLen < 0 && f.pattern == nil && f.enum == nil {
		return true
	}
	if escaped {
		return false // the decoded string is not its bytes
	}
	if f.minLen >= 0 || f.maxLen >= 0 {
		n := utf8.RuneCount(raw)
		if f.minLen >= 0 && n < f.minLen || f.maxLen >= 0 && n > f.maxLen {
			return false
		}
	}
	if f.pattern != nil && !f.pattern.Match(raw) {
		return false
	}
	if f.enum != nil && !slices.Contains(f.enum, string(raw)) {
		return false
	}
	return true
}

// nameOK reports whether an object key, raw and unescaped, is valid under
// f as propertyNames: a string.
func (f *fastSchema) nameOK(raw []byte) bool {
	return !f.never && (f.types == 0 || f.types&fastString != 0) && f.stringOK(raw, false)
}

func (f *fastSchema) object(s *scanner) bool {
	s.i++ // {
	var seen uint64
	count := 0
	var keys keySet // a duplicate is for the full path to refuse
	s.ws()
	if s.b[s.i] == '}' {
		s.i++
	} else {
		for {
			s.ws()
			key, escaped := s.str()
			if escaped {
				return false // its name is not its bytes
			}
			if !keys.add(key) {
				return false
			}
			s.ws()
			s.i++ // :
			if count++; f.maxProps >= 0 && count > f.maxProps {
				return false
			}
			if f.names != nil && !f.names.nameOK(key) {
				return false
			}
			for i, r := range f.required {
				if r == string(key) {
					seen |= 1 << i
				}
			}
			switch sub, ok := f.props[string(key)]; {
			case ok:
				if !sub.check(s) {
					return false
				}
			case f.noAddl:
				return false
			case f.addl != nil:
				if !f.addl.check(s) {
					return false
				}
			default:
				if !s.skip() {
					return false
				}
			}
			s.ws()
			if s.b[s.i] == ',' {
				s.i++
				continue
			}
			s.i++ // }
			break
		}
	}
	return seen == 1<<len(f.required)-1
}

func (f *fastSchema) array(s *scanner) bool {
	if f.items == nil && f.maxItems < 0 {
		return s.skip()
	}
	s.i++ // [
	s.ws()
	if s.b[s.i] == ']' {
		s.i++
		return true
	}
	for n := 1; ; n++ {
		if f.maxItems >= 0 && n > f.maxItems {
			return false
		}
		if f.items == nil {
			if !s.skip() {
				return false
			}
		} else if !f.items.check(s) {
			return false
		}
		s.ws()
		if s.b[s.i] == ',' {
			s.i++
			continue
		}
		s.i++ // ]
		return true
	}
}

// fastValid reports whether raw is proven valid by s's fastSchema: one
// JSON value in valid UTF-8 that the fastSchema accepts. false means "not
// proven", never "invalid": the full validator decides then.
func (s *compiled) fastValid(raw []byte) bool {
	s, err := s.load()
	if err != nil {
		return false // validateFull reports it
	}
	return s.fast != nil && utf8.Valid(raw) && json.Valid(raw) && pairedSurrogates(raw) == nil && s.fast.valid(raw)
}

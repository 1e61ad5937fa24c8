package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ArgvTemplate is the argv of a registry file tool: a list whose elements
// are each a literal string or exactly one reference to an input field
// ("{path}") occupying the whole element. Parse it with ParseArgvTemplate;
// Expand places validated input values as whole arguments, never spliced
// into a string and never through a shell.
type ArgvTemplate struct {
	elems []argvElem
}

type argvElem struct {
	literal string
	field   string // set for a reference
	afterDD bool   // the reference comes after a literal "--"
}

// TemplateError reports an argv template element that cannot be parsed.
type TemplateError struct {
	Index  int // the element
	Reason string
}

func (e *TemplateError) Error() string {
	return fmt.Sprintf("tools: argv[%d]: %s", e.Index, e.Reason)
}

var refRE = regexp.MustCompile(`^\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// ParseArgvTemplate parses an argv template. "{name}" as a whole element
// is a reference to the input field name; "{{" and "}}" in a literal are
// literal braces; any other brace is an error (a reference spliced into a
// literal, "--out={path}", is refused: it would make one argument of a
// value and something else). It returns a *TemplateError.
func ParseArgvTemplate(elems []string) (*ArgvTemplate, error) {
	t := &ArgvTemplate{}
	afterDD := false
	for i, e := range elems {
		if strings.ContainsRune(e, 0) {
			return nil, &TemplateError{i, "contains a NUL byte"}
		}
		if m := refRE.FindStringSubmatch(e); m != nil {
			t.elems = append(t.elems, argvElem{field: m[1], afterDD: afterDD})
			continue
		}
		lit, err := unescapeBraces(e)
		if err != nil {
			return nil, &TemplateError{i, err.Error()}
		}
		if lit == "--" {
			afterDD = true
		}
		t.elems = append(t.elems, argvElem{literal: lit})
	}
	return t, nil
}

func unescapeBraces(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '{' && c != '}' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == c {
			b.WriteByte(c)
			i++
			continue
		}
		if c == '{' && strings.Contains(s[i:], "}") {
			return "", fmt.Errorf("%q splices a field reference into a literal; a reference must be a whole element, such as \"{path}\" (write literal braces as {{ and }})", s)
		}
		return "", fmt.Errorf("%q has an unpaired %q; write literal braces as {{ and }}", s, string(c))
	}
	return b.String(), nil
}

// Fields returns the input fields the template refers to, in order, each
// once.
func (t *ArgvTemplate) Fields() []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range t.elems {
		if e.field != "" && !seen[e.field] {
			seen[e.field] = true
			out = append(out, e.field)
		}
	}
	return out
}

// Expand returns the arguments for input, an object decoded from JSON
// (with json.Number or float64 numbers). A string or number field gives one
// argument, an array of strings one argument per item, an absent field
// none. A value starting with "-" is refused unless its reference comes
// after a literal "--" (so a value is never taken for an option), and so is
// a value holding a NUL byte or of another type. Errors are
// *ArgumentError.
func (t *ArgvTemplate) Expand(input map[string]any) ([]string, error) {
	out := make([]string, 0, len(t.elems))
	for _, e := range t.elems {
		if e.field == "" {
			out = append(out, e.literal)
			continue
		}
		v, ok := input[e.field]
		if !ok || v == nil {
			continue
		}
		add := func(field, s string) error {
			switch {
			case strings.ContainsRune(s, 0):
				return &ArgumentError{Field: field, Reason: "contains a NUL byte"}
			case strings.HasPrefix(s, "-") && !e.afterDD:
				return &ArgumentError{Field: field, Reason: fmt.Sprintf("%q starts with '-' and would be read as an option; the template must place this field after \"--\"", s)}
			}
			out = append(out, s)
			return nil
		}
		var err error
		switch v := v.(type) {
		case string:
			err = add(e.field, v)
		case json.Number:
			err = add(e.field, v.String())
		case float64:
			b, _ := json.Marshal(v)
			err = add(e.field, string(b))
		case []any:
			for i, item := range v {
				s, ok := item.(string)
				if !ok {
					return nil, &ArgumentError{Field: fmt.Sprintf("%s[%d]", e.field, i), Reason: fmt.Sprintf("a %T cannot be an argument; only strings", item)}
				}
				if err = add(fmt.Sprintf("%s[%d]", e.field, i), s); err != nil {
					break
				}
			}
		default:
			err = &ArgumentError{Field: e.field, Reason: fmt.Sprintf("a %T cannot be an argument", v)}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// errNotPlaceable is why a field's schema type cannot be placed in argv.
var errNotPlaceable = errors.New("only string, number, integer and array-of-string fields can be placed in argv")

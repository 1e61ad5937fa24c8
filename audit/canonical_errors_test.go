package audit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

// refusal is an input Canonicalize refuses and the message it refuses it
// with, after "audit: not canonicalizable: ".
type refusal struct{ in, why string }

// refusals pins the message of each way an input can be refused: what is
// wrong and the byte offset where the encoder stood when it found it.
var refusals = []refusal{
	{``, `unexpected end of input at offset 0`},
	{` `, `unexpected end of input at offset 1`},
	{`[x]`, `unexpected character 'x' at offset 1`},
	{`{} x`, `trailing data after the JSON value at offset 3`},
	{`[1]]`, `trailing data after the JSON value at offset 3`},

	// Invalid UTF-8: the offset of the first bad byte, after ASCII and
	// multi-byte characters.
	{"\xff", `invalid UTF-8 at offset 0`},
	{"[\"a\u00e9\xff\"]", `invalid UTF-8 at offset 5`},
	{"[\"\u00e9\u20ac\xed\xa0\x80\"]", `invalid UTF-8 at offset 7`},

	// Literals and numbers.
	{`tru`, `invalid literal at offset 0`},
	{`[nul`, `invalid literal at offset 1`},
	{`[fals]`, `invalid literal at offset 1`},
	{`-`, `invalid number at offset 1`},
	{`[-x]`, `invalid number at offset 2`},
	{`1.`, `invalid number: no digits after '.' at offset 2`},
	{`[1.e5]`, `invalid number: no digits after '.' at offset 3`},
	{`1e`, `invalid number: no digits in exponent at offset 2`},
	{`1e+`, `invalid number: no digits in exponent at offset 3`},
	{`[1E-]`, `invalid number: no digits in exponent at offset 4`},
	{`[1e400]`, `number 1e400 at offset 1 overflows an IEEE-754 double`},
	{`{"a":-1.8e308}`, `number -1.8e308 at offset 5 overflows an IEEE-754 double`},

	// Strings.
	{`"abc`, `unterminated string at offset 4`},
	{`"abc\`, `unterminated string at offset 4`},
	{`["a\"`, `unterminated string at offset 5`},
	{"\"a\x1f\"", `control character 0x1f in string at offset 2`},
	{"[\"\\n\x00\"]", `control character 0x00 in string at offset 4`},
	{`"\x41"`, `invalid escape '\x' in string at offset 3`},
	{`"\u00`, `truncated \u escape at offset 3`},
	{`"\u00g0"`, `invalid hex digit 'g' in \u escape at offset 3`},
	{`"\u00G0"`, `invalid hex digit 'G' in \u escape at offset 3`},
	{`"\u/000"`, `invalid hex digit '/' in \u escape at offset 3`},
	{`"\u:000"`, `invalid hex digit ':' in \u escape at offset 3`},
	{"\"\\u`000\"", "invalid hex digit '`' in \\u escape at offset 3"},
	{`"\u@000"`, `invalid hex digit '@' in \u escape at offset 3`},
	{`"\udc00"`, `lone low surrogate \udc00 in string at offset 7`},
	{`"\udfff"`, `lone low surrogate \udfff in string at offset 7`},
	{`"\ud800"`, `lone high surrogate \ud800 in string at offset 7`},
	{`"\udbff"`, `lone high surrogate \udbff in string at offset 7`},
	// A high surrogate at the very end of the input, or before a lone
	// backslash there.
	{`"\ud800`, `lone high surrogate \ud800 in string at offset 7`},
	{`"\ud800\`, `lone high surrogate \ud800 in string at offset 7`},
	{`"\ud800\n"`, `lone high surrogate \ud800 in string at offset 7`},
	{`"\ud800u0000"`, `lone high surrogate \ud800 in string at offset 7`},
	{`"\ud800\u`, `truncated \u escape at offset 9`},
	{`"\ud800\u00zz"`, `invalid hex digit 'z' in \u escape at offset 9`},
	{`"\ud800\udbff"`, `high surrogate \ud800 not followed by a low surrogate at offset 13`},
	{`"\ud800\ue000"`, `high surrogate \ud800 not followed by a low surrogate at offset 13`},
	{`"\udbff\u0041"`, `high surrogate \udbff not followed by a low surrogate at offset 13`},

	// Arrays and objects.
	{`[`, `unexpected end of input at offset 1`},
	{`[1`, `unexpected end of input in array at offset 2`},
	{`[1 x`, `expected ',' or ']' in array at offset 3`},
	{`{`, `expected a string member name at offset 1`},
	{`{1:2}`, `expected a string member name at offset 1`},
	{`{"a":1,`, `expected a string member name at offset 7`},
	{`{"a":1,}`, `expected a string member name at offset 7`},
	{`{"a`, `unterminated string at offset 3`},
	{`{"a\"}`, `unterminated string at offset 6`},
	{`{"a"`, `expected ':' after member name at offset 4`},
	{`{"a" 1}`, `expected ':' after member name at offset 5`},
	{`{"a":`, `unexpected end of input at offset 5`},
	{`{"a":1`, `unexpected end of input in object at offset 6`},
	{`{"a":1 x`, `expected ',' or '}' in object at offset 7`},
	{`{"a":[1,{"b":2]}`, `expected ',' or '}' in object at offset 14`},
	{`{"a":1,"a":2}`, `duplicate member name "a" at offset 7`},
}

// TestCanonicalize_RefusalMessages holds Canonicalize and Hash to the
// message each refusal gives: what is wrong, and where.
func TestCanonicalize_RefusalMessages(t *testing.T) {
	const prefix = "audit: not canonicalizable: "
	for _, tc := range refusals {
		out, err := audit.Canonicalize([]byte(tc.in))
		if err == nil || out != nil {
			t.Errorf("Canonicalize(%q) = %q, %v; want the error %q", tc.in, out, err, tc.why)
			continue
		}
		if !errors.Is(err, audit.ErrNotCanonicalizable) || err.Error() != prefix+tc.why {
			t.Errorf("Canonicalize(%q): %v\nwant %s%s", tc.in, err, prefix, tc.why)
		}
		if _, herr := audit.Hash([]byte(tc.in)); herr == nil || herr.Error() != err.Error() {
			t.Errorf("Hash(%q): %v, Canonicalize: %v", tc.in, herr, err)
		}
	}
}

// TestCanonicalize_DuplicateReported pins which duplicate an input with
// several faults is refused for. Canonicalize reports the first fault it
// finds reading the input in order, and it finds an object's duplicate
// names when the object closes: of the names an object repeats, the
// repetition that comes first in the input; an inner object's duplicate
// before its parent's; a syntax error anywhere before the end of the object
// before its duplicates.
func TestCanonicalize_DuplicateReported(t *testing.T) {
	cases := []refusal{
		// The earliest repetition, whatever order the names sort in.
		{`{"b":1,"a":2,"a":3,"b":4}`, `duplicate member name "a" at offset 13`},
		{`{"a":1,"b":2,"b":3,"a":4}`, `duplicate member name "b" at offset 13`},
		{`{"b":1,"a":2,"b":3,"a":4}`, `duplicate member name "b" at offset 13`},
		{`{"x":0,"b":1,"a":2,"b":3,"a":4}`, `duplicate member name "b" at offset 19`},
		// A name given three times: its second occurrence.
		{`{"a":1,"c":2,"a":3,"b":4,"a":5}`, `duplicate member name "a" at offset 13`},
		{`{"c":1,"a":2,"b":3,"a":4,"c":5,"a":6}`, `duplicate member name "a" at offset 19`},
		// Names spelled differently are the same name.
		{`{"a":1,"\u0061":2}`, `duplicate member name "a" at offset 7`},
		{`{"\n":1,"\u000a":2}`, `duplicate member name "\n" at offset 8`},
		{`{"\u00e9":1,"é":2}`, `duplicate member name "é" at offset 12`},
		{`{"\ud83d\ude00":1,"😀":2}`, `duplicate member name "😀" at offset 18`},
		// The name is reported unescaped, whatever its escapes.
		{`{"\u0000":1,"\u0000":2}`, `duplicate member name "\x00" at offset 12`},
		{`{"\u0019":1,"\u0019":2}`, `duplicate member name "\x19" at offset 12`},
		{`{"\u001A":1,"\u001a":2}`, `duplicate member name "\x1a" at offset 12`},
		{`{"\"":1,"\\":2,"\"":3}`, `duplicate member name "\"" at offset 15`},
		{`{"\\":1,"\"":2,"\\":3}`, `duplicate member name "\\" at offset 15`},
		{`{"\b\f\r\t":1,"\b\f\r\t":2}`, `duplicate member name "\b\f\r\t" at offset 14`},
		{`{"a\"b\\c":1,"a\"b\\c":2}`, `duplicate member name "a\"b\\c" at offset 13`},
		// An inner object's duplicate before its parent's.
		{`{"a":1,"a":{"b":1,"b":2}}`, `duplicate member name "b" at offset 18`},
		{`{"a":{"b":1,"b":2},"a":1}`, `duplicate member name "b" at offset 12`},
		// The first object to close.
		{`[{"a":1},{"b":1,"b":2},{"c":1,"c":2}]`, `duplicate member name "b" at offset 16`},
		// A syntax error before the object closes.
		{`{"a":1,"a":2,`, `expected a string member name at offset 13`},
		{`{"a":1,"a":[1,]}`, `unexpected character ']' at offset 14`},
		// ... but not one after it.
		{`[{"a":1,"a":2}`, `duplicate member name "a" at offset 8`},
		{`{"a":1,"a":2} x`, `duplicate member name "a" at offset 7`},
	}
	for _, tc := range cases {
		_, err := audit.Canonicalize([]byte(tc.in))
		if err == nil || err.Error() != "audit: not canonicalizable: "+tc.why {
			t.Errorf("Canonicalize(%s): %v\nwant %s", tc.in, err, tc.why)
		}
	}
}

// TestCanonicalize_EscapedNames sorts names made of escapes: each is
// ordered by the character it stands for, however it is spelled, and
// written in its canonical spelling.
func TestCanonicalize_EscapedNames(t *testing.T) {
	in := `{"\u001A":1,"\u0019":2,"\u000B":3,"\t":4,"\b":5,"\\":6,"\"":7,"\u000c":8,"\u000A":9,"\r":10,` +
		`"\u0000":11,"\u0020":12,"\u0009x":13,"\u001f":14,"\u0010":15,"\u000f":16}`
	want := `{"\u0000":11,"\b":5,"\t":4,"\tx":13,"\n":9,"\u000b":3,"\f":8,"\r":10,"\u000f":16,"\u0010":15,` +
		`"\u0019":2,"\u001a":1,"\u001f":14," ":12,"\"":7,"\\":6}`
	got, err := audit.Canonicalize([]byte(in))
	if err != nil || string(got) != want {
		t.Fatalf("Canonicalize(%s)\n got %s, %v\nwant %s", in, got, err, want)
	}
	compareWithTree(t, []byte(in))

	// Characters outside the Basic Multilingual Plane sort by their
	// surrogates: before U+E000 to U+FFFF, after the rest, and among
	// themselves by the high surrogate first.
	in = "{\"\U0001F600\":1,\"\\u0001\":2,\"\\ud800\\udc00\":3,\"\U0010FFFF\":4,\"\uffff\":5,\"\U0001F5FF\":6}"
	want = "{\"\\u0001\":2,\"\U00010000\":3,\"\U0001F5FF\":6,\"\U0001F600\":1,\"\U0010FFFF\":4,\"\uffff\":5}"
	got, err = audit.Canonicalize([]byte(in))
	if err != nil || string(got) != want {
		t.Fatalf("Canonicalize(%s)\n got %s, %v\nwant %s", in, got, err, want)
	}
}

// TestCanonicalize_EscapeEdges pins the \u escapes at the edges of what is
// written escaped, the hex digits, and the ends of the surrogate ranges.
func TestCanonicalize_EscapeEdges(t *testing.T) {
	runCanonCases(t, []canonCase{
		{"last escaped control", `"\u001f"`, `"\u001f"`},
		{"space unescaped", `"\u0020"`, `" "`},
		{"bang unescaped", `"\u0021"`, `"!"`},
		{"quote and backslash", `"\u0022\u005C"`, `"\"\\"`},
		{"every hex digit", `"\u0123\u4567\u89ab\ucdef\u89AB\uCDEF"`, "\"\u0123\u4567\u89ab\ucdef\u89ab\ucdef\""},
		{"first supplementary character", `"\ud800\udc00"`, "\"\U00010000\""},
		{"last character", `"\udbff\udfff"`, "\"\U0010FFFF\""},
		{"below the surrogates", `"\ud7ff"`, "\"\ud7ff\""},
		{"above the surrogates", `"\ue000"`, "\"\ue000\""},
		{"solidus", `"\/"`, `"/"`},
	})
}

// TestCanonicalize_ClosingRestoresDepth: only nesting counts toward
// MaxDepth, not the arrays and objects that came and went before.
func TestCanonicalize_ClosingRestoresDepth(t *testing.T) {
	in := "[" + strings.Repeat(`{},[],{"a":1},[1],`, audit.MaxDepth) + "0]"
	want := "[" + strings.Repeat(`{},[],{"a":1},[1],`, audit.MaxDepth) + "0]"
	got, err := audit.Canonicalize([]byte(in))
	if err != nil || string(got) != want {
		t.Fatalf("%d sibling arrays and objects: %.80s, %v", 4*audit.MaxDepth, got, err)
	}
}

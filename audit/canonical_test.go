package audit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

type canonCase struct {
	name, in, want string
}

// RFC 8785 section 3.2.3 (sorting) and 3.2.4 (the worked example).
var rfcCases = []canonCase{
	{
		name: "rfc 3.2.3 sorting by UTF-16 code units",
		in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "😀": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
		want: `{"\r":"Carriage Return","1":"One",` +
			"\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\"," +
			"\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\"," +
			"\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
	},
	{
		name: "rfc 3.2.4 example",
		in: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
		want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],` +
			"\"string\":\"\u20ac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}",
	},
}

// The testdata of github.com/cyberphone/json-canonicalization (input and
// output directories).
var cyberphoneCases = []canonCase{
	{
		name: "arrays",
		in:   "[\n  56,\n  {\n    \"d\": true,\n    \"10\": null,\n    \"1\": [ ]\n  }\n]",
		want: `[56,{"1":[],"10":null,"d":true}]`,
	},
	{
		name: "french",
		in: "{\n  \"peach\": \"This sorting order\",\n  \"péché\": \"is wrong according to French\",\n" +
			"  \"pêche\": \"but canonicalization MUST\",\n  \"sin\":   \"ingnore locale\"\n}\n",
		want: `{"peach":"This sorting order","péché":"is wrong according to French",` +
			`"pêche":"but canonicalization MUST","sin":"ingnore locale"}`,
	},
	{
		name: "structures",
		in: "{\n  \"1\": {\"f\": {\"f\": \"hi\",\"F\": 5} ,\"\\n\": 56.0},\n  \"10\": { },\n  \"\": \"empty\",\n" +
			"  \"a\": { },\n  \"111\": [ { } ],\n  \"A\": { }\n}",
		want: `{"":"empty","1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{}],"A":{},"a":{}}`,
	},
	{
		name: "unicode",
		in:   "{\n  \"Unnormalized Unicode\":\"\\u1e0d\\u0307\"\n}\n",
		want: "{\"Unnormalized Unicode\":\"\u1e0d\u0307\"}",
	},
	{
		name: "values",
		in: "{\n  \"numbers\": [1E30, 4.50, 333333333.33333329, 2e-3, 0.000000000000000000000000001],\n" +
			"  \"escaping\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n" +
			"  \"literals\": [null, true, false]\n}",
		want: "{\"escaping\":\"\u20ac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\",\"literals\":[null,true,false]," +
			"\"numbers\":[1e+30,4.5,333333333.3333333,0.002,1e-27]}",
	},
	{
		name: "weird",
		in: "{\n  \"\\u20ac\": \"Euro Sign\",\n  \"1\": \"One\",\n  \"\\u0080\": \"Control\\u007f\",\n" +
			"  \"\\ud83d\\ude02\": \"Smiley\",\n  \"\\u00f6\": \"Latin Small Letter O With Diaeresis\",\n" +
			"  \"\\ufb33\": \"Hebrew Letter Dalet With Dagesh\",\n  \"</script>\": \"Browser Challenge\"\n}\n",
		want: "{\"1\":\"One\",\"</script>\":\"Browser Challenge\",\"\u0080\":\"Control\u007f\"," +
			"\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\"," +
			"\"\U0001F602\":\"Smiley\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
	},
}

var stringCases = []canonCase{
	{"plain", `"abc"`, `"abc"`},
	{"empty", `""`, `""`},
	{"quote and backslash", `"a\"b\\c"`, `"a\"b\\c"`},
	{"shortcut escapes", `"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
	{"shortcuts spelled as \\u", `"\u0008\u000c\u000A\u000D\u0009"`, `"\b\f\n\r\t"`},
	{"other controls as lowercase \\u00xx", `"\u0000\u0001\u001F\u000B\u001e"`, `"\u0000\u0001\u001f\u000b\u001e"`},
	{"solidus unescaped", `"\/a/b"`, `"/a/b"`},
	{"html characters literal", `"<a href='x'>&amp;</a>"`, `"<a href='x'>&amp;</a>"`},
	{"html characters from escapes", `"\u003c\u003e\u0026"`, `"<>&"`},
	{"line and paragraph separators literal", `"\u2028\u2029"`, "\"\u2028\u2029\""},
	{"raw line separator stays", "\"\u2028\"", "\"\u2028\""},
	{"DEL literal", `"\u007f"`, "\"\u007f\""},
	{"escaped non-ASCII becomes UTF-8", `"\u00e9\u00C9\u20AC"`, `"éÉ€"`},
	{"surrogate pair becomes UTF-8", `"\ud83d\ude00"`, `"😀"`},
	{"uppercase surrogate pair", `"\uD83D\uDE00x"`, `"😀x"`},
	{"raw UTF-8 kept", `"日本語 😀"`, `"日本語 😀"`},
	{"replacement character kept", `"\ufffd` + "\ufffd" + `"`, "\"\ufffd\ufffd\""},
	{"noncharacter kept", `"\uffff"`, "\"\uffff\""},
	{"escaped quote as \\u", `"\u0022\u005c"`, `"\"\\"`},
}

var numberCases = []canonCase{
	{"zero", `0`, `0`},
	{"negative zero", `-0`, `0`},
	{"negative zero with fraction", `-0.0`, `0`},
	{"zero with exponent", `0e10`, `0`},
	{"one", `1`, `1`},
	{"minus one", `-1`, `-1`},
	{"trailing fraction zeros", `4.50`, `4.5`},
	{"integral fraction", `56.0`, `56`},
	{"exponent integer", `1E2`, `100`},
	{"exponent with plus", `1e+2`, `100`},
	{"fraction from exponent", `2e-3`, `0.002`},
	{"rounding to double", `333333333.33333329`, `333333333.3333333`},
	{"1e30", `1E30`, `1e+30`},
	{"1e-27", `0.000000000000000000000000001`, `1e-27`},
	{"2^53+1 rounds", `9007199254740993`, `9007199254740992`},
	{"2^53", `9007199254740992`, `9007199254740992`},
	{"below 1e21 as integer", `123456789012345680000`, `123456789012345680000`},
	{"1e21 exponent form", `1e21`, `1e+21`},
	{"1e21 spelled out", `1000000000000000000000`, `1e+21`},
	{"1e20 spelled out", `1e20`, `100000000000000000000`},
	{"large with fraction digits", `1.5e300`, `1.5e+300`},
	{"0.000001 fixed", `0.000001`, `0.000001`},
	{"1e-6 fixed", `1e-6`, `0.000001`},
	{"1e-7 exponent", `1e-7`, `1e-7`},
	{"1.5e-7", `0.00000015`, `1.5e-7`},
	{"0.1", `0.1`, `0.1`},
	{"0.1+0.2 result", `0.30000000000000004`, `0.30000000000000004`},
	{"123.456", `123.456`, `123.456`},
	{"negative fraction", `-0.5`, `-0.5`},
	{"negative exponent form", `-1e-7`, `-1e-7`},
	{"negative large", `-1e21`, `-1e+21`},
	{"max double", `1.7976931348623157e308`, `1.7976931348623157e+308`},
	{"min subnormal", `5e-324`, `5e-324`},
	{"underflow to zero", `1e-400`, `0`},
	{"underflow negative", `-1e-400`, `0`},
	{"long mantissa", `3.14159265358979323846264338327950288`, `3.141592653589793`},
	{"many leading zeros in exponent", `1e0000000000000000000001`, `10`},
	{"huge negative exponent of zero", `0e-99999999999999999999`, `0`},
}

var structureCases = []canonCase{
	{"top-level true", `true`, `true`},
	{"top-level false", ` false `, `false`},
	{"top-level null", "\t\r\n null\n", `null`},
	{"top-level string", ` "x" `, `"x"`},
	{"top-level number", ` 12 `, `12`},
	{"empty object", `{ }`, `{}`},
	{"empty array", `[ ]`, `[]`},
	{"whitespace everywhere", " \n{ \"b\" :\t[ 1 , 2 ] ,\r\n\"a\" : { } } \n", `{"a":{},"b":[1,2]}`},
	{"array order kept", `[3,1,2]`, `[3,1,2]`},
	{"nested sorting", `{"z":{"b":1,"a":[{"d":1,"c":2}]},"y":null}`, `{"y":null,"z":{"a":[{"c":2,"d":1}],"b":1}}`},
	{"sort is by code unit not length", `{"aa":1,"b":2,"a":3}`, `{"a":3,"aa":1,"b":2}`},
	{"uppercase before lowercase", `{"b":1,"B":2,"a":3,"A":4}`, `{"A":4,"B":2,"a":3,"b":1}`},
	{"same key in different objects", `[{"a":1},{"a":1}]`, `[{"a":1},{"a":1}]`},
	{"escaped keys sorted by value", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
	{"empty key first", `{"a":1,"":2}`, `{"":2,"a":1}`},
	{"deep nesting", `[[[[{"a":[[[]]]}]]]]`, `[[[[{"a":[[[]]]}]]]]`},
}

func allGoodCases() []canonCase {
	var all []canonCase
	for _, set := range [][]canonCase{rfcCases, cyberphoneCases, stringCases, numberCases, structureCases} {
		all = append(all, set...)
	}
	return all
}

func runCanonCases(t *testing.T, cases []canonCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := audit.Canonicalize([]byte(tc.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Errorf("Canonicalize(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestCanonicalizeRFCExamples(t *testing.T)       { runCanonCases(t, rfcCases) }
func TestCanonicalizeCyberphoneVectors(t *testing.T) { runCanonCases(t, cyberphoneCases) }
func TestCanonicalizeStrings(t *testing.T)           { runCanonCases(t, stringCases) }
func TestCanonicalizeNumbers(t *testing.T)           { runCanonCases(t, numberCases) }
func TestCanonicalizeStructures(t *testing.T)        { runCanonCases(t, structureCases) }

// TestCanonicalizeUTF16Order pins the case where UTF-16 and UTF-8 orders
// differ: U+FB33 sorts after U+1F600 by code units (0xFB33 > 0xD83D) but
// before it by UTF-8 bytes (0xEF < 0xF0).
func TestCanonicalizeUTF16Order(t *testing.T) {
	in := "{\"\U0001F600\":1,\"\ufb33\":2,\"\ue000\":3,\"\ud7ff\":4}"
	want := "{\"\ud7ff\":4,\"\U0001F600\":1,\"\ue000\":3,\"\ufb33\":2}"
	got, err := audit.Canonicalize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// Two supplementary characters sharing a high surrogate order by the
	// low one; a key sorts before its extensions.
	in = "{\"\U0001F601\":1,\"\U0001F600x\":2,\"\U0001F600\":3}"
	want = "{\"\U0001F600\":3,\"\U0001F600x\":2,\"\U0001F601\":1}"
	got, err = audit.Canonicalize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical text.
func TestCanonicalizeAppendixB(t *testing.T) {
	vectors := []struct{ bits, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"},
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	}
	for _, v := range vectors {
		bits, err := strconv.ParseUint(v.bits, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		f := math.Float64frombits(bits)
		// Feed the double in two spellings: shortest and 17 significant digits.
		for _, lit := range []string{strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'e', 16, 64)} {
			got, err := audit.Canonicalize([]byte(lit))
			if err != nil {
				t.Errorf("%s: Canonicalize(%s): %v", v.bits, lit, err)
				continue
			}
			if string(got) != v.want {
				t.Errorf("%s: Canonicalize(%s) = %s, want %s", v.bits, lit, got, v.want)
			}
		}
	}
}

// TestCanonicalizeNumbersRoundTrip checks, for many random doubles, that the
// canonical text reads back as the same double and is laid out per
// ECMAScript: exponent form exactly outside [1e-6, 1e21).
func TestCanonicalizeNumbersRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		lit := strconv.FormatFloat(f, 'e', -1, 64)
		got, err := audit.Canonicalize([]byte(lit))
		if err != nil {
			t.Fatalf("Canonicalize(%s): %v", lit, err)
		}
		back, err := strconv.ParseFloat(string(got), 64)
		if err != nil || back != f {
			t.Fatalf("Canonicalize(%s) = %s, reads back as %v (%v)", lit, got, back, err)
		}
		abs := math.Abs(f)
		exp := strings.Contains(string(got), "e")
		if wantExp := abs != 0 && (abs < 1e-6 || abs >= 1e21); exp != wantExp {
			t.Fatalf("Canonicalize(%s) = %s: exponent form %v, want %v", lit, got, exp, wantExp)
		}
	}
}

func TestCanonicalizeRefuses(t *testing.T) {
	cases := []struct{ name, in string }{
		{"empty", ``},
		{"only whitespace", " \n\t "},
		{"trailing value", `{} {}`},
		{"trailing number", `1 2`},
		{"trailing garbage", `{}x`},
		{"extra bracket", `[1]]`},
		{"trailing comma text", `"a",`},
		{"invalid UTF-8 in string", "\"\xff\""},
		{"truncated UTF-8 in string", "[\"a\xc3\"]"},
		{"encoded surrogate", "\"\xed\xa0\x80\""},
		{"invalid UTF-8 outside string", "[1]\xff"},
		{"byte order mark", "\ufeff{}"},
		{"duplicate key", `{"a":1,"a":2}`},
		{"duplicate key via escape", `{"a":1,"\u0061":2}`},
		{"duplicate key nested", `[{"x":{"y":1,"y":1}}]`},
		{"duplicate empty key", `{"":1,"":1}`},
		{"NaN", `NaN`},
		{"NaN in array", `[NaN]`},
		{"Infinity", `Infinity`},
		{"minus Infinity", `-Infinity`},
		{"nan lowercase", `nan`},
		{"bare word", `hello`},
		{"undefined", `undefined`},
		{"True capitalized", `True`},
		{"truncated true", `tru`},
		{"truncated null", `nul`},
		{"true with suffix", `truex`},
		{"overflow", `1e400`},
		{"negative overflow", `-1e400`},
		{"overflow just above max", `1.7976931348623159e308`},
		{"overflow in object", `{"a":1e309}`},
		{"leading zero", `01`},
		{"negative leading zero", `-01`},
		{"lone minus", `-`},
		{"trailing dot", `1.`},
		{"leading dot", `.5`},
		{"leading plus", `+1`},
		{"empty exponent", `1e`},
		{"signed empty exponent", `1e+`},
		{"hex", `0x10`},
		{"minus space", `- 1`},
		{"short \\u", `"\u00"`},
		{"bad hex", `"\u00g0"`},
		{"unknown escape", `"\x41"`},
		{"single-quote escape", `"\'"`},
		{"lone high surrogate", `"\ud800"`},
		{"lone high surrogate then text", `"\ud800abc"`},
		{"lone low surrogate", `"\udc00"`},
		{"high surrogate then non-surrogate", `"\ud800\u0041"`},
		{"two high surrogates", `"\ud800\ud800"`},
		{"unterminated string", `"abc`},
		{"unterminated escape", `"abc\`},
		{"raw control character", "\"\x01\""},
		{"raw tab in string", "\"a\tb\""},
		{"raw newline in string", "\"a\nb\""},
		{"member without value", `{"a"}`},
		{"member with empty value", `{"a":}`},
		{"lone comma object", `{,}`},
		{"trailing comma array", `[1,]`},
		{"trailing comma object", `{"a":1,}`},
		{"leading comma array", `[,1]`},
		{"missing comma", `[1 2]`},
		{"unclosed array", `[`},
		{"unclosed object", `{`},
		{"unclosed nested", `{"a":[1,{}`},
		{"number key", `{1:2}`},
		{"single-quoted key", `{'a':1}`},
		{"bare key", `{a:1}`},
		{"comment", `/* c */ {}`},
		{"line comment", "{} // c"},
		{"form feed whitespace", "\f{}"},
		{"vertical tab whitespace", "\v{}"},
		{"no-break space", "\u00a0{}"},
		{"mismatched brackets", `[}`},
		{"colon in array", `[1:2]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := audit.Canonicalize([]byte(tc.in))
			if err == nil {
				t.Fatalf("Canonicalize(%q) = %q, want an error", tc.in, got)
			}
			if !errors.Is(err, audit.ErrNotCanonicalizable) {
				t.Errorf("Canonicalize(%q) error %v does not wrap ErrNotCanonicalizable", tc.in, err)
			}
			if !strings.HasPrefix(err.Error(), "audit: ") {
				t.Errorf("error %q lacks the audit: prefix", err)
			}
			if got != nil {
				t.Errorf("Canonicalize(%q) returned %q with its error", tc.in, got)
			}
			if _, herr := audit.Hash([]byte(tc.in)); !errors.Is(herr, audit.ErrNotCanonicalizable) {
				t.Errorf("Hash(%q) error = %v, want ErrNotCanonicalizable", tc.in, herr)
			}
		})
	}
}

func TestCanonicalizeDepth(t *testing.T) {
	nest := func(n int) []byte {
		return []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
	}
	if _, err := audit.Canonicalize(nest(audit.MaxDepth)); err != nil {
		t.Errorf("depth %d: %v", audit.MaxDepth, err)
	}
	if _, err := audit.Canonicalize(nest(audit.MaxDepth + 1)); !errors.Is(err, audit.ErrNotCanonicalizable) {
		t.Errorf("depth %d: error %v, want ErrNotCanonicalizable", audit.MaxDepth+1, err)
	}
	objs := []byte(strings.Repeat(`{"a":`, audit.MaxDepth+1) + "1" + strings.Repeat("}", audit.MaxDepth+1))
	if _, err := audit.Canonicalize(objs); !errors.Is(err, audit.ErrNotCanonicalizable) {
		t.Errorf("object depth %d: error %v, want ErrNotCanonicalizable", audit.MaxDepth+1, err)
	}
}

func TestCanonicalizeIdempotent(t *testing.T) {
	for _, tc := range allGoodCases() {
		once, err := audit.Canonicalize([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		twice, err := audit.Canonicalize(once)
		if err != nil {
			t.Fatalf("%s: re-canonicalizing %q: %v", tc.name, once, err)
		}
		if string(twice) != string(once) {
			t.Errorf("%s: not a fixed point: %q -> %q", tc.name, once, twice)
		}
	}
}

func TestCanonicalizeDoesNotModifyInput(t *testing.T) {
	in := []byte(`{ "b" : "\u00e9", "a" : [ 1.0 ] }`)
	orig := string(in)
	if _, err := audit.Canonicalize(in); err != nil {
		t.Fatal(err)
	}
	if string(in) != orig {
		t.Errorf("input modified: %q", in)
	}
}

func TestHash(t *testing.T) {
	sum := sha256.Sum256([]byte(`{"a":1,"b":[true,null]}`))
	want := hex.EncodeToString(sum[:])
	same := []string{
		`{"a":1,"b":[true,null]}`,
		`{"b":[true,null],"a":1}`,
		" {\n  \"b\" : [ true , null ],\n  \"a\" : 1.0\n}\n",
		`{"\u0062":[true,null],"a":10e-1}`,
		`{"a":1E0,"b":[true,null]}`,
	}
	for _, in := range same {
		got, err := audit.Hash([]byte(in))
		if err != nil {
			t.Fatalf("Hash(%q): %v", in, err)
		}
		if got != want {
			t.Errorf("Hash(%q) = %s, want %s", in, got, want)
		}
	}
	different := []string{
		`{"a":2,"b":[true,null]}`,
		`{"a":1,"b":[null,true]}`,
		`{"a":"1","b":[true,null]}`,
		`{"A":1,"b":[true,null]}`,
		`{"a":1,"b":[true,null],"c":null}`,
		`{"a":1,"b":[true]}`,
		`[{"a":1,"b":[true,null]}]`,
	}
	seen := map[string]string{want: same[0]}
	for _, in := range different {
		got, err := audit.Hash([]byte(in))
		if err != nil {
			t.Fatalf("Hash(%q): %v", in, err)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("Hash(%q) = Hash(%q) = %s", in, prev, got)
		}
		seen[got] = in
	}
	// A fixed value pins the encoding: SHA-256 of "{}".
	got, err := audit.Hash([]byte(" { } "))
	if err != nil {
		t.Fatal(err)
	}
	if got != "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
		t.Errorf("Hash({}) = %s", got)
	}
}

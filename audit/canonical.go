package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects [Canonicalize]
// accepts; deeper input is refused rather than risking unbounded recursion.
const MaxDepth = 10000

// Canonicalize parses b, which must hold exactly one JSON value (surrounding
// whitespace allowed), and returns it in the RFC 8785 canonical form. Errors
// wrap [ErrNotCanonicalizable].
//
// An error names one fault and the byte offset where it was found: the
// first fault met reading the input in order, where an object's duplicate
// names are met at the '}' that closes it. So a syntax error before that
// '}', or a duplicate in an object nested in it, is reported first; of the
// names one object repeats, the repetition that comes first in the input
// is reported, at the offset of its opening quote: for
// {"b":1,"a":2,"a":3,"b":4}, "a" at offset 13. [Hash] reports the same.
func Canonicalize(b []byte) ([]byte, error) {
	e := encoder{parser: parser{data: b}, out: make([]byte, 0, len(b))}
	if err := e.run(); err != nil {
		return nil, err
	}
	return e.out, nil
}

// Hash returns the lowercase hex SHA-256 of [Canonicalize](b). Inputs that
// denote the same JSON value hash equally whatever their member order or
// spacing. Errors wrap [ErrNotCanonicalizable].
//
// Hash streams: it hashes the canonical form as it writes it, without
// building the value, and holds back only the members of the objects it has
// open (their order is known when they close). Hashing a large array or
// string allocates about 100 kilobytes whatever its size; an object is held
// until it closes: its canonical text, a copy to sort it when its members
// are out of order, and 24 bytes a member.
func Hash(b []byte) (string, error) {
	h := sha256.New()
	e := encoder{parser: parser{data: b}, sink: h, out: make([]byte, 0, min(len(b), flushAt)+128)}
	if err := e.run(); err != nil {
		return "", err
	}
	h.Write(e.out)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// invalidUTF8At returns the offset of the first byte of b that does not
// start a valid UTF-8 sequence (len(b) if there is none).
func invalidUTF8At(b []byte) int {
	i := 0
	for {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 { // n == 0: the end of b
			return i
		}
		i += n
	}
}

func notCanon(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNotCanonicalizable}, args...)...)
}

// flushAt is how much canonical text an encoder with a sink holds, when no
// object is open, before it writes it to the sink.
const flushAt = 32 << 10

// encoder writes the canonical form of the value its parser reads in one
// pass, without building it. The text goes to out; with a sink, out is
// written to the sink and emptied whenever it holds flushAt bytes and no
// object is open. An open object's members wait in out, in input order,
// until the object closes and they can be put in order: memory is bounded by
// the objects open, not by the whole value.
type encoder struct {
	parser
	sink    hash.Hash // nil: out keeps the whole canonical form
	out     []byte
	open    int      // objects open
	members []member // the members of the open objects, innermost last
	scratch []byte   // where a closing object's members are put in order
}

// member is one member of an open object: its canonical text, "name":value,
// is out[start:end]; at is the offset of its name in the input.
type member struct{ start, end, at int }

// run canonicalizes the whole input.
func (e *encoder) run() error {
	if !utf8.Valid(e.data) {
		return notCanon("invalid UTF-8 at offset %d", invalidUTF8At(e.data))
	}
	e.skipSpace()
	if err := e.value(); err != nil {
		return err
	}
	e.skipSpace()
	if e.pos != len(e.data) {
		return e.errorf("trailing data after the JSON value")
	}
	return nil
}

// checkpoint writes out to the sink when it is worth it and nothing in it
// waits to be sorted. Otherwise, when out is about full, it doubles out's
// capacity: append grows a large slice by a quarter, which would allocate
// five times the final size on the way. Between checkpoints, out mostly
// grows by less than 64 bytes.
func (e *encoder) checkpoint() {
	if e.sink != nil && e.open == 0 && len(e.out) >= flushAt {
		e.sink.Write(e.out)
		e.out = e.out[:0]
		return
	}
	e.out = grow(e.out, 64)
}

// str writes the string literal at e.pos in its canonical form, without
// unescaping it first: the value's characters, with only '"', '\\' and
// control characters escaped (appendString). The value is always valid
// UTF-8: the input was checked, and lone surrogate escapes are refused.
func (e *encoder) str() error {
	e.pos++ // opening quote
	e.out = append(e.out, '"')
	for {
		start := e.pos // a run of characters written as they are
		for e.pos < len(e.data) {
			if c := e.data[e.pos]; c == '"' || c == '\\' || c < 0x20 {
				break
			}
			e.pos++
		}
		e.out = append(e.out, e.data[start:e.pos]...)
		e.checkpoint()
		if e.pos >= len(e.data) {
			return e.errorf("unterminated string")
		}
		switch c := e.data[e.pos]; c {
		case '"':
			e.pos++
			e.out = append(e.out, '"')
			return nil
		case '\\': // an escape sequence, below
		default:
			return e.errorf("control character %#02x in string", c)
		}
		if e.pos+1 >= len(e.data) {
			return e.errorf("unterminated string")
		}
		c := e.data[e.pos+1]
		e.pos += 2
		switch c {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			e.out = append(e.out, '\\', c) // canonical as it is
		case '/':
			e.out = append(e.out, '/')
		case 'u':
			r, err := e.hex4()
			if err != nil {
				return err
			}
			switch {
			case 0xDC00 <= r && r <= 0xDFFF:
				return e.errorf("lone low surrogate \\u%04x in string", r)
			case 0xD800 <= r && r <= 0xDBFF:
				if e.pos+1 >= len(e.data) || e.data[e.pos] != '\\' || e.data[e.pos+1] != 'u' {
					return e.errorf("lone high surrogate \\u%04x in string", r)
				}
				e.pos += 2
				lo, err := e.hex4()
				if err != nil {
					return err
				}
				if lo < 0xDC00 || lo > 0xDFFF {
					return e.errorf("high surrogate \\u%04x not followed by a low surrogate", r)
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			}
			if r < 0x20 || r == '"' || r == '\\' {
				e.out = appendEscape(e.out, byte(r))
			} else {
				e.out = utf8.AppendRune(e.out, r)
			}
		default:
			return e.errorf("invalid escape '\\%c' in string", rune(c))
		}
	}
}

// value writes one value starting at e.pos (whitespace already skipped).
func (e *encoder) value() error {
	if e.pos >= len(e.data) {
		return e.errorf("unexpected end of input")
	}
	switch c := e.data[e.pos]; c {
	case '{':
		return e.object()
	case '[':
		return e.array()
	case '"':
		return e.str()
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		f, err := e.number()
		if err != nil {
			return err
		}
		e.out = appendNumber(e.out, f)
		return nil
	case 't':
		return e.literal("true")
	case 'f':
		return e.literal("false")
	case 'n':
		return e.literal("null")
	default:
		return e.errorf("unexpected character %q", rune(c))
	}
}

func (e *encoder) literal(word string) error {
	end := e.pos + len(word)
	if end > len(e.data) || string(e.data[e.pos:end]) != word {
		return e.errorf("invalid literal")
	}
	e.pos = end
	e.out = append(e.out, word...)
	return nil
}

func (e *encoder) array() error {
	if err := e.enter(); err != nil {
		return err
	}
	e.pos++ // '['
	e.skipSpace()
	e.out = append(e.out, '[')
	if e.pos < len(e.data) && e.data[e.pos] == ']' {
		e.pos++
		e.depth--
		e.out = append(e.out, ']')
		return nil
	}
	for {
		if err := e.value(); err != nil {
			return err
		}
		e.skipSpace()
		if e.pos >= len(e.data) {
			return e.errorf("unexpected end of input in array")
		}
		switch e.data[e.pos] {
		case ',':
			e.pos++
			e.skipSpace()
			e.out = append(e.out, ',')
			e.checkpoint()
		case ']':
			e.pos++
			e.depth--
			e.out = append(e.out, ']')
			return nil
		default:
			return e.errorf("expected ',' or ']' in array")
		}
	}
}

func (e *encoder) object() error {
	if err := e.enter(); err != nil {
		return err
	}
	e.pos++ // '{'
	e.skipSpace()
	e.out = append(e.out, '{')
	if e.pos < len(e.data) && e.data[e.pos] == '}' {
		e.pos++
		e.depth--
		e.out = append(e.out, '}')
		return nil
	}
	if e.open == 0 {
		// The object is held until it closes: make room for it, and for
		// its own members, at once. (A member takes at least 5 bytes of
		// input, "":0 and a comma, which bounds the guess on any input.)
		size, commas := extent(e.data, e.pos)
		e.out = grow(e.out, size+128) // and the checkpoints' margin
		e.members = grow(e.members, min(commas+1, size/5+1))
	}
	e.open++
	first, body := len(e.members), len(e.out)
	for {
		if e.pos >= len(e.data) || e.data[e.pos] != '"' {
			return e.errorf("expected a string member name")
		}
		at, start := e.pos, len(e.out)
		if err := e.str(); err != nil {
			return err
		}
		e.skipSpace()
		if e.pos >= len(e.data) || e.data[e.pos] != ':' {
			return e.errorf("expected ':' after member name")
		}
		e.pos++
		e.skipSpace()
		e.out = append(e.out, ':')
		if err := e.value(); err != nil {
			return err
		}
		e.members = append(grow(e.members, 1), member{start: start, end: len(e.out), at: at})
		e.checkpoint()
		e.skipSpace()
		if e.pos >= len(e.data) {
			return e.errorf("unexpected end of input in object")
		}
		switch e.data[e.pos] {
		case ',':
			e.pos++
			e.skipSpace()
			e.out = append(e.out, ',')
		case '}':
			e.pos++
			e.depth--
			err := e.sortMembers(body, e.members[first:])
			e.members = e.members[:first]
			e.open--
			e.out = append(e.out, '}')
			return err
		default:
			return e.errorf("expected ',' or '}' in object")
		}
	}
}

// grow returns s with room for n more elements, at least doubling its
// capacity when it must grow, in one allocation (slices.Grow makes two under
// the race detector).
func grow[E any](s []E, n int) []E {
	if cap(s)-len(s) >= n {
		return s
	}
	g := make([]E, len(s), max(len(s)+n, 2*cap(s)))
	copy(g, s)
	return g
}

// extent returns the length of the input from pos (just past the '{' of
// an object) to the end of the object, and the number of commas between
// its members.
func extent(data []byte, pos int) (size, commas int) {
	depth := 1
	for i := pos; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1 - pos, commas
			}
		case ',':
			if depth == 1 {
				commas++
			}
		}
	}
	return len(data) - pos, commas
}

// sortMembers puts the members ms of the object whose text (the members
// joined by commas, without the braces) starts at out[body:] in the order
// of their names, and refuses a name given twice. Members that arrive in
// order (the usual case) are not moved.
func (e *encoder) sortMembers(body int, ms []member) error {
	name := func(m member) []byte { return e.out[m.start:] }
	ordered := true
	for i := 1; i < len(ms); i++ {
		if compareNames(name(ms[i-1]), name(ms[i])) >= 0 {
			ordered = false
			break
		}
	}
	if ordered {
		return nil
	}
	slices.SortFunc(ms, func(a, b member) int {
		if c := compareNames(name(a), name(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.at, b.at)
	})
	// A name given twice: report the repetition that comes first in the
	// input (of every name the object repeats), as a parse that checked
	// names as it went would, within this object (Canonicalize).
	var dup *member
	for i := 1; i < len(ms); i++ {
		if compareNames(name(ms[i-1]), name(ms[i])) == 0 && (dup == nil || ms[i].at < dup.at) {
			dup = &ms[i]
		}
	}
	if dup != nil {
		return notCanon("duplicate member name %q at offset %d", nameValue(name(*dup)), dup.at)
	}
	if n := len(e.out) - body; cap(e.scratch) < n {
		e.scratch = make([]byte, 0, n)
	}
	s := e.scratch[:0]
	for i, m := range ms {
		if i > 0 {
			s = append(s, ',')
		}
		s = append(s, e.out[m.start:m.end]...)
	}
	copy(e.out[body:], s)
	e.scratch = s
	return nil
}

// compareNames orders two member names by the UTF-16 code units of their
// values, as RFC 8785 section 3.2.3 sorts them. Each is given as the
// canonical text it starts (a quoted string as appendString writes it).
func compareNames(a, b []byte) int {
	a, b = a[1:], b[1:]
	for {
		ra, na := nameRune(a)
		rb, nb := nameRune(b)
		switch {
		case na == 0 && nb == 0:
			return 0
		case na == 0:
			return -1
		case nb == 0:
			return 1
		}
		if ra != rb {
			a1, a2 := utf16Units(ra)
			b1, b2 := utf16Units(rb)
			if c := cmp.Compare(a1, b1); c != 0 {
				return c
			}
			return cmp.Compare(a2, b2)
		}
		a, b = a[na:], b[nb:]
	}
}

// nameRune decodes the first character of s, the rest of a canonical string
// literal, and its length in s; 0 at the closing quote.
func nameRune(s []byte) (rune, int) {
	switch s[0] {
	case '"':
		return 0, 0
	case '\\':
		switch s[1] {
		case 'b':
			return '\b', 2
		case 'f':
			return '\f', 2
		case 'n':
			return '\n', 2
		case 'r':
			return '\r', 2
		case 't':
			return '\t', 2
		case 'u': // \u00xx, lowercase hex
			return rune(unhex(s[4])<<4 | unhex(s[5])), 6
		}
		return rune(s[1]), 2 // '"' or '\\'
	}
	return utf8.DecodeRune(s)
}

// nameValue returns the value of the canonical string literal s starts.
func nameValue(s []byte) string {
	var v []byte
	for s = s[1:]; ; {
		r, n := nameRune(s)
		if n == 0 {
			return string(v)
		}
		v = utf8.AppendRune(v, r)
		s = s[n:]
	}
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

type parser struct {
	data  []byte
	pos   int
	depth int
}

func (p *parser) errorf(format string, args ...any) error {
	return notCanon(format+" at offset %d", append(args, p.pos)...)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf("nesting deeper than %d", MaxDepth)
	}
	return nil
}

func (p *parser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		return 0, p.errorf("truncated \\u escape")
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, p.errorf("invalid hex digit %q in \\u escape", rune(c))
		}
	}
	p.pos += 4
	return r, nil
}

// number parses a number literal per the RFC 8259 grammar and reads it as
// an IEEE-754 double.
func (p *parser) number() (float64, error) {
	start := p.pos
	d := p.data
	digits := func() (some bool) { // skips the digits at p.pos
		from := p.pos
		for p.pos < len(d) && '0' <= d[p.pos] && d[p.pos] <= '9' {
			p.pos++
		}
		return p.pos > from
	}
	if d[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(d) && d[p.pos] == '0':
		p.pos++
	case p.pos < len(d) && '1' <= d[p.pos] && d[p.pos] <= '9':
		digits()
	default:
		return 0, p.errorf("invalid number")
	}
	if p.pos < len(d) && d[p.pos] == '.' {
		p.pos++
		if !digits() {
			return 0, p.errorf("invalid number: no digits after '.'")
		}
	}
	if p.pos < len(d) && (d[p.pos] == 'e' || d[p.pos] == 'E') {
		p.pos++
		if p.pos < len(d) && (d[p.pos] == '+' || d[p.pos] == '-') {
			p.pos++
		}
		if !digits() {
			return 0, p.errorf("invalid number: no digits in exponent")
		}
	}
	lit := d[start:p.pos]
	f, err := strconv.ParseFloat(string(lit), 64)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, notCanon("number %.40s at offset %d overflows an IEEE-754 double", lit, start)
	}
	if err != nil { // only a range error can remain; underflow to 0 is not one
		return 0, notCanon("number %.40s at offset %d: %v", lit, start, err)
	}
	return f, nil
}

// appendNumber appends f as ECMAScript's Number.prototype.toString writes
// it (ECMA-262 Number::toString, RFC 8785 section 3.2.2.3). f must be finite.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 { // both +0 and -0
		return append(dst, '0')
	}
	if math.Signbit(f) {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-trip digits: "d.ddde±XX" or "de±XX".
	var buf [32]byte
	s := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	ei := 0
	for s[ei] != 'e' {
		ei++
	}
	exp, _ := strconv.Atoi(string(s[ei+1:]))
	var digitBuf [24]byte
	ds := append(digitBuf[:0], s[0])
	if ei > 1 {
		ds = append(ds, s[2:ei]...)
	}
	k, n := len(ds), exp+1 // value = 0.ds × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, ds...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, ds[:n]...)
		dst = append(dst, '.')
		dst = append(dst, ds[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, ds...)
	default:
		dst = append(dst, ds[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, ds[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// appendString appends s (valid UTF-8) as an RFC 8785 string literal: only
// '"', '\\' and control characters are escaped (appendEscape).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		dst = appendEscape(dst, c)
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscape appends the RFC 8785 escape of c, which is '"', '\\' or a
// control character: the named ones by their two-character shortcuts and
// the rest as \u00xx with lowercase hex.
func appendEscape(dst []byte, c byte) []byte {
	const hexDigits = "0123456789abcdef"
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

// utf16Units returns the UTF-16 code units of r; the second is 0 for a
// character in the Basic Multilingual Plane.
func utf16Units(r rune) (uint16, uint16) {
	if r < 0x10000 {
		return uint16(r), 0
	}
	r -= 0x10000
	return uint16(0xD800 + r>>10), uint16(0xDC00 + r&0x3FF)
}

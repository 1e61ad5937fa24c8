package audit_test

// This file keeps, as a reference, the tree encoder that canonicalized
// (and hashed) before the streaming one: it parses the whole value into a
// tree of nodes, then writes it. FuzzCanonicalize and the streaming tests
// check that Canonicalize writes exactly the bytes it writes.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/toolgate/toolgate/audit"
)

// treeCanonicalize parses b, which must hold exactly one JSON value (surrounding
// whitespace allowed), and returns it in the RFC 8785 canonical form. Errors
// wrap audit.ErrNotCanonicalizable.
func treeCanonicalize(b []byte) ([]byte, error) {
	if !utf8.Valid(b) {
		return nil, treeNotCanon("invalid UTF-8 at offset %d", treeInvalidUTF8At(b))
	}
	p := treeParser{data: b}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.errorf("trailing data after the JSON value")
	}
	return v.appendTo(make([]byte, 0, len(b))), nil
}

// treeInvalidUTF8At returns the offset of the first byte of b that does not
// start a valid UTF-8 sequence.
func treeInvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func treeNotCanon(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{audit.ErrNotCanonicalizable}, args...)...)
}

// treeNode is a parsed JSON value ready to be written canonically.
type treeNode interface {
	appendTo(dst []byte) []byte
}

// treeScalar is the canonical text of a string, number or literal.
type treeScalar []byte

func (s treeScalar) appendTo(dst []byte) []byte { return append(dst, s...) }

type treeArray []treeNode

func (a treeArray) appendTo(dst []byte) []byte {
	dst = append(dst, '[')
	for i, v := range a {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = v.appendTo(dst)
	}
	return append(dst, ']')
}

type treeMember struct {
	key string // unescaped
	val treeNode
}

// treeObject holds its members sorted by treeCompareUTF16 of their keys.
type treeObject []treeMember

func (o treeObject) appendTo(dst []byte) []byte {
	dst = append(dst, '{')
	for i, m := range o {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = treeAppendString(dst, m.key)
		dst = append(dst, ':')
		dst = m.val.appendTo(dst)
	}
	return append(dst, '}')
}

type treeParser struct {
	data  []byte
	pos   int
	depth int
}

func (p *treeParser) errorf(format string, args ...any) error {
	return treeNotCanon(format+" at offset %d", append(args, p.pos)...)
}

func (p *treeParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses one value starting at p.pos (whitespace already skipped).
func (p *treeParser) value() (treeNode, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.treeObject()
	case c == '[':
		return p.treeArray()
	case c == '"':
		s, err := p.parseString()
		if err != nil {
			return nil, err
		}
		return treeScalar(treeAppendString(nil, s)), nil
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return nil, p.errorf("unexpected character %q", rune(c))
	}
}

func (p *treeParser) literal(word string) (treeNode, error) {
	end := p.pos + len(word)
	if end > len(p.data) || string(p.data[p.pos:end]) != word {
		return nil, p.errorf("invalid literal")
	}
	p.pos = end
	return treeScalar(word), nil
}

func (p *treeParser) enter() error {
	p.depth++
	if p.depth > audit.MaxDepth {
		return p.errorf("nesting deeper than %d", audit.MaxDepth)
	}
	return nil
}

func (p *treeParser) treeArray() (treeNode, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '['
	p.skipSpace()
	a := treeArray{}
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return a, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case ']':
			p.pos++
			p.depth--
			return a, nil
		default:
			return nil, p.errorf("expected ',' or ']' in array")
		}
	}
}

func (p *treeParser) treeObject() (treeNode, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '{'
	p.skipSpace()
	o := treeObject{}
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return o, nil
	}
	seen := make(map[string]struct{})
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.errorf("expected a string member name")
		}
		at := p.pos
		key, err := p.parseString()
		if err != nil {
			return nil, err
		}
		if _, dup := seen[key]; dup {
			return nil, treeNotCanon("duplicate member name %q at offset %d", key, at)
		}
		seen[key] = struct{}{}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf("expected ':' after member name")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		o = append(o, treeMember{key: key, val: v})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case '}':
			p.pos++
			p.depth--
			slices.SortFunc(o, func(a, b treeMember) int { return treeCompareUTF16(a.key, b.key) })
			return o, nil
		default:
			return nil, p.errorf("expected ',' or '}' in object")
		}
	}
}

// parseString parses a string literal at p.pos and returns its unescaped
// value, which is always valid UTF-8: the input was checked, and lone
// surrogate escapes are refused.
func (p *treeParser) parseString() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := string(p.data[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character %#02x in string", c)
		}
		p.pos++
	}
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("control character %#02x in string", c)
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		// Escape sequence.
		if p.pos+1 >= len(p.data) {
			break
		}
		e := p.data[p.pos+1]
		p.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			switch {
			case 0xDC00 <= r && r <= 0xDFFF:
				return "", p.errorf("lone low surrogate \\u%04x in string", r)
			case 0xD800 <= r && r <= 0xDBFF:
				if p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
					return "", p.errorf("lone high surrogate \\u%04x in string", r)
				}
				p.pos += 2
				lo, err := p.hex4()
				if err != nil {
					return "", err
				}
				if lo < 0xDC00 || lo > 0xDFFF {
					return "", p.errorf("high surrogate \\u%04x not followed by a low surrogate", r)
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errorf("invalid escape '\\%c' in string", rune(e))
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *treeParser) hex4() (rune, error) {
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

// number parses a number literal per the RFC 8259 grammar, reads it as an
// IEEE-754 double and returns its RFC 8785 text.
func (p *treeParser) number() (treeNode, error) {
	start := p.pos
	d := p.data
	digits := func() int {
		n := 0
		for p.pos < len(d) && '0' <= d[p.pos] && d[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
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
		return nil, p.errorf("invalid number")
	}
	if p.pos < len(d) && d[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.errorf("invalid number: no digits after '.'")
		}
	}
	if p.pos < len(d) && (d[p.pos] == 'e' || d[p.pos] == 'E') {
		p.pos++
		if p.pos < len(d) && (d[p.pos] == '+' || d[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errorf("invalid number: no digits in exponent")
		}
	}
	lit := string(d[start:p.pos])
	f, err := strconv.ParseFloat(lit, 64)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, treeNotCanon("number %.40s at offset %d overflows an IEEE-754 double", lit, start)
	}
	if err != nil { // only a range error can remain; underflow to 0 is not one
		return nil, treeNotCanon("number %.40s at offset %d: %v", lit, start, err)
	}
	return treeScalar(treeAppendNumber(nil, f)), nil
}

// treeAppendNumber appends f as ECMAScript's Number.prototype.toString writes
// it (ECMA-262 Number::toString, RFC 8785 section 3.2.2.3). f must be finite.
func treeAppendNumber(dst []byte, f float64) []byte {
	if f == 0 { // both +0 and -0
		return append(dst, '0')
	}
	if f < 0 {
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

// treeAppendString appends s (valid UTF-8) as an RFC 8785 string literal: only
// '"', '\\' and control characters are escaped, the named ones by their
// two-character shortcuts and the rest as \u00xx with lowercase hex.
func treeAppendString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// treeCompareUTF16 orders two valid UTF-8 strings by their UTF-16 code units,
// as RFC 8785 section 3.2.3 sorts treeMember names.
func treeCompareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			a1, a2 := treeUTF16Units(ra)
			b1, b2 := treeUTF16Units(rb)
			if c := cmp.Compare(a1, b1); c != 0 {
				return c
			}
			return cmp.Compare(a2, b2)
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// treeUTF16Units returns the UTF-16 code units of r; the second is 0 for a
// character in the Basic Multilingual Plane.
func treeUTF16Units(r rune) (uint16, uint16) {
	if r < 0x10000 {
		return uint16(r), 0
	}
	r -= 0x10000
	return uint16(0xD800 + r>>10), uint16(0xDC00 + r&0x3FF)
}

package audit_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

// treeHash is what Hash returned before it streamed: the SHA-256 of the
// tree encoder's output.
func treeHash(b []byte) (string, error) {
	c, err := treeCanonicalize(b)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// numbersArray is a JSON array of about size bytes of varied numbers, as a
// hostile input might be.
func numbersArray(size int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 0, size+64)
	b = append(b, '[')
	for len(b) < size {
		if len(b) > 1 {
			b = append(b, ',')
		}
		switch r.IntN(4) {
		case 0:
			b = strconv.AppendInt(b, r.Int64N(1000), 10)
		case 1:
			b = strconv.AppendFloat(b, r.NormFloat64()*1e6, 'g', -1, 64)
		case 2:
			b = append(b, "1e20"...) // written out in full: 21 digits
		default:
			b = strconv.AppendFloat(b, r.Float64(), 'f', -1, 64)
		}
	}
	return append(b, ']')
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestCanonicalHash_StreamsLargeInput holds Hash to its memory promise: a
// multi-megabyte array (or string) is hashed in a few tens of kilobytes,
// whatever its size, and an object costs a small multiple of its own size;
// the tree encoder it replaced allocated about forty times a numbers
// array's size. The hashes are those of the tree encoder.
func TestCanonicalHash_StreamsLargeInput(t *testing.T) {
	const size = 4 << 20
	manyObjects := func() []byte { // an array of small objects, members out of order
		var b bytes.Buffer
		b.WriteByte('[')
		for i := 0; b.Len() < size; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"z":%d,"a":"x\u00e9\n","m":[%d,true,null]}`, i, i*7)
		}
		b.WriteByte(']')
		return b.Bytes()
	}
	bigObject := func() []byte { // one object of many members, in reverse order
		var b bytes.Buffer
		b.WriteByte('{')
		for i := size / 16; i > 0; i-- {
			fmt.Fprintf(&b, `"k%08d":%d,`, i, i)
		}
		b.WriteString(`"":0}`)
		return b.Bytes()
	}
	cases := []struct {
		name  string
		in    []byte
		bound uint64 // bytes Hash may allocate
	}{
		{"numbers", numbersArray(size), 256 << 10},
		{"string", []byte(`"` + strings.Repeat(`ab\"\u00e9\ud83d\ude00`, size/20) + `"`), 256 << 10},
		{"array of objects", manyObjects(), 256 << 10},
		// An object is held until it closes: its canonical text, a copy to
		// sort it, and 24 bytes a member (here 19 bytes long).
		{"one big object", bigObject(), 4 * size},
		// Refused, but only at its second comma: the room made for the
		// object (its size, and at most 24 bytes for every 5) is the cost.
		{"refused object", []byte(`{"a":1` + strings.Repeat(",", size) + `}`), 6 * size},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				got, want  string
				gerr, werr error
			)
			n := allocated(func() { got, gerr = audit.Hash(tc.in) })
			tree := allocated(func() { want, werr = treeHash(tc.in) })
			if (gerr == nil) != (werr == nil) || got != want {
				t.Errorf("Hash = %s, %v; the tree encoder's hash %s, %v", got, gerr, want, werr)
			}
			t.Logf("%d bytes in: Hash allocated %d bytes, the tree encoder %d", len(tc.in), n, tree)
			if n > tc.bound {
				t.Errorf("Hash of %d bytes allocated %d bytes, more than %d", len(tc.in), n, tc.bound)
			}
		})
	}
}

// TestCanonicalize_MatchesTree compares the streaming encoder with the tree
// encoder on random values: members in random order (so objects are
// sorted), names with escapes, nesting, and values large enough that Hash
// writes to its hash as it goes.
func TestCanonicalize_MatchesTree(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	refused := 0
	for i := range 300 {
		in := randomJSON(r, 0, 1+i%4)
		if i%50 == 0 {
			in = []byte("[" + strings.Repeat(string(in)+",", 400) + string(in) + "]")
		}
		compareWithTree(t, in)
		if _, err := audit.Canonicalize(in); err != nil {
			refused++
		}
	}
	if refused < 10 || refused > 290 {
		t.Errorf("%d of 300 values refused: the generator no longer covers both outcomes", refused)
	}
}

// compareWithTree fails t unless Canonicalize and Hash agree with the tree
// encoder on in: the same bytes and hash, or both refuse it with the same
// message. The one difference allowed is the one the streaming encoder
// documents: it finds an object's duplicate names when the object closes,
// so where the tree encoder reports a duplicate, it may report a fault
// found later in the input (a duplicate in an inner object, or a syntax
// error before the object closes), never one before it.
func compareWithTree(t *testing.T, in []byte) {
	t.Helper()
	want, werr := treeCanonicalize(in)
	got, gerr := audit.Canonicalize(in)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("Canonicalize(%.200q) = %.200q, %v; the tree encoder: %.200q, %v", in, got, gerr, want, werr)
	}
	wantHash, _ := treeHash(in)
	gotHash, herr := audit.Hash(in)
	if (herr == nil) != (werr == nil) || gotHash != wantHash {
		t.Fatalf("Hash(%.200q) = %s, %v; the tree encoder's: %s, %v", in, gotHash, herr, wantHash, werr)
	}
	if gerr == nil {
		return
	}
	if !errors.Is(gerr, audit.ErrNotCanonicalizable) || herr.Error() != gerr.Error() {
		t.Fatalf("Canonicalize(%.200q): %v; Hash: %v; want the same error, wrapping ErrNotCanonicalizable", in, gerr, herr)
	}
	if !strings.Contains(werr.Error(), ": duplicate member name ") {
		if gerr.Error() != werr.Error() {
			t.Fatalf("Canonicalize(%.200q): %v; the tree encoder: %v", in, gerr, werr)
		}
		return
	}
	if g, w := errorOffset(t, gerr), errorOffset(t, werr); g < w {
		t.Fatalf("Canonicalize(%.200q): %v, before the tree encoder's %v", in, gerr, werr)
	}
}

// errorOffset returns the offset a refusal names.
func errorOffset(t *testing.T, err error) int {
	t.Helper()
	msg := err.Error()
	i := strings.LastIndex(msg, " at offset ")
	if i < 0 {
		t.Fatalf("%v names no offset", err)
	}
	digits := msg[i+len(" at offset "):]
	if j := strings.IndexByte(digits, ' '); j >= 0 {
		digits = digits[:j]
	}
	n, perr := strconv.Atoi(digits)
	if perr != nil {
		t.Fatalf("%v: offset %q", err, digits)
	}
	return n
}

// FuzzCanonicalize_MatchesTree runs the streaming encoder (Canonicalize and
// Hash) and the tree encoder on the same inputs and fails where they
// disagree: on the canonical text, the hash, or the refusal and its message
// (compareWithTree). Its seed corpus, under
// testdata/fuzz/FuzzCanonicalize_MatchesTree, holds the inputs that tell
// apart each mutation of the encoder that a mutation tester
// (github.com/go-gremlins/gremlins) found no test to notice; large ones
// cross the 32 KiB at which Hash writes to its hash.
func FuzzCanonicalize_MatchesTree(f *testing.F) {
	for _, tc := range allGoodCases() {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		compareWithTree(t, in)
	})
}

var randomNames = []string{"a", "b", "A", "", "aa", "\\u0061", "\\n", "\\t", "\\\"", "\\\\", "\\/", "\\u0000", "\\u001f",
	"é", "\\u00e9", "€", "😀", "\\ud83d\\ude00", "\ufb33", "\ue000", "z\\u0000", "a\\u0000b", "ab", "\\b", "\\f"}

// randomJSON writes a random JSON value. Names repeat now and then, so
// some objects are refused for a duplicate.
func randomJSON(r *rand.Rand, depth, maxDepth int) []byte {
	var b []byte
	var write func(d int)
	write = func(d int) {
		k := r.IntN(7)
		if d >= maxDepth {
			k = r.IntN(4)
		}
		switch k {
		case 0:
			b = strconv.AppendFloat(b, r.NormFloat64()*[]float64{1, 1e-9, 1e25, 1e300}[r.IntN(4)], "eEfg"[r.IntN(4)], -1, 64)
		case 1:
			b = append(b, '"')
			b = append(b, randomNames[r.IntN(len(randomNames))]...)
			b = append(b, '"')
		case 2:
			b = append(b, []string{"true", "false", "null", "-0", "1.0", "1E2"}[r.IntN(6)]...)
		case 3:
			b = strconv.AppendInt(b, r.Int64N(1<<53)-1<<52, 10)
		case 4, 5:
			b = append(b, '{', ' ')
			var names []string
			for i := range r.IntN(8) {
				if i > 0 {
					b = append(b, ',', '\n')
				}
				// Distinct names mostly; now and then one given before, or
				// spelled another way ("a" and "\u0061").
				name := randomNames[r.IntN(len(randomNames))] + strconv.Itoa(i)
				if i > 0 && r.IntN(8) == 0 {
					name = names[r.IntN(len(names))]
					if r.IntN(2) == 0 {
						name = strings.Replace(name, "a", `\u0061`, 1)
					}
				}
				names = append(names, name)
				b = append(b, '"')
				b = append(b, name...)
				b = append(b, '"', ' ', ':')
				write(d + 1)
			}
			b = append(b, '}')
		default:
			b = append(b, '[')
			for i := range r.IntN(6) {
				if i > 0 {
					b = append(b, ',')
				}
				write(d + 1)
			}
			b = append(b, ']')
		}
	}
	write(depth)
	return b
}

// BenchmarkHash compares the streaming Hash with the tree encoder it
// replaced (treeHash), on a 5 MiB array of numbers, an array of small
// objects, and a small object.
func BenchmarkHash(b *testing.B) {
	inputs := []struct {
		name string
		in   []byte
	}{
		{"numbers-5MiB", numbersArray(5 << 20)},
		{"objects-1MiB", func() []byte {
			var buf bytes.Buffer
			buf.WriteByte('[')
			for i := 0; buf.Len() < 1<<20; i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				fmt.Fprintf(&buf, `{"name":"item %d","tags":["a","b"],"id":%d,"price":%d.25}`, i, i, i%1000)
			}
			buf.WriteByte(']')
			return buf.Bytes()
		}()},
		{"small", []byte(`{"path":"/tmp/x.txt","content":"hello, world","mode":420,"append":false}`)},
	}
	for _, in := range inputs {
		for _, enc := range []struct {
			name string
			hash func([]byte) (string, error)
		}{{"stream", audit.Hash}, {"tree", treeHash}} {
			b.Run(in.name+"/"+enc.name, func(b *testing.B) {
				b.SetBytes(int64(len(in.in)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := enc.hash(in.in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

package proc

import "bytes"

// A marker is a kind of message a child prints when the kernel refused it
// something under one of our rlimits. It is evidence, not proof: see the
// package doc.
type marker int

const (
	markOOM   marker = iota // an allocation failed (RLIMIT_AS)
	markEFBIG               // a write failed with EFBIG (RLIMIT_FSIZE)
	nMarkers
)

// phrases are the messages of common runtimes: the Go runtime ("fatal
// error: runtime: out of memory", and at start-up "fatal error: failed to
// reserve page summary memory"), the race detector's ThreadSanitizer
// ("failed to allocate"), strerror(ENOMEM) and strerror(EFBIG) of glibc and
// musl, gnulib's xalloc_die ("memory exhausted"), C++ and Python.
var phrases = [nMarkers][]string{
	markOOM: {"out of memory", "Out of memory", "Cannot allocate memory", "cannot allocate memory", "memory exhausted",
		"std::bad_alloc", "MemoryError", "failed to reserve", "cannot reserve", "failed to allocate"},
	markEFBIG: {"File too large", "file too large"},
}

const longestPhrase = len("Cannot allocate memory")

// scanner looks for the phrases across the whole of a stream, including the
// part that is not kept, with no allocation per write.
type scanner struct {
	want  [nMarkers]bool
	found [nMarkers]string
	carry []byte // the last longestPhrase-1 bytes seen, for phrases split across writes
	edge  []byte
}

func newScanner(want ...marker) *scanner {
	s := &scanner{carry: make([]byte, 0, longestPhrase), edge: make([]byte, 0, 2*longestPhrase)}
	for _, m := range want {
		s.want[m] = true
	}
	return s
}

func (s *scanner) write(p []byte) {
	head := p[:min(len(p), longestPhrase-1)]
	s.edge = append(append(s.edge[:0], s.carry...), head...)
	for m := range nMarkers {
		if !s.want[m] || s.found[m] != "" {
			continue
		}
		for _, ph := range phrases[m] {
			if bytes.Contains(s.edge, []byte(ph)) || bytes.Contains(p, []byte(ph)) {
				s.found[m] = ph
				break
			}
		}
	}
	// Keep the last longestPhrase-1 bytes of carry+p.
	if len(p) >= longestPhrase-1 {
		s.carry = append(s.carry[:0], p[len(p)-(longestPhrase-1):]...)
	} else {
		s.carry = append(s.carry, p...)
		if over := len(s.carry) - (longestPhrase - 1); over > 0 {
			s.carry = append(s.carry[:0], s.carry[over:]...)
		}
	}
}

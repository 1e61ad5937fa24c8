package proc

import (
	"bytes"
	"testing"
)

// The scanner finds a phrase wherever the writes split the stream, and only
// a phrase that is there.
func FuzzScanner(f *testing.F) {
	f.Add([]byte("fatal error: runtime: out of memory\n"), uint8(25), uint8(3))
	f.Add([]byte("dd: error writing 'x': File too large"), uint8(30), uint8(1))
	f.Add([]byte("Cannot allocate memory"), uint8(0), uint8(21))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint8) {
		s := newScanner(markOOM, markEFBIG)
		a := min(int(cut1), len(data))
		b := min(a+int(cut2), len(data))
		s.write(data[:a])
		s.write(data[a:b])
		s.write(data[b:])
		for m := range nMarkers {
			want := false
			for _, ph := range phrases[m] {
				want = want || bytes.Contains(data, []byte(ph))
			}
			if got := s.found[m] != ""; got != want {
				t.Errorf("marker %d in %q (cut %d, %d): found %v, want %v", m, data, a, b, got, want)
			}
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4243 (a b) c) S 4242 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123 456789 1234 1 1 1"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStat(b) // must not panic
	})
}

func FuzzOwnCgroup2(f *testing.F) {
	f.Add("0::/a/b\n", "35 24 0:30 /a /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	f.Add("0::/\n", "35 24 0:30 / /mnt/x\\04 rw - cgroup2 c rw\n")
	f.Fuzz(func(t *testing.T, self, mounts string) {
		ownCgroup2(self, mounts) // must not panic
	})
}

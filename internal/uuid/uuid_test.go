package uuid

import (
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		s := New()
		if !Valid(s) {
			t.Fatalf("New() = %q, not a valid v4 UUID", s)
		}
		if seen[s] {
			t.Fatalf("duplicate %q", s)
		}
		seen[s] = true
	}
}

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"b2831d73-2708-4f50-944b-7b54f11bfbb4":  true,
		"B2831D73-2708-4F50-944B-7B54F11BFBB4":  false, // uppercase
		"b2831d73-2708-1f50-944b-7b54f11bfbb4":  false, // version 1
		"b2831d73-2708-4f50-c44b-7b54f11bfbb4":  false, // variant
		"b2831d7327084f50944b7b54f11bfbb4":      false,
		"b2831d73-2708-4f50-944b-7b54f11bfbb":   false,
		"b2831d73-2708-4f50-944b-7b54f11bfbb4x": false,
		"g2831d73-2708-4f50-944b-7b54f11bfbb4":  false,
		"":                                      false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestGenerator_Ordered(t *testing.T) {
	var g Generator
	prev := ""
	for range 20000 { // more than 4096 per millisecond: the counter rolls over
		s := g.Ordered()
		if len(s) != 36 || s[14] != '7' || !strings.ContainsRune("89ab", rune(s[19])) {
			t.Fatalf("Ordered() = %q, not a version 7 UUID", s)
		}
		if s <= prev {
			t.Fatalf("Ordered() = %q after %q: not increasing", s, prev)
		}
		prev = s
	}
}

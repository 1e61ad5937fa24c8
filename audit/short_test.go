package audit

import "testing"

// TestShort: a message abbreviates a hash longer than 12 characters to its
// first 12 and quotes anything shorter whole, so a short or empty value is
// never mistaken for a cut hash.
func TestShort(t *testing.T) {
	for in, want := range map[string]string{
		"":              `""`,
		"ab":            `"ab"`,
		"0123456789ab":  `"0123456789ab"`,
		"0123456789abc": "0123456789ab…",
	} {
		if got := short(in); got != want {
			t.Errorf("short(%q) = %s, want %s", in, got, want)
		}
	}
}

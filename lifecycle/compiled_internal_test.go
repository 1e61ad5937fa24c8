package lifecycle

import "testing"

// The table compiled through looplab/fsm allows exactly the table's rules.
func TestCompiledMatchesTable(t *testing.T) {
	events := map[Event]bool{}
	for _, r := range table {
		events[r.Event] = true
	}
	n := 0
	for _, s := range States() {
		for ev := range events {
			want := State("")
			for _, r := range table {
				if r.From == s && r.Event == ev {
					want = r.To
				}
			}
			if got := compiled()[s][ev]; got != want {
				t.Errorf("%s --%s--> %q, want %q", s, ev, got, want)
			}
			if want != "" {
				n++
			}
		}
	}
	if n != len(table) {
		t.Errorf("%d transitions compiled, the table has %d", n, len(table))
	}
}

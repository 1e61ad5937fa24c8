package lifecycle_test

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/lifecycle"
)

var allEvents = []lifecycle.Event{
	lifecycle.EventValid, lifecycle.EventInvalid, lifecycle.EventGranted, lifecycle.EventDenied,
	lifecycle.EventStart, lifecycle.EventAbort, lifecycle.EventOK, lifecycle.EventFail, lifecycle.EventRollback,
}

// pathTo returns the events that lead from DECLARED to s along the table.
func pathTo(t *testing.T, s lifecycle.State) []lifecycle.Event {
	t.Helper()
	paths := map[lifecycle.State][]lifecycle.Event{lifecycle.Declared: nil}
	for changed := true; changed; {
		changed = false
		for _, r := range lifecycle.Table() {
			p, ok := paths[r.From]
			if _, seen := paths[r.To]; ok && !seen {
				paths[r.To] = append(append([]lifecycle.Event(nil), p...), r.Event)
				changed = true
			}
		}
	}
	p, ok := paths[s]
	if !ok {
		t.Fatalf("state %s unreachable from DECLARED", s)
	}
	return p
}

func machineIn(t *testing.T, s lifecycle.State) *lifecycle.Machine {
	t.Helper()
	m := lifecycle.New(nil)
	for _, ev := range pathTo(t, s) {
		if _, err := m.Fire(ev, ""); err != nil {
			t.Fatalf("reaching %s: %v", s, err)
		}
	}
	if m.State() != s {
		t.Fatalf("state = %s, want %s", m.State(), s)
	}
	return m
}

// The transition table of docs/architecture.md ("The lifecycle"), written
// out independently of Table so that a change to either is caught; the
// document's table is checked against it too.
var want = map[lifecycle.State]map[lifecycle.Event]lifecycle.State{
	lifecycle.Declared:   {lifecycle.EventValid: lifecycle.Validated, lifecycle.EventInvalid: lifecycle.Failed},
	lifecycle.Validated:  {lifecycle.EventGranted: lifecycle.Authorized, lifecycle.EventDenied: lifecycle.Denied},
	lifecycle.Authorized: {lifecycle.EventStart: lifecycle.Executing, lifecycle.EventAbort: lifecycle.Aborted},
	lifecycle.Executing:  {lifecycle.EventOK: lifecycle.Completed, lifecycle.EventAbort: lifecycle.Aborted, lifecycle.EventFail: lifecycle.RolledBack},
	lifecycle.Aborted:    {lifecycle.EventRollback: lifecycle.RolledBack},
}

func TestTable_MatchesDesign(t *testing.T) {
	n := 0
	for _, r := range lifecycle.Table() {
		if got := want[r.From][r.Event]; got != r.To {
			t.Errorf("table has %s --%s--> %s, design says %q", r.From, r.Event, r.To, got)
		}
		n++
	}
	total := 0
	for _, evs := range want {
		total += len(evs)
	}
	if n != total {
		t.Errorf("table has %d transitions, design has %d", n, total)
	}

	// The document says the same: every row is a transition of want, and
	// there are as many.
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rows, ok := strings.Cut(string(doc), "\n| from | event | to | when |\n| --- | --- | --- | --- |\n")
	if !ok {
		t.Fatal("docs/architecture.md has no transition table (| from | event | to | when |)")
	}
	documented := 0
	for line := range strings.Lines(rows) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !strings.HasPrefix(line, "| ") || len(cells) != 4 {
			break
		}
		from, ev, to := lifecycle.State(strings.TrimSpace(cells[0])), lifecycle.Event(strings.TrimSpace(cells[1])), lifecycle.State(strings.TrimSpace(cells[2]))
		if got, ok := want[from][ev]; !ok || got != to {
			t.Errorf("docs/architecture.md has %s --%s--> %s, design says %q", from, ev, to, got)
		}
		documented++
	}
	if documented != total {
		t.Errorf("docs/architecture.md lists %d transitions, design has %d", documented, total)
	}
}

// Every (state, event) pair: allowed ones move and are recorded, all others
// are refused with a typed error and change nothing.
func TestMachine_Fire(t *testing.T) {
	for _, from := range lifecycle.States() {
		for _, ev := range allEvents {
			to, allowed := want[from][ev]
			t.Run(string(from)+"/"+string(ev), func(t *testing.T) {
				m := machineIn(t, from)
				before := m.History()
				tr, err := m.Fire(ev, "reason")
				if allowed {
					if err != nil {
						t.Fatalf("Fire: %v", err)
					}
					if m.State() != to || tr.From != from || tr.To != to || tr.Event != ev || tr.Reason != "reason" {
						t.Fatalf("got state %s transition %+v, want %s -> %s", m.State(), tr, from, to)
					}
					if h := m.History(); len(h) != len(before)+1 || h[len(h)-1] != tr {
						t.Fatalf("history not appended: %+v", h)
					}
					return
				}
				var te *lifecycle.TransitionError
				if !errors.As(err, &te) || !errors.Is(err, lifecycle.ErrRefused) {
					t.Fatalf("Fire = %v, want *TransitionError wrapping ErrRefused", err)
				}
				if te.From != from || te.Event != ev {
					t.Fatalf("error names %s/%s, want %s/%s", te.From, te.Event, from, ev)
				}
				if m.State() != from || len(m.History()) != len(before) {
					t.Fatalf("refused transition changed the machine: %s %+v", m.State(), m.History())
				}
			})
		}
	}
}

func TestMachine_FireUnknownEvent(t *testing.T) {
	m := lifecycle.New(nil)
	_, err := m.Fire("explode", "")
	if !errors.Is(err, lifecycle.ErrUnknownEvent) || errors.Is(err, lifecycle.ErrRefused) {
		t.Fatalf("Fire(unknown) = %v, want ErrUnknownEvent", err)
	}
	if m.State() != lifecycle.Declared || len(m.History()) != 0 {
		t.Fatal("unknown event changed the machine")
	}
}

func TestState_Terminal(t *testing.T) {
	for _, s := range lifecycle.States() {
		_, hasExit := want[s]
		if s.Terminal() == hasExit {
			t.Errorf("%s.Terminal() = %v, but it has outgoing transitions: %v", s, s.Terminal(), hasExit)
		}
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	if lifecycle.State("RUNNING").Valid() {
		t.Error("unknown state reported valid")
	}
}

func TestAllowed(t *testing.T) {
	for _, from := range lifecycle.States() {
		for _, to := range lifecycle.States() {
			exp := false
			for _, dst := range want[from] {
				exp = exp || dst == to
			}
			if got := lifecycle.Allowed(from, to); got != exp {
				t.Errorf("Allowed(%s, %s) = %v, want %v", from, to, got, exp)
			}
		}
	}
}

func TestMachine_HistoryTimestamps(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tick := 0
	m := lifecycle.New(func() time.Time { tick++; return base.Add(time.Duration(tick) * time.Millisecond) })
	for _, ev := range []lifecycle.Event{lifecycle.EventValid, lifecycle.EventGranted, lifecycle.EventStart, lifecycle.EventOK} {
		if _, err := m.Fire(ev, ""); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Created().Equal(base.Add(time.Millisecond)) {
		t.Errorf("Created = %v", m.Created())
	}
	h := m.History()
	if len(h) != 4 {
		t.Fatalf("history has %d entries, want 4", len(h))
	}
	for i, tr := range h {
		if want := base.Add(time.Duration(i+2) * time.Millisecond); !tr.At.Equal(want) {
			t.Errorf("transition %d at %v, want %v", i, tr.At, want)
		}
	}
	h[0].To = lifecycle.Failed // History returns a copy
	if m.History()[0].To != lifecycle.Validated {
		t.Error("History exposes internal slice")
	}
}

// Two goroutines racing to end an attempt: exactly one wins.
func TestMachine_ConcurrentEnd(t *testing.T) {
	for range 50 {
		m := machineIn(t, lifecycle.Executing)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, ev := range []lifecycle.Event{lifecycle.EventOK, lifecycle.EventAbort} {
			wg.Go(func() { _, errs[i] = m.Fire(ev, "") })
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("want exactly one winner, got %v / %v", errs[0], errs[1])
		}
		if len(m.History()) != 4 {
			t.Fatalf("history %d entries, want 4", len(m.History()))
		}
	}
}

func TestMachine_Next(t *testing.T) {
	m := machineIn(t, lifecycle.Executing)
	at := time.Unix(42, 0)
	tr, err := m.Next(lifecycle.EventOK, "r", at)
	if err != nil || tr.To != lifecycle.Completed || !tr.At.Equal(at) || tr.Reason != "r" {
		t.Fatalf("Next = %+v, %v", tr, err)
	}
	if m.State() != lifecycle.Executing || len(m.History()) != 3 {
		t.Fatal("Next changed the machine")
	}
	if _, err := m.Next(lifecycle.EventValid, "", at); !errors.Is(err, lifecycle.ErrRefused) {
		t.Fatalf("Next(refused) = %v", err)
	}
	if _, err := m.Next("nope", "", at); !errors.Is(err, lifecycle.ErrUnknownEvent) {
		t.Fatalf("Next(unknown) = %v", err)
	}
	got, err := m.FireAt(lifecycle.EventOK, "r", at)
	if err != nil || got != tr {
		t.Fatalf("FireAt = %+v, %v; want %+v", got, err, tr)
	}
}
